"""SQLite adapters: one database file (WAL) for tasks, events and traces, with sqlite-vec."""
