"""Keyword indexes: SQLite FTS5 (persistent, incremental) and rank-bm25 (in memory)."""
