"""Chinese queries find Chinese passages by keywords alone, in every keyword index, numbers
and Latin words written inside Chinese included, and stores made with older terms are
upgraded in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import rjieba
import tantivy

from core_agent.contracts.lexical_index import ILexicalIndex
from providers.lexical.cjk_segmentation import segmented
from providers.lexical.fts5_index import Fts5LexicalIndex
from providers.lexical.passages import terms
from providers.lexical.rank_bm25_index import RankBM25LexicalIndex
from providers.lexical.tantivy_index import TantivyLexicalIndex
from providers.sqlite.database import sqlite_driver
from providers.sqlite.migrations import MIGRATIONS, _statements
from shared.cjk_text import SEGMENTABLE

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parents[1] / "data"
DOCS = [json.loads(line) for line in (DATA / "documents_zh.jsonl").read_text().splitlines()]
QUERIES = [
    json.loads(line) for line in (DATA / "keyword_queries_zh.jsonl").read_text().splitlines()
]
# The same sentence in every chapter; only the chapter, the year and the model number differ.
CHAPTERS = [
    (f"ch{i}", f"这是第{i}章的内容，讲述了公司在20{i}5年的发展。型号A{i}X处理器。")
    for i in range(1, 9)
]
MIXED = [
    ("fullwidth", "第９章：ＧＰＴ－４ｏ的v2.1版本发布了。"),
    ("config", "把max_tokens设为4096。"),
    ("korean", "서울 지사는 2099년에 열렸다."),
    ("japanese", "モデルZ9の説明書を読んだ。"),
]


def make(kind: str, root: Path) -> ILexicalIndex:
    if kind == "fts5":
        return Fts5LexicalIndex(root / "core_agent.db")
    if kind == "bm25":
        return RankBM25LexicalIndex(root / "core_agent.db")
    return TantivyLexicalIndex(root / "tantivy")


def _old_cjk_terms(text: str) -> str:
    """The ``terms`` of a passage before digits and Latin inside Chinese were set apart."""
    return " ".join(w for run in SEGMENTABLE.findall(text) for w in rjieba.cut_for_search(run))


def test_han_and_kana_runs_are_cut_into_words_and_set_apart_from_digits() -> None:
    assert terms("我们在阅读应用里保存了高亮笔记") == [
        "我们", "在", "阅读", "应用", "里", "保存", "了", "高亮", "笔记"
    ]  # fmt: skip
    english = "SQLite's WAL, version 3.45 (don't split me)"
    assert segmented(english) == english
    # Search mode also indexes the shorter words inside a long one.
    assert {"人民", "共和国", "中华人民共和国"} <= set(terms("中华人民共和国"))
    assert {"第", "7", "章", "2075", "年", "a7x", "处理器"} <= set(terms(CHAPTERS[6][1]))
    assert {"9", "gpt", "4o", "v2", "1"} <= set(terms(MIXED[0][1]))  # full-width: NFKC
    assert {"2099", "년에"} <= set(terms(MIXED[2][1]))  # Korean words stay whole


@pytest.mark.parametrize("kind", ["fts5", "tantivy", "bm25"])
async def test_numbers_and_latin_words_inside_chinese_text_are_found(
    kind: str, tmp_path: Path
) -> None:
    index = make(kind, tmp_path)
    await index.add("zh", CHAPTERS + MIXED)
    for query in ["第7章", "2075年", "2075", "A7X", "a7x", "A7X处理器", "第７章", "ａ７ｘ"]:
        hits = await index.search("zh", query, 8)
        assert hits and hits[0].id == "ch7", (query, [h.id for h in hits])
        # Ranked first for the number, not by a tie with every chapter.
        assert len(hits) == 1 or hits[0].score > hits[1].score, (query, hits[:2])
    for query in ["2075", "A7X"]:
        assert [h.id for h in await index.search("zh", query, 8)] == ["ch7"], query
    for query, expected in [
        ("第9章", "fullwidth"),
        ("GPT-4o", "fullwidth"),
        ("v2.1", "fullwidth"),
        ("max_tokens", "config"),
        ("4096", "config"),
        ("2099", "korean"),
        ("Z9", "japanese"),
    ]:
        hits = await index.search("zh", query, 3)
        assert hits and hits[0].id == expected, (query, [h.id for h in hits])
    # Found through its normalized terms, returned as written.
    assert (await index.search("zh", "GPT-4o", 1))[0].text == MIXED[0][1]
    await index.close()


@pytest.mark.parametrize("kind", ["fts5", "tantivy", "bm25"])
async def test_a_chinese_query_finds_its_chinese_document_by_keywords(
    kind: str, tmp_path: Path
) -> None:
    index = make(kind, tmp_path)
    await index.add("zh", [(d["id"], d["text"]) for d in DOCS])
    for row in QUERIES:
        hits = await index.search("zh", row["query"], 3)
        assert hits and hits[0].id == row["expected"], (row, [h.id for h in hits])
    first = (await index.search("zh", "乌龙茶", 1))[0]
    assert first.text == next(d["text"] for d in DOCS if d["id"] == "tea")  # as written
    # English and mixed text still work beside Chinese.
    await index.add("zh", [("en", "Tomatoes need sun."), ("mixed", "SQLite 的 WAL 模式")])
    assert (await index.search("zh", "tomatoes", 1))[0].id == "en"
    assert (await index.search("zh", "WAL 模式", 1))[0].id == "mixed"
    await index.close()


def _old_fts5_store(path: Path) -> None:
    """A database as version 6 left it: one-column FTS5 tables holding Chinese text."""
    conn = sqlite_driver().connect(str(path))
    for number, script in enumerate(MIGRATIONS[:6], start=1):
        assert isinstance(script, str)
        for statement in _statements(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(
        "CREATE VIRTUAL TABLE agent_fts_old USING fts5(text,"
        " tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.execute("INSERT INTO agent_lexical_namespaces VALUES ('zh', 'agent_fts_old')")
    for rowid, doc in enumerate(DOCS, start=1):
        conn.execute("INSERT INTO agent_lexical_passages VALUES (?, 'zh', ?)", (rowid, doc["id"]))
        conn.execute("INSERT INTO agent_fts_old (rowid, text) VALUES (?, ?)", (rowid, doc["text"]))
    conn.commit()
    conn.close()


async def test_an_existing_fts5_store_is_reindexed_by_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "core_agent.db"
    _old_fts5_store(path)
    index = Fts5LexicalIndex(path)  # opening migrates
    assert await index.count("zh") == len(DOCS)
    for row in QUERIES:
        hits = await index.search("zh", row["query"], 1)
        assert hits and hits[0].id == row["expected"], row
    await index.add("zh", [("tea", "红茶是全发酵茶。")])  # replacing a migrated row
    assert (await index.search("zh", "红茶", 1))[0].id == "tea"
    assert await index.count("zh") == len(DOCS)
    await index.close()


async def test_an_existing_tantivy_folder_is_rebuilt_with_chinese_words(tmp_path: Path) -> None:
    root = tmp_path / "tantivy"
    folder = root / "ns-zh"
    folder.mkdir(parents=True)
    # The schema and analyzer of the index before Chinese words had their own field.
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(
        "text", stored=True, tokenizer_name="core_agent_text", index_option="freq"
    )
    old = tantivy.Index(builder.build(), path=str(folder))
    old.register_tokenizer(
        "core_agent_text",
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.lowercase())
        .build(),
    )
    writer = old.writer(20_000_000, 1)
    for doc in DOCS:
        writer.add_document(tantivy.Document(id=doc["id"], text=doc["text"]))
    writer.commit()
    writer.wait_merging_threads()
    del old, writer

    index = TantivyLexicalIndex(root)
    assert await index.count("zh") == len(DOCS)
    for row in QUERIES:
        hits = await index.search("zh", row["query"], 1)
        assert hits and hits[0].id == row["expected"], row
    assert sorted(p.name for p in root.iterdir()) == ["ns-zh"]  # no leftovers of the swap
    await index.close()


async def test_an_fts5_store_with_only_chinese_words_as_terms_is_reindexed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "core_agent.db"
    conn = sqlite_driver().connect(str(path))
    for number, script in enumerate(MIGRATIONS[:12], start=1):
        if callable(script):
            script(conn)
        else:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    # A table as version 12 made it: the text indexed whole, ``terms`` its Chinese words.
    conn.execute(
        "CREATE VIRTUAL TABLE agent_fts_v12 USING fts5(text, terms,"
        " tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.execute("INSERT INTO agent_lexical_namespaces VALUES ('zh', 'agent_fts_v12')")
    for rowid, (passage_id, text) in enumerate(CHAPTERS, start=1):
        conn.execute("INSERT INTO agent_lexical_passages VALUES (?, 'zh', ?)", (rowid, passage_id))
        conn.execute(
            "INSERT INTO agent_fts_v12 (rowid, text, terms) VALUES (?, ?, ?)",
            (rowid, text, _old_cjk_terms(text)),
        )
    conn.commit()
    conn.close()

    index = Fts5LexicalIndex(path)  # opening migrates
    assert await index.count("zh") == len(CHAPTERS)
    for query in ["第7章", "2075", "A7X"]:
        hits = await index.search("zh", query, 8)
        assert hits and hits[0].id == "ch7", (query, [h.id for h in hits])
    assert (await index.search("zh", "2075", 1))[0].text == CHAPTERS[6][1]
    await index.close()


async def test_a_tantivy_folder_with_only_chinese_words_as_terms_is_rebuilt(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tantivy"
    folder = root / "ns-zh"
    folder.mkdir(parents=True)
    # The schema of the index when ``terms`` held the Chinese words only.
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    for name in ("text", "terms"):
        builder.add_text_field(
            name, stored=name == "text", tokenizer_name="core_agent_text", index_option="freq"
        )
    old = tantivy.Index(builder.build(), path=str(folder))
    old.register_tokenizer(
        "core_agent_text",
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.lowercase())
        .build(),
    )
    writer = old.writer(20_000_000, 1)
    for passage_id, text in CHAPTERS:
        writer.add_document(tantivy.Document(id=passage_id, text=text, terms=_old_cjk_terms(text)))
    writer.commit()
    writer.wait_merging_threads()
    del old, writer

    index = TantivyLexicalIndex(root)
    assert await index.count("zh") == len(CHAPTERS)
    for query in ["第7章", "2075", "A7X"]:
        hits = await index.search("zh", query, 8)
        assert hits and hits[0].id == "ch7", (query, [h.id for h in hits])
    assert (await index.search("zh", "2075", 1))[0].text == CHAPTERS[6][1]
    assert sorted(p.name for p in root.iterdir()) == ["ns-zh"]  # no leftovers of the swap
    await index.close()
