"""Tools a test declares as ``core_agent.tools`` entry points, as a third-party package would."""

from __future__ import annotations

from pathlib import Path

from core_agent import tool


@tool(capabilities={"read"}, idempotent=True)
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: The text to count.
    """
    return len(text.split())


def not_a_tool(text: str) -> int:
    """A plain function, declared as an entry point by mistake (it lacks ``@tool``)."""
    return len(text.split())


def declare_entry_points(
    root: Path, distribution: str, group: str, entries: dict[str, str]
) -> Path:
    """Make ``root`` hold an installed distribution declaring ``entries`` in ``group``.

    A ``*.dist-info`` folder with ``METADATA`` and ``entry_points.txt`` is what an installed
    package leaves on ``sys.path``; ``importlib.metadata`` finds entry points there once
    ``root`` is on ``sys.path`` (or ``PYTHONPATH``). Returns ``root``.
    """
    info = root / f"{distribution}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n", encoding="utf-8"
    )
    lines = [f"[{group}]", *(f"{name} = {value}" for name, value in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
