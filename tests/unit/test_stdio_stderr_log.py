"""The stdio server's logging never waits for a host that does not read stderr."""

from __future__ import annotations

import logging
import os

from core_agent.stdio_server.stderr_log import logging_off_the_event_loop


def test_logging_never_waits_for_a_stderr_nobody_reads() -> None:
    read_end, write_end = os.pipe()
    stderr = os.fdopen(write_end, "w", buffering=1)
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [logging.StreamHandler(stderr)]
    try:
        with logging_off_the_event_loop(max_records=100):
            # About 150 kB, and no one reads the pipe (it holds 64 kB): reaching the end of
            # this loop is the point, for every call returned without waiting.
            for n in range(5000):
                logging.getLogger("flood").warning("record %d of a flood", n)
            written = b""
            while b"log record(s) dropped" not in written:
                written += os.read(read_end, 65536)
        # The records kept came in order, from the first; the rest were counted.
        lines = written.decode().splitlines()
        assert lines[0] == "record 0 of a flood"
        kept = [int(line.split()[1]) for line in lines if line.startswith("record ")]
        assert kept == sorted(kept) and len(kept) < 5000
        assert root.handlers[0].stream is stderr  # type: ignore[attr-defined]
    finally:
        root.handlers = saved
        stderr.close()
        os.close(read_end)
