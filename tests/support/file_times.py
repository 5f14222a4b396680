"""Directory times for tests of the remembered ``.git`` search (``ProtectedEntrySearch``).

The search trusts a directory whose device, inode, mtime and ctime are as they were when it
was listed. Tests remember listings at once (``racy_margin_ns=0``) and ``settle`` the tree
before a search, so a change made afterwards bears later times, as it does for a real tree
older than the margin; ``set_back`` is what ``touch -d`` does to hide a change.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def settle(root: Path) -> None:
    """Wait until a change made now would bear later times than any directory below ``root``.

    A file beside ``root`` is touched until its ctime passes them: the kernel's coarse clock
    moves in ticks of a few milliseconds (at once with fine-grained timestamps).
    """
    latest = 0
    for directory, _, _ in os.walk(root):
        info = os.lstat(directory)
        latest = max(latest, info.st_mtime_ns, info.st_ctime_ns)
    probe = root.parent / f"{root.name}-clock-probe"
    probe.touch()
    while os.lstat(probe).st_ctime_ns <= latest:
        time.sleep(0.001)
        os.utime(probe)


def set_back(directory: Path, mtime_ns: int) -> None:
    """``touch -d``: the directory's mtime as it was (its ctime becomes now)."""
    os.utime(directory, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
    assert os.lstat(directory).st_mtime_ns == mtime_ns
