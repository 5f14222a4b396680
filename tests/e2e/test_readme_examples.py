"""Every code block of README.md runs as written.

The convention, for whoever writes README.md:

- Every fenced ``python`` block is a complete program. The test runs each one on its own, in a
  subprocess (a clean event loop and environment), from a fresh temporary directory, with a
  fresh ``AGENT_DATA_DIR`` and no other ``AGENT_*`` variable: so without ``AGENT_MODEL`` it
  runs against the shipped scripted model, offline. It must exit 0.
- Every fenced ``bash``, ``sh`` or ``shell`` block is run the same way, as a ``bash -e``
  script; of a ``console`` block, the lines after a ``$ `` prompt (the rest is output). On
  its ``PATH``, and in ``.venv/bin/`` as after the README's install line, are only this
  installation's ``core-agent``, ``python`` and ``python3`` (no ``pip``: a block cannot
  change the installation the tests run in), and stdin is empty.
- A block the test must not run (it installs packages, needs a real model or a network, or
  waits for input) gets a marker as the last non-blank line before its opening fence, with
  the reason: ``<!-- readme-test: skip (installs packages) -->``. Skipped blocks are reported
  by pytest (``-ra``) with their line and reason, and counted by
  ``test_every_block_is_run_or_skipped_for_a_stated_reason`` (``-s`` prints the tally); a
  marker that is not right before a block it could run fails that test, so none goes stale
  silently. A block that installs packages and has no marker fails.
- Blocks with no language or another one (a diagram, a ``toml`` excerpt) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PYTHON = ("python",)
SHELL = ("bash", "sh", "shell", "console")
PROMPT = "$ "
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<directive>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s*\((?P<reason>[^)]+)\)$")
INSTALLS = re.compile(r"\bpip\b[^\n]*\binstall\b|-m\s+venv\b|\buv\s+(pip|sync|add)\b")
GUARD_S = 300  # a hang guard for one block, not a timing claim


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        return f"README.md:{self.line}:{self.lang or 'text'}"


def read_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks, and the problems found with markers (a stray or unknown one)."""
    blocks: list[Block] = []
    problems: list[str] = []
    lines = text.splitlines()
    pending: tuple[int, str] | None = None  # a marker waiting for its block
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = MARKER.match(line)
        opening = FENCE.match(line)
        if marker:
            if pending is not None:
                problems.append(f"line {pending[0]}: marker not followed by a code block")
            skip = SKIP.match(marker.group("directive"))
            if skip is None:
                directive = marker.group("directive")
                problems.append(f"line {index + 1}: unknown directive {directive!r}")
            pending = (index + 1, skip.group("reason").strip() if skip else "")
        elif opening:
            fence, indent = opening.group("fence"), len(opening.group("indent"))
            end = index + 1
            while end < len(lines) and lines[end].strip() != fence:
                end += 1
            margin = " " * indent  # a block indented in a list item
            body = [row.removeprefix(margin) for row in lines[index + 1 : end]]
            blocks.append(
                Block(
                    line=index + 1,
                    lang=opening.group("lang").lower(),
                    code="\n".join(body) + "\n",
                    skip_reason=pending[1] if pending else None,
                )
            )
            pending = None
            index = end
        elif line.strip() and pending is not None:
            problems.append(f"line {pending[0]}: marker not right before a code block")
            pending = None
        index += 1
    if pending is not None:
        problems.append(f"line {pending[0]}: marker not followed by a code block")
    return blocks, problems


BLOCKS, MARKER_PROBLEMS = read_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b.lang in PYTHON + SHELL]


def commands(work: Path) -> Path:
    """``work/.venv/bin`` with wrappers of this installation's commands, and nothing else."""
    folder = work / ".venv" / "bin"
    folder.mkdir(parents=True)
    for name in ("core-agent", "python", "python3"):
        wrapper = folder / name
        wrapper.write_text(f'#!/bin/sh\nexec "{Path(sys.executable).with_name(name)}" "$@"\n')
        wrapper.chmod(0o755)
    return folder


