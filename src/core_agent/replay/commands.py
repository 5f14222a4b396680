"""The ``replay``, ``fork``, ``diff``, ``export`` and ``import`` commands.

Each takes the parsed arguments and returns the exit status (``command_errors``); errors are
raised for the command line to tell in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from core_agent.command_errors import EXIT_FAILED, EXIT_OK, EXIT_WAITING
from core_agent.contracts.errors import UsageError
from core_agent.contracts.settings import AgentSettings


def _settings(args: argparse.Namespace) -> AgentSettings:
    """``--trust-agent-file`` as a setting; without it, AGENT_TRUST_AGENT_FILE decides."""
    if getattr(args, "trust_agent_file", False):
        return AgentSettings(trust_agent_file=True)
    return AgentSettings()


def _consoles() -> tuple[Any, Any]:
    from rich.console import Console

    return Console(highlight=False), Console(stderr=True, highlight=False)


async def replay(args: argparse.Namespace) -> int:
    """``core-agent replay TASK [--rerun [--tools recorded|live]] [--json]``."""
    if args.tools is not None and not args.rerun:
        raise UsageError("--tools goes with --rerun (it says what a rerun's tools do)")
    if args.rerun:
        return await _rerun(args)
    from core_agent.replay.rendering import print_trajectory
    from core_agent.replay.task_records import TaskRecords

    async with TaskRecords(_settings(args)) as records:
        trajectory = await records.trajectory(args.task_id)
    if args.json:
        print(trajectory.model_dump_json(indent=2))
        return EXIT_OK
    out, _ = _consoles()
    print_trajectory(out, trajectory)
    return EXIT_OK


async def _rerun(args: argparse.Namespace) -> int:
    from core_agent.replay.rendering import print_rerun
    from core_agent.replay.rerun import rerun_task

    report = await rerun_task(
        args.task_id,
        settings=_settings(args),
        tool_results=args.tools or "recorded",
        agent=args.agent,
    )
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        out, _ = _consoles()
        print_rerun(out, report)
    return EXIT_OK if report.reproduced else EXIT_FAILED


async def fork(args: argparse.Namespace) -> int:
    """``core-agent fork TASK --at STEP [--model M] [--prompt FILE] [--json]``."""
    from core_agent.replay.fork import fork_task
    from core_agent.replay.rendering import print_fork
    from core_agent.safety.terminal_text import printable
    from shared.agent_protocol import TaskStatus

    system_prompt = None
    if args.prompt is not None:
        try:
            system_prompt = await anyio.Path(args.prompt).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--prompt: cannot read {args.prompt}: {exc}") from exc
    result = await fork_task(
        args.task_id,
        args.at,
        settings=_settings(args),
        model=args.model,
        system_prompt=system_prompt,
        agent=args.agent,
        approval_callback=getattr(args, "ask_human", None),
    )
    outcome = result.result
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        out, err = _consoles()
        print_fork(err, result)
        if outcome.output:
            out.print(printable(outcome.output), markup=False)
        line = f"status: {outcome.status.value}  task: {outcome.task_id}"
        if outcome.error and outcome.status is not TaskStatus.SUCCEEDED:
            line += f"  ({printable(outcome.error, newlines=False)})"
        err.print(line, markup=False)
        if outcome.status is TaskStatus.WAITING_APPROVAL:
            err.print(
                f"answer with: core-agent resolve {outcome.pending_approval} --approve|--deny",
                markup=False,
            )
    if outcome.status is TaskStatus.WAITING_APPROVAL:
        return EXIT_WAITING
    return EXIT_OK if outcome.status is TaskStatus.SUCCEEDED else EXIT_FAILED


async def diff(args: argparse.Namespace) -> int:
    """``core-agent diff A B [--json]``: exit 0 when they did the same, 1 when they differ."""
    from core_agent.replay.rendering import print_comparison
    from core_agent.replay.task_records import TaskRecords

    async with TaskRecords(_settings(args)) as records:
        comparison = await records.compare(args.a, args.b)
    if args.json:
        print(comparison.model_dump_json(indent=2))
    else:
        out, _ = _consoles()
        print_comparison(out, comparison)
    return EXIT_OK if comparison.same else EXIT_FAILED


async def export(args: argparse.Namespace) -> int:
    """``core-agent export TASK [-o FILE]``: JSON lines on stdout, or in FILE."""
    from core_agent.replay.task_records import TaskRecords

    async with TaskRecords(_settings(args)) as records:
        task_id = await records.find(args.task_id)
        lines = list(await records.export(task_id))
    text = "".join(f"{line}\n" for line in lines)
    if args.output is None or args.output == "-":
        sys.stdout.write(text)
        return EXIT_OK
    target = Path(args.output)
    try:
        await anyio.to_thread.run_sync(_write_privately, target, text.encode())
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from exc
    header = json.loads(lines[0])
    print(
        f"exported task {task_id} ({header['events']} events, {header['spans']} spans) to {target}",
        file=sys.stderr,
    )
    return EXIT_OK


def _write_privately(target: Path, content: bytes) -> None:
    """Put ``content`` at ``target`` whole, readable by this user alone (0600).

    An export holds the task's prompts, answers and tool results, as the database does. It
    is written to a new file of a random name beside ``target`` (``mkstemp``: created
    exclusively, 0600, never through a link planted there) and then moved into place, so a
    failed export leaves no half file, nor anything, behind.

    Raises:
        OSError: The folder cannot be written to or the file cannot be moved into place.
    """
    fd, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".partial", dir=target.parent
    )
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


async def import_(args: argparse.Namespace) -> int:
    """``core-agent import FILE [--json]``: store the exported task here, with its ids."""
    from core_agent.replay.task_records import TaskRecords

    source = args.file
    try:
        if source == "-":
            text = sys.stdin.read()
            source = "stdin"
        else:
            text = await anyio.Path(source).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not a core-agent task export (not UTF-8 text)") from None
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from exc
    async with TaskRecords(_settings(args)) as records:
        # Not splitlines(): a JSON string may hold U+2028, which it counts as a line end.
        imported = await records.import_export(text.split("\n"), source=source)
    if args.json:
        print(
            json.dumps(
                {"task_id": imported.task_id, "events": imported.events, "spans": imported.spans}
            )
        )
    else:
        print(
            f"imported task {imported.task_id} ({imported.events} events, {imported.spans} "
            "spans): replay it with core-agent replay " + imported.task_id[:12]
        )
    return EXIT_OK
