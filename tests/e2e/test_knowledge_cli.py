"""``core-agent ingest``, ``search`` and ``vectors``, run as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.test_cli import run


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "garden.md").write_text("# Garden\n\nTomatoes need sun and regular watering.\n")
    (folder / "kitchen.txt").write_text("Bread dough rises best in a warm kitchen.\n")
    return folder


@pytest.mark.parametrize("backend", ["sqlite_vec", "lancedb"])
def test_the_environment_variable_switches_the_vector_backend(
    tmp_path: Path, notes: Path, backend: str
) -> None:
    data = tmp_path / "data"
    ingest = run("ingest", str(notes), data_dir=data, AGENT_VECTOR_PROVIDER=backend)
    assert ingest.returncode == 0, ingest.stderr
    assert "2 ingested" in ingest.stdout

    found = run(
        "search", "watering tomatoes", "--json", data_dir=data, AGENT_VECTOR_PROVIDER=backend
    )
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits[0]["source"].endswith("garden.md")
    assert set(hits[0]["scores"]) == {"lexical", "vector"}
    assert hits[0]["end_offset"] > hits[0]["start_offset"] >= 0

    used = json.loads(
        run("vectors", "info", "--json", data_dir=data, AGENT_VECTOR_PROVIDER=backend).stdout
    )
    other = "lancedb" if backend == "sqlite_vec" else "sqlite_vec"
    unused = json.loads(run("vectors", "info", "--provider", other, "--json", data_dir=data).stdout)
    assert [(c["namespace"], c["count"]) for c in used] == [("default", 2)]
    assert unused == []
    assert (data / "lancedb").exists() == (backend == "lancedb")


def test_ingest_reports_failures_and_search_prints_ranked_hits(tmp_path: Path, notes: Path) -> None:
    data = tmp_path / "data"
    (notes / "broken.txt").write_bytes(b"\xff\xfe\xfa not utf8")
    ingest = run("ingest", str(notes), data_dir=data)
    assert ingest.returncode == 1
    assert "2 ingested" in ingest.stdout and "1 failed" in ingest.stdout
    assert "broken.txt" in ingest.stderr and "not UTF-8" in ingest.stderr

    again = run("ingest", str(notes / "garden.md"), "--json", data_dir=data)
    assert json.loads(again.stdout)["status"] == "unchanged"

    shown = run("search", "warm bread", data_dir=data)
    assert shown.returncode == 0
    assert shown.stdout.lstrip().startswith("1.")
    assert "kitchen.txt" in shown.stdout and "lexical" in shown.stdout

    missing = run("ingest", str(tmp_path / "nope"), data_dir=data)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    empty = run("search", " ", data_dir=data)
    assert empty.returncode == 2 and "empty" in empty.stderr


def test_dual_write_then_verify_from_the_command_line(tmp_path: Path, notes: Path) -> None:
    data = tmp_path / "data"
    run("ingest", str(notes), data_dir=data, AGENT_VECTOR_MIGRATION_DUAL_WRITE="on")
    verified = run("vectors", "verify", "--json", data_dir=data)
    report = json.loads(verified.stdout)
    assert verified.returncode == 0 and report["consistent"] is True
    assert (report["from"], report["to"]) == ("sqlite_vec", "lancedb")

    (notes / "new.txt").write_text("Written while dual write was off.")
    run("ingest", str(notes), data_dir=data)
    drift = run("vectors", "verify", data_dir=data)
    assert drift.returncode == 1
    assert "only in sqlite_vec (1)" in drift.stdout and "inconsistent" in drift.stdout

    migrate = run(
        "vectors", "migrate", "--from", "sqlite_vec", "--to", "lancedb", "--json", data_dir=data
    )
    assert migrate.returncode == 0, migrate.stderr
    assert json.loads(migrate.stdout)["copied"] == 1  # progress went to stderr
    assert run("vectors", "verify", data_dir=data).returncode == 0


def test_reembed_from_the_command_line_keeps_ingestion_idempotent(
    tmp_path: Path, notes: Path
) -> None:
    data = tmp_path / "data"
    run("ingest", str(notes), data_dir=data)
    mixed = run("search", "tomatoes", data_dir=data, AGENT_EMBEDDING_DIMENSION="64")
    assert mixed.returncode == 2 and "reembed" in mixed.stderr

    rebuilt = run(
        "vectors", "reembed", "default", "--json", data_dir=data, AGENT_EMBEDDING_DIMENSION="64"
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["embedded"] == 2
    again = run("ingest", str(notes), data_dir=data, AGENT_EMBEDDING_DIMENSION="64")
    assert "2 unchanged" in again.stdout
    found = run("search", "tomatoes", "--json", data_dir=data, AGENT_EMBEDDING_DIMENSION="64")
    assert json.loads(found.stdout)[0]["source"].endswith("garden.md")


def test_switching_the_keyword_index_is_noticed_and_rebuilt(tmp_path: Path, notes: Path) -> None:
    data = tmp_path / "data"
    assert run("ingest", str(notes), data_dir=data, AGENT_LEXICAL_INDEX="fts5").returncode == 0
    assert not (data / "tantivy").exists()

    # The default index (Tantivy) never saw these chunks, and re-ingesting skips them.
    again = run("ingest", str(notes), data_dir=data)
    assert "2 unchanged" in again.stdout
    stale = run("search", "bread dough", "--json", data_dir=data)
    assert stale.returncode == 0
    assert "lexical" not in json.loads(stale.stdout)[0]["scores"]
    assert "keywords rebuild" in stale.stderr and "holds 0 of the 2 chunks" in stale.stderr

    rebuilt = run("keywords", "rebuild", data_dir=data)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "indexed 2 chunks of 'default' with tantivy" in rebuilt.stdout
    as_json = run("keywords", "rebuild", "--json", data_dir=data)
    assert json.loads(as_json.stdout) == {"namespace": "default", "indexed": 2, "index": "tantivy"}
    fixed = run("search", "bread dough", "--json", data_dir=data)
    assert fixed.stderr == ""
    first = json.loads(fixed.stdout)[0]
    assert first["source"].endswith("kitchen.txt") and first["ranks"]["lexical"] == 1


@pytest.mark.parametrize("keyword_index", ["tantivy", "fts5"])
def test_a_chinese_query_finds_the_chinese_document_by_its_keywords(
    tmp_path: Path, keyword_index: str
) -> None:
    folder = tmp_path / "books"
    folder.mkdir()
    rows = (Path(__file__).parents[1] / "data" / "documents_zh.jsonl").read_text().splitlines()
    for row in map(json.loads, rows):
        (folder / f"{row['id']}.txt").write_text(row["text"] + "\n", encoding="utf-8")
    data = tmp_path / "data"
    env = {"AGENT_LEXICAL_INDEX": keyword_index}
    assert run("ingest", str(folder), data_dir=data, **env).returncode == 0
    for query, expected in [("乌龙茶怎么冲泡", "tea.txt"), ("林黛玉", "novel.txt")]:
        found = run("search", query, "--json", data_dir=data, **env)
        assert found.returncode == 0, found.stderr
        first = json.loads(found.stdout)[0]
        assert first["source"].endswith(expected)
        assert first["ranks"]["lexical"] == 1, first
