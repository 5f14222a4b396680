"""OpenTelemetry export and structured logs from the ``core-agent`` command, run as a user runs it.

The span exporter's entry point is declared by a distribution folder on the children's
``PYTHONPATH`` (see ``support.span_exporter_entry_points``), as an installed package declares it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.otlp_receiver import OtlpReceiver
from support.span_exporter_entry_points import span_exporter_site

CLI = Path(sys.executable).with_name("core-agent")


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return span_exporter_site(tmp_path_factory.mktemp("site"))


@pytest.fixture
def collector(receiver: OtlpReceiver) -> OtlpReceiver:
    receiver.clear()
    return receiver


@pytest.fixture(scope="module")
def data_dir(
    receiver: OtlpReceiver, site: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, set[str]]:
    """A task run with export on, and the span ids the collector received from the run."""
    receiver.clear()
    data = tmp_path_factory.mktemp("data")
    ran = cli(
        "run", "What is 12 * (3 + 4)?", data_dir=data, site=site,
        AGENT_OTEL_ENDPOINT=receiver.endpoint,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    # The command ends after its spans were handed over (closing waits for the queue).
    return data, {span.span_id for span in receiver.spans}


def cli(*args: str, data_dir: Path, site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "OTEL_"))}
    path = os.pathsep.join(p for p in (str(site), base.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [str(CLI), *args],
        env={**base, "PYTHONPATH": path, "AGENT_DATA_DIR": str(data_dir), "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_a_run_is_exported_and_export_sends_it_again(
    data_dir: tuple[Path, set[str]], collector: OtlpReceiver, site: Path
) -> None:
    tmp_path, received = data_dir
    trace = json.loads(cli("trace", "last", "--json", data_dir=tmp_path, site=site).stdout)
    stored = {span["span_id"] for span in trace["spans"]}
    assert received == stored

    collector.clear()
    sent = cli(
        "export", "last", "--otlp", collector.endpoint, "--json", data_dir=tmp_path, site=site
    )
    assert sent.returncode == 0, sent.stderr
    outcome = json.loads(sent.stdout)
    assert outcome == {
        "task_id": trace["task_id"],
        "trace_id": trace["trace_id"],
        "spans": len(stored),
        "destination": f"{collector.endpoint}/v1/traces",
    }
    # The same spans again, not a new trace: a collector sees one task once.
    assert {span.span_id for span in collector.spans} == stored
    assert {span.trace_id for span in collector.spans} == {trace["trace_id"]}
    chat = [s for s in collector.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chat) == 2 and all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in chat)

    collector.clear()
    plain = cli(
        "export", "last", "--otlp", data_dir=tmp_path, site=site,
        AGENT_OTEL_ENDPOINT=collector.endpoint,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith(f"sent {len(stored)} span(s) of task {trace['task_id']}")
    assert len(collector.spans) == len(stored)


def test_export_errors_are_one_line(
    data_dir: tuple[Path, set[str]], collector: OtlpReceiver, site: Path
) -> None:
    tmp_path = data_dir[0]
    nowhere = cli("export", "last", "--otlp", data_dir=tmp_path, site=site)
    assert nowhere.returncode == 2
    assert nowhere.stderr.strip().splitlines() == [
        "core-agent: no collector to send to: give one (`--otlp http://localhost:4318`), or set "
        "AGENT_OTEL_ENDPOINT"
    ]
    bad = cli("export", "last", "--otlp", "localhost:4318", data_dir=tmp_path, site=site)
    assert bad.returncode == 2 and "is not an http:// or https:// URL" in bad.stderr
    # Reviewer: an unclosed IPv6 host was "internal error: ValueError: Invalid IPv6 URL", for
    # export and for every run (AGENT_OTEL_ENDPOINT).
    for url in ("http://[::1", "http://localhost:port"):
        broken = cli("export", "last", "--otlp", url, data_dir=tmp_path, site=site)
        assert broken.returncode == 2, broken.stderr
        assert len(broken.stderr.strip().splitlines()) == 1, broken.stderr
        assert "is not an http:// or https:// URL" in broken.stderr
    run = cli("run", "What is 1 + 1?", data_dir=tmp_path, site=site, AGENT_OTEL_ENDPOINT=url)
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "AGENT_OTEL_ENDPOINT" in line.upper() or "otel_endpoint" in line, line
    assert "internal error" not in line

    collector.status = 400
    refused = cli("export", "last", "--otlp", collector.endpoint, data_dir=tmp_path, site=site)
    assert refused.returncode == 1
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("core-agent: SpanExportError: the collector at ")
    assert "400" in line and "Traceback" not in refused.stderr


def test_degraded_features_are_warned_about_on_stderr_by_default(
    site: Path, tmp_path: Path
) -> None:
    ran = cli(
        "run", "2 ** 10", data_dir=tmp_path, site=site,
        AGENT_SPAN_EXPORTER="zipkin_nope", AGENT_OTEL_ENDPOINT="http://127.0.0.1:9",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr  # the task runs without export
    warning = next(line for line in ran.stderr.splitlines() if "spans are not exported" in line)
    assert warning.startswith("WARNING core_agent.container: ")
    assert "'zipkin_nope'" in warning and "otlp" in warning  # what is installed instead

    quiet = cli(
        "-q", "run", "2 ** 10", data_dir=tmp_path, site=site, AGENT_SPAN_EXPORTER="zipkin_nope"
    )
    assert "spans are not exported" not in quiet.stderr


def test_json_logs_tie_each_record_to_its_task_and_span(
    site: Path, tmp_path: Path, openai_server
) -> None:
    openai_server.reply("Hello from the server.")
    ran = cli(
        "-v", "run", "Say hello", data_dir=tmp_path, site=site,
        AGENT_LOG_FORMAT="json",
        AGENT_MODEL="openai/local-model",
        AGENT_MODEL_API_BASE=openai_server.base_url,
        AGENT_MODEL_API_KEY="sk-x",
        AGENT_MODEL_MAX_RETRIES="0",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    trace = json.loads(cli("trace", "last", "--json", data_dir=tmp_path, site=site).stdout)
    llm = next(span for span in trace["spans"] if span["kind"] == "llm")
    # httpx's own record of the model request, made inside the model call's span.
    request = next(r for r in records if r["logger"] == "httpx")
    assert request["level"] == "INFO" and "POST" in request["message"]
    assert request["task_id"] == trace["task_id"]
    assert request["trace_id"] == trace["trace_id"]
    assert request["span_id"] == llm["span_id"]
    assert {r["message"] for r in records if r["task_id"] == trace["task_id"]} >= {
        "task runs with the react strategy",
        "task succeeded",
    }