def environment(work: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    path = [str(REPO / "src"), base.get("PYTHONPATH", "")]
    return {
        **base,
        "AGENT_DATA_DIR": str(work / "data"),
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "PATH": os.pathsep.join([str(commands(work)), "/usr/bin", "/bin"]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network for litellm's price table
        "COLUMNS": "200",
    }


def test_every_block_is_run_or_skipped_for_a_stated_reason() -> None:
    assert MARKER_PROBLEMS == []
    skipped = [b for b in RUNNABLE if b.skip_reason is not None]
    assert all(b.skip_reason for b in skipped), "a skip marker needs a reason"
    python = [b for b in RUNNABLE if b.lang in PYTHON]
    assert python, "README.md has no python block"
    # The markers only make sense on blocks that would otherwise run.
    stray = [b.id for b in BLOCKS if b.skip_reason is not None and b not in RUNNABLE]
    assert stray == []
    print(
        f"\nREADME.md: {len(BLOCKS)} fenced blocks; {len(RUNNABLE) - len(skipped)} run "
        f"({len(python)} python), {len(skipped)} skipped:"
        + "".join(f"\n  {b.id}: {b.skip_reason}" for b in skipped)
        + f"\n  {len(BLOCKS) - len(RUNNABLE)} not code to run (no or another language)"
    )


def shell_script(block: Block) -> str:
    """The block as a script: of a console transcript, its prompted lines (and continuations)."""
    if block.lang != "console":
        return block.code
    kept: list[str] = []
    continued = False
    for line in block.code.splitlines():
        if continued or line.startswith(PROMPT):
            kept.append(line.removeprefix("> ") if continued else line.removeprefix(PROMPT))
            continued = line.endswith("\\")
    return "\n".join(kept) + "\n"


def run_block(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``block`` as the module docstring says; it must exit 0, with no traceback."""
    if INSTALLS.search(block.code):
        pytest.fail(f"{block.id} installs packages: put a skip marker right before it")
    work = tmp_path / "work"
    work.mkdir()
    if block.lang in PYTHON:
        script = work / "readme_block.py"
        script.write_text(block.code, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-c", shell_script(block)]
    ran = subprocess.run(
        command,
        cwd=work,
        env=environment(work),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    assert ran.returncode == 0, (
        f"{block.id} exited {ran.returncode}\n--- code\n{block.code}\n--- stdout\n{ran.stdout}"
        f"\n--- stderr\n{ran.stderr}"
    )
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if block.skip_reason is not None:
        pytest.skip(f"{block.id}: {block.skip_reason}")
    run_block(block, tmp_path)


def test_the_quick_start_runs_its_tool_with_the_deps_after_approval(tmp_path: Path) -> None:
    """The Python API quick start is run, not skipped, and does what the README says."""
    (quick_start,) = [
        b for b in RUNNABLE if b.lang in PYTHON and "create_kernel(settings, tools=[" in b.code
    ]
    assert quick_start.skip_reason is None
    lines = run_block(quick_start, tmp_path).stdout.splitlines()
    # A call that needs a human is announced when it is asked about, and again when it
    # starts after the answer; its result comes after that.
    call = "→ save_note({'text': 'buy oat milk'})"
    announced = [n for n, line in enumerate(lines) if line == call]
    approved = lines.index("[approve save_note? yes]")
    assert len(announced) == 2 and announced[0] < approved < announced[1]
    assert lines.index("← saved as note 1") > announced[1]
    assert "Noted: buy oat milk." in lines
    assert lines[-1] == "notebook: ['buy oat milk']"


def test_the_reader_sees_markers_blocks_and_stray_markers() -> None:
    text = "\n".join(
        [
            "<!-- readme-test: skip (installs packages) -->",
            "",
            "```bash",
            "pip install x",
            "```",
            "1. A step:",
            "   ```console",
            "   $ core-agent tasks \\",
            "   >   --json",
            "   []",
            "   ```",
            "<!-- readme-test: skip (stale) -->",
            "Some prose.",
            "<!-- readme-test: run twice -->",
            "```python",
            "print(1)",
            "```",
        ]
    )
    blocks, problems = read_blocks(text)
    assert [(b.line, b.lang, b.skip_reason) for b in blocks] == [
        (3, "bash", "installs packages"),
        (7, "console", None),
        (15, "python", ""),
    ]
    assert shell_script(blocks[1]) == "core-agent tasks \\\n  --json\n"
    assert problems == [
        "line 12: marker not right before a code block",
        "line 14: unknown directive 'run twice'",
    ]


def test_a_shell_block_runs_this_installations_commands(tmp_path: Path) -> None:
    transcript = Block(
        line=1,
        lang="console",
        code="\n".join(
            [
                "$ .venv/bin/core-agent tasks --json",
                "[]",
                "$ core-agent run 'What is 6 * 7?' && python -c \\",
                ">   'import core_agent; print(core_agent.__file__)'",
                "6 * 7 = 42",
            ]
        ),
        skip_reason=None,
    )
    out = run_block(transcript, tmp_path).stdout
    assert out.startswith("[]\n6 * 7 = 42")  # the streamed answer ends with no newline
    assert out.endswith(str(REPO / "src" / "core_agent" / "__init__.py") + "\n")
    assert (tmp_path / "work" / "data").is_dir()  # its own data folder


def test_an_install_block_without_a_marker_is_refused(tmp_path: Path) -> None:
    block = Block(line=1, lang="bash", code="pip install core-agent\n", skip_reason=None)
    with pytest.raises(pytest.fail.Exception, match="installs packages: put a skip marker"):
        run_block(block, tmp_path)
