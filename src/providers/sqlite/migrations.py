"""Versioned schema migrations, tracked with ``PRAGMA user_version``.

Append a migration to ``MIGRATIONS``; never edit one that has shipped. Each runs in its own
transaction with the version bump, so a crash leaves the schema at a known version. A
migration is an SQL script, or a function of the connection where rows must be rewritten by
code (re-indexing keyword tables with the Chinese segmenter).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable

from core_agent.contracts.errors import DataTooNewError
from providers.sqlite.database import transaction


def _keyword_tables_with_cjk_terms(conn: sqlite3.Connection) -> None:
    """Rebuild each namespace's FTS5 table with a ``terms`` column (for Chinese words).

    FTS5 tables cannot gain a column, so each is copied into a new table, the old one
    dropped and the namespace pointed at the new one; passage rowids are kept, so
    ``agent_lexical_passages`` stays valid.
    """
    # ``terms`` is left empty: migration 13 rebuilds these tables from the text right after,
    # so segmenting here would be work thrown away.
    tables = conn.execute("SELECT namespace, table_name FROM agent_lexical_namespaces").fetchall()
    for namespace, old in tables:
        new = f"{old}_cjk"
        # The table as it was made when this migration shipped, whatever fts5_index makes now.
        conn.execute(
            f"CREATE VIRTUAL TABLE {new} USING fts5(text, terms,"
            " tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        rows = conn.execute(f"SELECT rowid, text FROM {old}").fetchall()
        conn.executemany(
            f"INSERT INTO {new} (rowid, text, terms) VALUES (?, ?, '')",
            rows,
        )
        conn.execute(f"DROP TABLE {old}")
        conn.execute(
            "UPDATE agent_lexical_namespaces SET table_name = ? WHERE namespace = ?",
            (new, namespace),
        )


def _keyword_tables_index_segmented_text(conn: sqlite3.Connection) -> None:
    """Rebuild each namespace's FTS5 table to index only ``terms``, the segmented text.

    ``terms`` held only the words of the Chinese and Japanese runs, and ``text`` kept
    ``这是第7章`` as one token, so the digits and Latin letters written against Chinese
    (第7章, 2075年, A7X处理器) were terms of neither column and no search found them. Each
    table is copied into a new one whose ``terms`` is the whole text as
    ``cjk_segmentation.segmented`` rewrites it and whose ``text`` is unindexed; rowids are
    kept, so ``agent_lexical_passages`` stays valid.
    """
    from providers.lexical.fts5_index import columns

    tables = conn.execute("SELECT namespace, table_name FROM agent_lexical_namespaces").fetchall()
    for namespace, old in tables:
        new = f"agent_fts_{uuid.uuid4().hex[:16]}"
        # The table as it was made when this migration shipped, whatever fts5_index makes now.
        conn.execute(
            f"CREATE VIRTUAL TABLE {new} USING fts5(text UNINDEXED, terms,"
            " tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        last = 0
        while rows := conn.execute(
            f"SELECT rowid, text FROM {old} WHERE rowid > ? ORDER BY rowid LIMIT 1000", (last,)
        ).fetchall():
            conn.executemany(
                f"INSERT INTO {new} (rowid, text, terms) VALUES (?, ?, ?)",
                [(rowid, *columns(text)) for rowid, text in rows],
            )
            last = rows[-1][0]
        conn.execute(f"DROP TABLE {old}")
        conn.execute(
            "UPDATE agent_lexical_namespaces SET table_name = ? WHERE namespace = ?",
            (new, namespace),
        )


def _tasks_record_their_response_model(conn: sqlite3.Connection) -> None:
    """Add ``agent_tasks.response_schema_json`` and ``response_model``, unless present.

    Written to run on a schema that already has them (a database whose version was set back,
    or a merge that renumbers migrations), since SQLite has no ``ADD COLUMN IF NOT EXISTS``.
    """
    present = {row[1] for row in conn.execute("PRAGMA table_info(agent_tasks)")}
    for column in ("response_schema_json", "response_model"):
        if column not in present:
            conn.execute(f"ALTER TABLE agent_tasks ADD COLUMN {column} TEXT")


def _sessions_as_conversations(conn: sqlite3.Connection) -> None:
    """Sessions as conversations: a session can be closed; its history and summaries.

    The history is one row per message, numbered per session; a summary stands for the
    history up to the entry it names. Sessions from before start with an empty history. It
    runs again harmlessly over its own result (a database whose version was set back, a
    merge that renumbers it).
    """
    columns = {row[1] for row in conn.execute("PRAGMA table_info(agent_sessions)")}
    if "closed_at" not in columns:
        conn.execute("ALTER TABLE agent_sessions ADD COLUMN closed_at TEXT")
    for statement in _statements(
        """
        CREATE INDEX IF NOT EXISTS agent_sessions_by_user ON agent_sessions(user_id, updated_at);
        CREATE INDEX IF NOT EXISTS agent_sessions_by_update ON agent_sessions(updated_at);
        CREATE TABLE IF NOT EXISTS agent_session_entries (
            session_id   TEXT NOT NULL,
            seq          INTEGER NOT NULL,
            task_id      TEXT NOT NULL,
            message_json TEXT NOT NULL,
            tainted      INTEGER NOT NULL DEFAULT 0,
            created_at   TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS agent_session_entries_by_task
            ON agent_session_entries(session_id, task_id);
        CREATE TABLE IF NOT EXISTS agent_session_summaries (
            session_id  TEXT NOT NULL,
            through_seq INTEGER NOT NULL,
            content     TEXT NOT NULL,
            task_id     TEXT NOT NULL,
            tainted     INTEGER NOT NULL DEFAULT 0,
            usage_json  TEXT NOT NULL DEFAULT '{}',
            created_at  TEXT NOT NULL,
            PRIMARY KEY (session_id, through_seq)
        ) WITHOUT ROWID
        """
    ):
        conn.execute(statement)


def _sessions_fork_and_retry(conn: sqlite3.Connection) -> None:
    """Session turns are numbered and can be superseded; a session records its fork origin.

    ``agent_session_entries.turn`` numbers each task's part of a history from 1 (the turns
    already there are numbered in the order they were added); ``superseded_by`` on entries
    and summaries names the task that retried them. It runs again harmlessly over its own
    result (a database whose version was set back, a merge that renumbers it).
    """
    added = {
        "agent_session_entries": (
            ("turn", "INTEGER NOT NULL DEFAULT 0"),
            ("superseded_by", "TEXT"),
        ),
        "agent_session_summaries": (("superseded_by", "TEXT"),),
        "agent_sessions": (("forked_from", "TEXT"), ("forked_at_turn", "INTEGER")),
    }
    for table, columns in added.items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns:
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
    conn.execute(
        """
        WITH firsts AS (
            SELECT session_id, task_id, MIN(seq) AS first_seq FROM agent_session_entries
            GROUP BY session_id, task_id),
        numbered AS (
            SELECT session_id, task_id,
                   ROW_NUMBER() OVER (PARTITION BY session_id ORDER BY first_seq) AS turn
            FROM firsts)
        UPDATE agent_session_entries SET turn = (
            SELECT n.turn FROM numbered AS n
            WHERE n.session_id = agent_session_entries.session_id
              AND n.task_id = agent_session_entries.task_id)
        WHERE turn = 0
        """
    )


def _forks_carry_usage(conn: sqlite3.Connection) -> None:
    """A forked session records the usage it carries from its origin (its session limits').

    Idempotent like ``_sessions_fork_and_retry`` (a merge may renumber it). Forks made
    before it carry nothing: what their origin used then is not known for sure any more.
    """
    present = {row[1] for row in conn.execute("PRAGMA table_info(agent_sessions)")}
    if "inherited_usage_json" not in present:
        conn.execute(
            "ALTER TABLE agent_sessions ADD COLUMN inherited_usage_json TEXT NOT NULL DEFAULT '{}'"
        )


Migration = str | Callable[[sqlite3.Connection], None]

MIGRATIONS: tuple[Migration, ...] = (
    # 1: sessions, tasks, task events, traces.
    """
    CREATE TABLE agent_sessions (
        id            TEXT PRIMARY KEY,
        user_id       TEXT,
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL,
        metadata_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE agent_tasks (
        id          TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES agent_sessions(id),
        trace_id    TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN
                    ('queued','running','waiting_approval','succeeded','failed','canceled')),
        strategy    TEXT,
        risk_level  TEXT,
        input_json  TEXT NOT NULL,
        output_json TEXT,
        error_text  TEXT,
        usage_json  TEXT NOT NULL DEFAULT '{}',
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    CREATE INDEX agent_tasks_by_session ON agent_tasks(session_id, created_at);
    CREATE INDEX agent_tasks_by_created ON agent_tasks(created_at);
    CREATE INDEX agent_tasks_by_status ON agent_tasks(status);
    CREATE TABLE agent_task_events (
        id           TEXT NOT NULL,
        task_id      TEXT NOT NULL REFERENCES agent_tasks(id),
        seq          INTEGER NOT NULL,
        event_type   TEXT NOT NULL,
        payload_json TEXT NOT NULL,
        occurred_at  TEXT NOT NULL,
        UNIQUE (task_id, seq)
    );
    CREATE TABLE agent_traces (
        id           TEXT NOT NULL,
        trace_id     TEXT NOT NULL,
        task_id      TEXT NOT NULL,
        parent_id    TEXT,
        span         TEXT NOT NULL,
        kind         TEXT NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('ok','error')),
        started_at   TEXT NOT NULL,
        ended_at     TEXT NOT NULL,
        latency_ms   REAL NOT NULL,
        token_in     INTEGER,
        token_out    INTEGER,
        cost_usd     REAL,
        error_text   TEXT,
        payload_json TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX agent_traces_by_task ON agent_traces(task_id, started_at);
    CREATE INDEX agent_traces_by_trace ON agent_traces(trace_id, started_at);
    """,
    # 2: checkpoints a task resumes from.
    """
    CREATE TABLE agent_checkpoints (
        task_id    TEXT NOT NULL,
        key        TEXT NOT NULL,
        state_json TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (task_id, key)
    );
    """,
    # 3: long-term memory, vector collections (sqlite-vec), keyword index (FTS5), documents.
    """
    CREATE TABLE agent_memories (
        id         TEXT PRIMARY KEY,
        scope      TEXT NOT NULL CHECK (scope IN ('session','long_term')),
        namespace  TEXT NOT NULL,
        key        TEXT NOT NULL,
        value_json TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (scope, namespace, key)
    );
    CREATE INDEX agent_memories_by_update ON agent_memories(scope, namespace, updated_at);
    CREATE TABLE agent_vector_collections (
        namespace       TEXT PRIMARY KEY,
        table_name      TEXT NOT NULL UNIQUE,
        embedding_model TEXT NOT NULL,
        dimension       INTEGER NOT NULL,
        partitions      INTEGER NOT NULL,
        created_at      TEXT NOT NULL
    );
    CREATE TABLE agent_vector_records (
        rowid         INTEGER PRIMARY KEY,
        collection    TEXT NOT NULL,
        id            TEXT NOT NULL,
        text          TEXT NOT NULL,
        metadata_json TEXT NOT NULL,
        vector        BLOB NOT NULL,
        UNIQUE (collection, id)
    );
    CREATE TABLE agent_vector_tags (
        tag   TEXT NOT NULL,
        rowid INTEGER NOT NULL REFERENCES agent_vector_records(rowid) ON DELETE CASCADE,
        PRIMARY KEY (tag, rowid)
    ) WITHOUT ROWID;
    CREATE INDEX agent_vector_tags_by_row ON agent_vector_tags(rowid);
    CREATE TABLE agent_lexical_passages (
        rowid     INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        id        TEXT NOT NULL,
        UNIQUE (namespace, id)
    );
    CREATE TABLE agent_lexical_namespaces (
        namespace  TEXT PRIMARY KEY,
        table_name TEXT NOT NULL UNIQUE
    );
    CREATE TABLE agent_bm25_passages (
        namespace TEXT NOT NULL,
        id        TEXT NOT NULL,
        text      TEXT NOT NULL,
        PRIMARY KEY (namespace, id)
    );
    CREATE TABLE agent_documents (
        namespace       TEXT NOT NULL,
        document_id     TEXT NOT NULL,
        source          TEXT NOT NULL,
        content_hash    TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        chunk_count     INTEGER NOT NULL,
        media_type      TEXT NOT NULL,
        title           TEXT,
        ingested_at     TEXT NOT NULL,
        PRIMARY KEY (namespace, document_id)
    );
    """,
    # 4: provenance: memories and tasks carry taint; a task records its sandbox's settings.
    """
    ALTER TABLE agent_memories ADD COLUMN tainted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agent_tasks ADD COLUMN tainted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agent_tasks ADD COLUMN sandbox_json TEXT;
    """,
    # 5: durable runs: who runs a task and until when (a lease), cancel requests from other
    # processes, the conversation a run resumes from, the tool-call ledger; tasks listed by
    # status without a sort.
    """
    ALTER TABLE agent_tasks ADD COLUMN owner TEXT;
    ALTER TABLE agent_tasks ADD COLUMN lease_expires_at TEXT;
    ALTER TABLE agent_tasks ADD COLUMN cancel_requested TEXT;
    CREATE INDEX agent_tasks_by_status_created ON agent_tasks(status, created_at);
    CREATE TABLE agent_task_messages (
        task_id      TEXT NOT NULL,
        scope        TEXT NOT NULL,
        position     INTEGER NOT NULL,
        message_json TEXT NOT NULL,
        PRIMARY KEY (task_id, scope, position)
    ) WITHOUT ROWID;
    CREATE TABLE agent_tool_calls (
        idempotency_key TEXT PRIMARY KEY,
        task_id         TEXT NOT NULL,
        call_id         TEXT NOT NULL,
        tool            TEXT NOT NULL,
        arguments_json  TEXT NOT NULL,
        idempotent      INTEGER NOT NULL,
        status          TEXT NOT NULL CHECK (status IN ('started','finished','timed_out')),
        result_json     TEXT,
        started_at      TEXT NOT NULL,
        ended_at        TEXT,
        note            TEXT
    );
    CREATE INDEX agent_tool_calls_by_task ON agent_tool_calls(task_id, started_at);
    """,
    # 6: approval requests as rows (kept with the events that record them), so pending ones
    # are one query and a decision is taken once; filled from the existing event logs (the
    # last decision of a request wins, as when the log is read; no UPDATE ... FROM, which
    # older system SQLite libraries lack).
    """
    CREATE TABLE agent_approvals (
        request_id    TEXT PRIMARY KEY,
        task_id       TEXT NOT NULL,
        status        TEXT NOT NULL CHECK (status IN ('pending','approved','denied')),
        request_json  TEXT NOT NULL,
        decision_json TEXT,
        created_at    TEXT NOT NULL,
        decided_at    TEXT
    );
    CREATE INDEX agent_approvals_by_status ON agent_approvals(status, created_at);
    CREATE INDEX agent_approvals_by_task ON agent_approvals(task_id, status);
    INSERT OR IGNORE INTO agent_approvals (request_id, task_id, status, request_json, created_at)
        SELECT json_extract(payload_json, '$.request.request_id'), task_id, 'pending',
               json_extract(payload_json, '$.request'), occurred_at
        FROM agent_task_events
        WHERE event_type = 'approval.requested' AND json_valid(payload_json)
              AND json_extract(payload_json, '$.request.request_id') IS NOT NULL
        ORDER BY task_id, seq;
    UPDATE agent_approvals SET decided_at = (
            SELECT e.occurred_at FROM agent_task_events AS e
            WHERE e.task_id = agent_approvals.task_id AND e.event_type = 'approval.resolved'
                  AND json_valid(e.payload_json)
                  AND json_extract(e.payload_json, '$.decision.request_id')
                      = agent_approvals.request_id
            ORDER BY e.seq DESC LIMIT 1);
    UPDATE agent_approvals SET decision_json = (
            SELECT json_extract(e.payload_json, '$.decision') FROM agent_task_events AS e
            WHERE e.task_id = agent_approvals.task_id AND e.event_type = 'approval.resolved'
                  AND json_valid(e.payload_json)
                  AND json_extract(e.payload_json, '$.decision.request_id')
                      = agent_approvals.request_id
            ORDER BY e.seq DESC LIMIT 1)
        WHERE decided_at IS NOT NULL;
    UPDATE agent_approvals
        SET status = CASE WHEN json_extract(decision_json, '$.approved') THEN 'approved'
                          ELSE 'denied' END
        WHERE decision_json IS NOT NULL
    """,
    # 7: keyword tables gain a column of Chinese and Japanese words (see fts5_index).
    _keyword_tables_with_cjk_terms,
    # 8: a task started with a response model records its JSON Schema and name, so it answers
    # in that form when resumed after a human's decision or a restart.
    _tasks_record_their_response_model,
    # 9: sessions as conversations (see ``_sessions_as_conversations``).
    _sessions_as_conversations,
    # 10: spans are found through their task (a trace is one task's): one narrow index on
    # agent_traces, whose every index costs each step's commit a page (about 10 us), and the
    # tasks found by trace id instead.
    """
    DROP INDEX IF EXISTS agent_traces_by_trace;
    DROP INDEX IF EXISTS agent_traces_by_task;
    CREATE INDEX agent_traces_by_task ON agent_traces(task_id);
    CREATE INDEX IF NOT EXISTS agent_tasks_by_trace ON agent_tasks(trace_id)
    """,
    # 11: session forks and retries (see ``_sessions_fork_and_retry``).
    _sessions_fork_and_retry,
    # 12: a fork's usage carried from its origin (see ``_forks_carry_usage``).
    _forks_carry_usage,
    # 13: keyword tables index the whole segmented text, digits and Latin letters inside
    # Chinese included (see ``_keyword_tables_index_segmented_text``).
    _keyword_tables_index_segmented_text,
)


def schema_version(conn: sqlite3.Connection) -> int:
    """The migration number the database is at (0 for a new file)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every pending migration in order; returns the resulting version.

    Safe to call from several processes at once: ``BEGIN IMMEDIATE`` serializes them and the
    version is re-read inside the transaction.

    Raises:
        DataTooNewError: The database is at a version past the last migration here (a newer
            core-agent wrote it); nothing is written to it.
    """
    for number, script in enumerate(MIGRATIONS, start=1):
        with transaction(conn):
            _refuse_newer(conn)
            if schema_version(conn) >= number:
                continue
            if callable(script):
                script(conn)
            else:
                for statement in _statements(script):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
    return schema_version(conn)


def _refuse_newer(conn: sqlite3.Connection) -> None:
    # Checked in each transaction, as the version is: another process may have upgraded the
    # file since the last one.
    version = schema_version(conn)
    if version > len(MIGRATIONS):
        raise DataTooNewError(_file_of(conn), version, len(MIGRATIONS))


def _file_of(conn: sqlite3.Connection) -> str:
    for _, name, file in conn.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return str(file) or ":memory:"
    return "(unknown file)"


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT the surrounding transaction; split instead. The schema
    # contains no semicolons inside literals.
    return [part.strip() for part in script.split(";") if part.strip()]
