"""File access confined to workspace roots, safe against symlink and ``..`` escapes.

A path is resolved (``realpath``: symlinks and ``..`` followed) before it is compared with the
roots part by part, so ``/ws-evil`` is not inside ``/ws``. The resolved path is then opened
one component at a time from the root's directory descriptor with ``O_NOFOLLOW``, so a
symlink swapped in after the check cannot lead outside either.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from core_agent.contracts.errors import SandboxRefusedError, ToolExecutionError
from core_agent.contracts.tool import Capability
from core_agent.contracts.tool_sandbox import SandboxVerdict

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PROTECTED_NAMES = frozenset({".git"})
"""Directory names that are never writable anywhere in a root."""


def _within(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


class PathGuard:
    """Judges and opens paths against allowed roots and protected locations."""

    def __init__(
        self, roots: Sequence[Path], protected: Sequence[Path] = (), hidden: Sequence[Path] = ()
    ) -> None:
        if not roots:
            raise ValueError("the sandbox needs at least one workspace root")
        self.roots = [Path(os.path.realpath(root)) for root in roots]
        self.hidden = [Path(os.path.realpath(path)) for path in hidden]
        self.protected = [
            *(Path(os.path.realpath(path)) for path in protected),
            *(h for h in self.hidden if h not in protected),
        ]

    def resolve(self, path: str | Path) -> Path:
        """``path`` made absolute (relative to the first root) with symlinks and ``..`` resolved."""
        candidate = Path(os.path.expanduser(str(path)))
        if not candidate.is_absolute():
            candidate = self.roots[0] / candidate
        return Path(os.path.realpath(candidate))

    def root_of(self, resolved: Path) -> Path | None:
        """The root that contains ``resolved``, if any."""
        return next((root for root in self.roots if _within(resolved, root)), None)

    def check(self, path: str | Path, capability: Capability) -> SandboxVerdict:
        """Allowed when the resolved path is inside a root and not hidden (the data directory).

        For writes it must not be protected either.
        """
        if "\x00" in str(path):
            return SandboxVerdict(False, "the path contains a NUL byte")
        if _under_proc(path, self.roots[0]):
            # /proc/self (cwd, root, fd) is resolved here as the kernel's process sees it; a
            # command would see its own, somewhere else.
            return SandboxVerdict(False, f"{path} is under /proc, whose links depend on who reads")
        resolved = self.resolve(path)
        root = self.root_of(resolved)
        if root is None:
            shown = f"{path} (resolves to {resolved})" if str(path) != str(resolved) else str(path)
            roots = ", ".join(map(str, self.roots))
            return SandboxVerdict(False, f"{shown} is outside the workspace roots ({roots})")
        for hidden in self.hidden:
            if _within(resolved, hidden):
                return SandboxVerdict(False, f"{resolved} is the kernel's data (not readable)")
        if capability in (Capability.WRITE, Capability.EXEC):
            for protected in self.protected:
                if _within(resolved, protected) or _within(protected, resolved):
                    return SandboxVerdict(
                        False, f"{resolved} is protected (kernel data or settings)"
                    )
            parts = {part.lower() for part in resolved.relative_to(root).parts}
            hit = parts & PROTECTED_NAMES
            if hit:
                return SandboxVerdict(False, f"{resolved} is inside a protected {sorted(hit)[0]}")
        return SandboxVerdict(True, path=resolved.relative_to(root).as_posix())

    def require(self, path: str | Path, capability: Capability) -> tuple[Path, Path]:
        """The resolved path and its root, or ``SandboxRefusedError``."""
        verdict = self.check(path, capability)
        if not verdict.allowed:
            raise SandboxRefusedError(verdict.reason)
        resolved = self.resolve(path)
        root = self.root_of(resolved)
        assert root is not None
        return resolved, root

    def _open_parent(self, resolved: Path, root: Path) -> tuple[int, str]:
        """A descriptor of the parent directory, reached without following symlinks."""
        parts = resolved.relative_to(root).parts
        if not parts:
            raise SandboxRefusedError(f"{resolved} is a workspace root, not a file")
        fd = os.open(root, _DIRECTORY_FLAGS)
        try:
            for part in parts[:-1]:
                next_fd = os.open(part, _DIRECTORY_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = next_fd
        except OSError as exc:
            os.close(fd)
            raise _refusal_or_error(resolved, exc) from exc
        return fd, parts[-1]

    def read(self, path: str | Path, max_bytes: int) -> tuple[bytes, bool]:
        """Up to ``max_bytes`` of a regular file, and whether there was more. Blocking."""
        resolved, root = self.require(path, Capability.READ)
        parent, name = self._open_parent(resolved, root)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            raise _refusal_or_error(resolved, exc) from exc
        finally:
            os.close(parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SandboxRefusedError(f"{resolved} is not a regular file")
            chunks: list[bytes] = []
            remaining = max_bytes + 1
            while remaining > 0:
                chunk = os.read(fd, min(remaining, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        return data[:max_bytes], len(data) > max_bytes

    def write(self, path: str | Path, data: bytes) -> None:
        """Atomically replace the file: a temporary file in the same directory, then rename."""
        resolved, root = self.require(path, Capability.WRITE)
        parent, name = self._open_parent(resolved, root)
        temporary = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                temporary,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=parent,
            )
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            # rename() replaces a symlink at the destination instead of following it.
            os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=parent)
            raise _refusal_or_error(resolved, exc) from exc
        finally:
            os.close(parent)

    def list_files(self, directory: str | Path, limit: int) -> list[Path]:
        """Regular files below ``directory`` (relative to it), symlinks skipped, sorted."""
        resolved, _ = self.require(directory, Capability.READ)
        if not resolved.is_dir():
            raise ToolExecutionError(f"{resolved} is not a directory", tool_name="")
        found: list[Path] = []
        for current, directories, files in os.walk(resolved, followlinks=False):
            directories[:] = sorted(
                d for d in directories if not any(Path(current, d) == h for h in self.hidden)
            )
            for name in sorted(files):
                candidate = Path(current) / name
                if candidate.is_symlink() or not candidate.is_file():
                    continue
                found.append(candidate.relative_to(resolved))
                if len(found) >= limit:
                    return found
        return found


def _under_proc(path: str | Path, first_root: Path) -> bool:
    """Whether ``path``, spelled out (``..`` folded, relative to ``first_root``), is in /proc."""
    spelled = os.path.expanduser(str(path))
    absolute = os.path.normpath(os.path.join(first_root, spelled))
    return absolute == "/proc" or absolute.startswith("/proc/")


_SWAPPED = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EMLINK})
"""What O_NOFOLLOW opens fail with when a symlink stands where the check saw none."""


def _refusal_or_error(resolved: Path, exc: OSError) -> Exception:
    if exc.errno in _SWAPPED:
        return SandboxRefusedError(f"{resolved} changed into a symlink or is not a directory")
    return ToolExecutionError(f"{resolved}: {exc.strerror or exc}", tool_name="")
