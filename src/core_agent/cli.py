"""The ``core-agent`` command.

Only ``argparse`` is imported at start-up so ``core-agent --help`` stays fast; each command
imports what it needs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn

if TYPE_CHECKING:
    from rich.console import Console

    from core_agent.kernel.agent_kernel import AgentKernel
    from shared.agent_protocol import (
        ApprovalDecision,
        ApprovalRequest,
        TaskCanceled,
        TaskFailed,
        TaskResult,
        TaskSucceeded,
    )

from core_agent.command_errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, EXIT_WAITING

SHORT_ID = 12
"""Characters of a task id shown in lists: a prefix that commands accept back."""
TASK_REFERENCE = "a task id, a unique prefix of one, its trace id, or `last`"


class _Parser(argparse.ArgumentParser):
    """Misuse is one line (what is wrong, and where to read more), not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="core-agent",
        description="Run LLM agent tasks locally: tools, traces and task history in SQLite.",
        epilog="Configuration comes from AGENT_* variables (AGENT_MODEL, AGENT_DATA_DIR, ...). "
        "Exit status: 0 done, 1 the run failed, 2 misuse or configuration error, "
        "3 the task is waiting for a human (see `core-agent approvals`).",
    )
    from core_agent import __version__

    parser.add_argument("--version", action="version", version=f"core-agent {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of an error (for bug reports)"
    )
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument(
        "-v", "--verbose", action="count", default=0, help="log what the kernel does (-vv: more)"
    )
    loudness.add_argument(
        "-q", "--quiet", action="store_true", help="print only results and errors (no progress)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a task and stream its answer")
    run.add_argument("task", help="what to do, in natural language")
    run.add_argument(
        "--session",
        help="continue this session (a conversation: the task sees its history); "
        "a new one when absent",
    )
    run.add_argument("--mode", choices=["react", "plan_execute"], help="force a strategy")
    run.add_argument("--max-turns", type=_positive_int, help="turn limit for this task")
    run.add_argument("--json", action="store_true", help="print events as JSON lines")
    _add_agent_option(run)

    chat = commands.add_parser(
        "chat",
        help="talk with the assistant in the terminal: a session, in a workspace",
        description="An interactive coding assistant over a session, in a terminal. "
        "Type /help in it for its commands and keys.",
    )
    chat.add_argument(
        "--workspace", metavar="DIR", help="the project it works in (default: this directory)"
    )
    _add_agent_option(chat)

    tasks = commands.add_parser("tasks", help="list recent tasks")
    tasks.add_argument("--limit", type=_positive_int, default=20)
    tasks.add_argument(
        "--status",
        choices=["queued", "running", "waiting_approval", "succeeded", "failed", "canceled"],
    )
    tasks.add_argument("--json", action="store_true", help="print JSON")

    show = commands.add_parser(
        "show", help="a task as a conversation: messages, tool calls, decisions, results"
    )
    show.add_argument("task_id", help=TASK_REFERENCE)
    show.add_argument("--json", action="store_true", help="the task and its events as JSON")

    trace = commands.add_parser("trace", help="the span tree of a task, with durations")
    trace.add_argument("task_id", help=TASK_REFERENCE)
    trace.add_argument("--json", action="store_true", help="print JSON")

    route = commands.add_parser(
        "route", help="show which strategy a task would get, and why, without running it"
    )
    route.add_argument("task")
    route.add_argument("--mode", choices=["react", "plan_execute"], help="force a strategy")
    route.add_argument("--json", action="store_true", help="print JSON")
    _add_agent_option(route)

    policy = commands.add_parser("policy", help="inspect the tool-call policy")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    check = policy_commands.add_parser(
        "check", help="what the kernel would do with one tool call (JSON), without running it"
    )
    check.add_argument("--tool", required=True)
    check.add_argument("--args", default="{}", help="the arguments as a JSON object")
    check.add_argument("--workspace", help="the workspace root to judge paths against")
    check.add_argument(
        "--tainted", action="store_true", help="as if untrusted content were in context"
    )
    check.add_argument("--json", action="store_true", help="the same JSON (it is the only form)")
    _add_agent_option(check)

    audit = commands.add_parser(
        "audit", help="a task's policy decisions, approvals, refusals and injection warnings"
    )
    audit.add_argument("task_id", help=TASK_REFERENCE)
    audit.add_argument("--json", action="store_true", help="print JSON lines")

    approvals = commands.add_parser("approvals", help="list the questions tasks are waiting on")
    approvals.add_argument("--json", action="store_true", help="print JSON")
    resolve = commands.add_parser("resolve", help="answer a task's question and resume it")
    resolve.add_argument("request_id")
    answer = resolve.add_mutually_exclusive_group(required=True)
    answer.add_argument("--approve", action="store_true", help="resume the task")
    answer.add_argument(
        "--deny",
        action="store_true",
        help="refuse: a denied tool call is reported to the model, which carries on without "
        "it; a denied question (a plan that failed repeatedly) ends the task as failed",
    )
    resolve.add_argument("--reason", default="", help="guidance for the task, or why not")
    resolve.add_argument("--json", action="store_true", help="print the task's result as JSON")
    _add_agent_option(resolve)

    resume = commands.add_parser(
        "resume", help="carry on a task whose process died, from its last checkpoint"
    )
    resume.add_argument("task_id", help=TASK_REFERENCE)
    resume.add_argument("--json", action="store_true", help="print the task's result as JSON")
    _add_agent_option(resume)
    cancel = commands.add_parser(
        "cancel", help="cancel a task (a live process running it is asked to stop it)"
    )
    cancel.add_argument("task_id", help=TASK_REFERENCE)
    cancel.add_argument("--reason", default="canceled from the command line")
    cancel.add_argument("--json", action="store_true", help="print the task as JSON")
    recover = commands.add_parser("recover", help="resume (or fail) every task whose process died")
    recover.add_argument(
        "--fail", action="store_true", help="end them as failed instead of resuming them"
    )
    recover.add_argument("--json", action="store_true", help="print their results as JSON")
    _add_agent_option(recover)

    _add_session_commands(commands)
    commands.add_parser("schema", help="print the JSON Schema of the protocol messages")
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script, e.g. "
        "`core-agent completion bash > ~/.local/share/bash-completion/completions/core-agent`",
    )
    completion.add_argument("shell", choices=["bash", "zsh", "tcsh"])
    plugins = commands.add_parser(
        "plugins", help="installed providers, tools and capability providers, and their package"
    )
    plugins.add_argument("--json", action="store_true", help="print JSON")
    _add_serve_command(commands)
    _add_knowledge_commands(commands)
    _add_replay_commands(commands)
    _add_ui_command(commands)
    _add_stats_command(commands)
    return parser


def _add_ui_command(commands: Any) -> None:
    ui = commands.add_parser(
        "ui",
        help="the trace viewer in a browser: tasks, span waterfalls, conversations, approvals",
        description="Serve the trace viewer on 127.0.0.1 at a URL with a random token (printed "
        "on stdout); approvals answered there resume their tasks in this process.",
    )
    ui.add_argument(
        "--port", type=_port, default=0, help="the port on 127.0.0.1 (default: any free one)"
    )
    ui.add_argument("--no-open", action="store_true", help="do not open a browser")
    _add_agent_option(ui)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def _add_agent_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--agent",
        metavar="FILE",
        help="an agent file (YAML: model, prompt, tools, policy, memory, strategy) applied "
        "over the AGENT_* settings",
    )
    command.add_argument(
        "--trust-agent-file",
        action="store_true",
        help="let the agent file lower safety: a higher approval threshold, rules that lower "
        "a call's risk or open the network, your model key sent to its api_base "
        "(AGENT_TRUST_AGENT_FILE)",
    )


def _trust(args: argparse.Namespace | None) -> dict[str, Any]:
    """``--trust-agent-file`` as a setting; without it, AGENT_TRUST_AGENT_FILE decides."""
    return {"trust_agent_file": True} if getattr(args, "trust_agent_file", False) else {}


def _add_serve_command(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="serve the kernel to another program: JSON-RPC 2.0 over stdin/stdout"
    )
    serve.add_argument("--stdio", action="store_true", required=True, help="one message a line")
    serve.add_argument(
        "--max-message-bytes", type=_positive_int, default=1024 * 1024, help="longest request line"
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=10.0,
        help="seconds running tasks get to end once stdin closes; the rest are left to recover",
    )
    serve.add_argument(
        "--max-tasks", type=_positive_int, default=256, help="runs going at once per connection"
    )
    serve.add_argument(
        "--max-requests", type=_positive_int, default=1024, help="requests handled at once"
    )
    serve.add_argument(
        "--output-buffer-bytes",
        type=_positive_int,
        default=16 * 1024 * 1024,
        help="output held for a host that reads slowly; past it, backpressure",
    )


def _add_session_commands(commands: Any) -> None:
    sessions = commands.add_parser(
        "sessions",
        help="conversations: start, list, show, fork, retry, close, delete "
        "(run --session continues)",
    )
    actions = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    new = actions.add_parser("new", help="start a session and print its id")
    new.add_argument("--user", help="the user it belongs to")
    new.add_argument(
        "--meta", action="append", default=[], metavar="KEY=VALUE", help="metadata (repeatable)"
    )
    new.add_argument("--id", dest="session_id", help="its id (a random one when absent)")
    new.add_argument("--json", action="store_true", help="print JSON")
    listing = actions.add_parser("list", help="sessions, most recently active first")
    listing.add_argument("--user", help="only this user's")
    listing.add_argument("--limit", type=_positive_int, default=20)
    listing.add_argument("--json", action="store_true", help="print JSON")
    show = actions.add_parser("show", help="a session's transcript (its history and summaries)")
    show.add_argument("session_id")
    show.add_argument("--json", action="store_true", help="print JSON")
    close = actions.add_parser("close", help="close a session: readable, but takes no more tasks")
    close.add_argument("session_id")
    delete = actions.add_parser(
        "delete", help="delete a session with its history, tasks, events, traces, checkpoints"
    )
    delete.add_argument("session_id")
    fork = actions.add_parser(
        "fork", help="a new session holding this one's conversation up to a turn; print its id"
    )
    fork.add_argument("session_id")
    fork.add_argument(
        "--at", type=_positive_int, metavar="N", help="the last turn it holds (default: the latest)"
    )
    fork.add_argument("--id", dest="new_id", help="the new session's id (a random one if absent)")
    fork.add_argument("--json", action="store_true", help="print JSON")
    retry = actions.add_parser(
        "retry", help="run a turn again: it and the turns after it are kept, marked superseded"
    )
    retry.add_argument("session_id")
    retry.add_argument("--from", dest="turn", type=_positive_int, required=True, metavar="N")
    retry.add_argument("--task", help="what to ask instead (the turn's own task when absent)")
    retry.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_replay_commands(commands: Any) -> None:
    # Handled in replay.commands, imported only when one of these runs.
    replay = commands.add_parser(
        "replay",
        help="a task's steps from its records (route, model turns, tool calls and results, "
        "decisions, approvals), numbered; --rerun runs it again with the model played back",
    )
    replay.add_argument("task_id", help=TASK_REFERENCE)
    replay.add_argument(
        "--rerun",
        action="store_true",
        help="run the task again through the current kernel with the recorded model answers "
        "(no model is called) and report the first step where it diverges; exit 1 if it does",
    )
    replay.add_argument(
        "--tools",
        choices=["recorded", "live"],
        help="with --rerun: tools give back their recorded results (default), or run for real",
    )
    replay.add_argument("--json", action="store_true", help="print JSON")
    _add_agent_option(replay)
    fork = commands.add_parser(
        "fork", help="a new task from a task's conversation at a step, carried on live"
    )
    fork.add_argument("task_id", help=TASK_REFERENCE)
    fork.add_argument(
        "--at", type=_positive_int, required=True, metavar="STEP", help="a step `replay` shows"
    )
    fork.add_argument("--model", help="carry on with this model (a litellm model string)")
    fork.add_argument("--prompt", metavar="FILE", help="carry on with this system prompt")
    fork.add_argument("--json", action="store_true", help="print the fork and its result as JSON")
    _add_agent_option(fork)
    diff = commands.add_parser("diff", help="compare two tasks step by step; exit 1 if they differ")
    diff.add_argument("a", help=TASK_REFERENCE)
    diff.add_argument("b", help=TASK_REFERENCE)
    diff.add_argument("--json", action="store_true", help="print JSON")
    export = commands.add_parser(
        "export",
        help="a task, its events and spans as JSON lines (for a bug report), or its spans to "
        "an OpenTelemetry collector (--otlp)",
    )
    export.add_argument("task_id", help=TASK_REFERENCE)
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    export.add_argument(
        "--otlp",
        nargs="?",
        const="",
        metavar="ENDPOINT",
        help="send the task's spans to an OpenTelemetry collector instead (OTLP/HTTP, e.g. "
        "http://localhost:4318; AGENT_OTEL_ENDPOINT when omitted)",
    )
    export.add_argument("--json", action="store_true", help="with --otlp: the outcome as JSON")
    imported = commands.add_parser(
        "import", help="store a task from an export (its ids kept), to replay it here"
    )
    imported.add_argument("file", help="the export's JSON lines, or - for stdin")
    imported.add_argument("--json", action="store_true", help="print JSON")


def _since(text: str) -> Any:
    from core_agent.stats_commands import since_argument

    return since_argument(text)


def _add_stats_command(commands: Any) -> None:
    # Handled in stats_commands, imported only when it runs.
    stats = commands.add_parser(
        "stats", help="tasks, tokens, cost, latencies, tool success and approvals, over tasks"
    )
    stats.add_argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help="only tasks created since WHEN: 30m, 24h, 7d, 2w, or an ISO date or time",
    )
    stats.add_argument("--session", metavar="ID", help="only the tasks of this session")
    stats.add_argument("--json", action="store_true", help="print JSON (see the README)")


def _add_knowledge_commands(commands: Any) -> None:
    # Handled in knowledge_commands, imported only when one of these runs.
    ingest = commands.add_parser("ingest", help="add files or folders to the knowledge base")
    ingest.add_argument("path", nargs="?", help="a file, or a folder to walk")
    ingest.add_argument(
        "--capability", metavar="NAME", help="instead: the documents of a business capability"
    )
    ingest.add_argument("--namespace", help="knowledge namespace (AGENT_KNOWLEDGE_NAMESPACE)")
    ingest.add_argument("--force", action="store_true", help="re-ingest unchanged files too")
    ingest.add_argument("--json", action="store_true", help="print one JSON result per file")

    search = commands.add_parser("search", help="search the knowledge base (keyword + vector)")
    search.add_argument("query")
    search.add_argument("-k", type=_positive_int, default=10, help="how many passages (default 10)")
    search.add_argument("--namespace", help="knowledge namespace (AGENT_KNOWLEDGE_NAMESPACE)")
    search.add_argument("--json", action="store_true", help="print JSON")

    keywords = commands.add_parser("keywords", help="maintain the keyword index")
    keyword_actions = keywords.add_subparsers(
        dest="keywords_command", required=True, metavar="ACTION"
    )
    rebuild = keyword_actions.add_parser(
        "rebuild", help="index the stored chunks again (after changing AGENT_LEXICAL_INDEX)"
    )
    rebuild.add_argument("--namespace", help="knowledge namespace (AGENT_KNOWLEDGE_NAMESPACE)")
    rebuild.add_argument("--json", action="store_true", help="print the result as JSON")

    vectors = commands.add_parser("vectors", help="inspect, migrate, verify, re-embed vectors")
    actions = vectors.add_subparsers(dest="vectors_command", required=True, metavar="ACTION")
    info = actions.add_parser("info", help="list namespaces with their model and size")
    info.add_argument("--provider", help="the backend to inspect (AGENT_VECTOR_PROVIDER)")
    info.add_argument("--json", action="store_true", help="print JSON")

    migrate = actions.add_parser("migrate", help="copy vectors to another backend (resumable)")
    migrate.add_argument("--from", dest="source", required=True, help="e.g. sqlite_vec")
    migrate.add_argument("--to", dest="target", required=True, help="e.g. lancedb")
    migrate.add_argument("--namespace", action="append", help="only this namespace (repeat)")
    migrate.add_argument("--batch-size", type=_positive_int, default=500)
    migrate.add_argument(
        "--overwrite", action="store_true", help="copy every record, not only missing ones"
    )
    migrate.add_argument(
        "--json", action="store_true", help="print the result as JSON (progress on stderr)"
    )

    verify = actions.add_parser("verify", help="compare two backends and report differences")
    verify.add_argument("--from", dest="source", help="default: AGENT_VECTOR_PROVIDER")
    verify.add_argument("--to", dest="target", help="default: the migration target")
    verify.add_argument("--namespace", action="append", help="only this namespace (repeat)")
    verify.add_argument(
        "--samples", type=_positive_int, default=20, help="records and queries to sample"
    )
    verify.add_argument("--json", action="store_true", help="print JSON")

    reembed = actions.add_parser(
        "reembed", help="rebuild a namespace with the configured embedder (AGENT_EMBEDDER)"
    )
    reembed.add_argument("namespace")
    reembed.add_argument(
        "--json", action="store_true", help="print the result as JSON (progress on stderr)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``core-agent``; returns the exit status (see ``command_errors``)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "schema":
            return _schema()
        if args.command == "completion":
            import shtab

            print(shtab.complete(_parser(), shell=args.shell))
            return EXIT_OK
        if args.command == "chat":
            from core_agent.chat.first_paint import paint

            if args.agent:  # a bad file is reported before the screen is drawn
                from core_agent.agent_files import load_agent_file

                args.agent_definition = load_agent_file(args.agent)

            args.painted = paint(args.workspace)  # before the slow imports
        _log_to_stderr(args)
        import anyio

        handler = {
            "run": _run,
            "chat": _chat,
            "tasks": _tasks,
            "trace": _trace,
            "show": _show,
            "route": _route,
            "policy": _policy_check,
            "approvals": _approvals,
            "audit": _audit,
            "resolve": _resolve,
            "resume": _resume,
            "cancel": _cancel,
            "recover": _recover,
            "serve": _serve,
            "sessions": _sessions,
            "stats": _stats,
            "plugins": _plugins,
            "ingest": _knowledge("ingest"),
            "search": _knowledge("search"),
            "keywords": _knowledge("keywords"),
            "vectors": _knowledge("vectors"),
            "replay": _replay("replay"),
            "fork": _replay("fork"),
            "diff": _replay("diff"),
            "export": _export,
            "import": _replay("import_"),
            "ui": _ui,
        }[args.command]
        result: int = anyio.run(handler, args)
        return result
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`core-agent tasks | head`): not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not complain again.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        from core_agent.command_errors import explain

        if args.debug:
            import traceback

            traceback.print_exc()
        line, status = explain(exc)
        print(f"core-agent: {line}", file=sys.stderr)
        return status


def _log_to_stderr(args: argparse.Namespace) -> None:
    """Warnings (degraded features) and errors by default; -v adds info, -vv debug, -q only errors.

    In ``AGENT_LOG_FORMAT`` (text or json); with settings that do not load, in text (the
    command then reports what is wrong with them).
    """
    import logging

    from core_agent.contracts.settings import AgentSettings
    from core_agent.observability.log_format import log_to_stderr

    try:
        log_format = AgentSettings().log_format
    except Exception:
        log_format = "text"
    levels = (logging.WARNING, logging.INFO, logging.DEBUG)
    level = logging.ERROR if args.quiet else levels[min(args.verbose, 2)]
    log_to_stderr(level, log_format)


async def _export(args: argparse.Namespace) -> int:
    """JSON lines (``replay.commands.export``), or the spans to a collector with ``--otlp``."""
    if args.otlp is None:
        if args.json:
            from core_agent.contracts.errors import UsageError

            raise UsageError("--json goes with --otlp; the JSON-lines export is JSON already")
        return int(await _replay("export")(args))
    if args.output is not None:
        from core_agent.contracts.errors import UsageError

        raise UsageError("-o and --otlp cannot go together: --otlp sends the spans to a collector")
    from core_agent.otlp_commands import export_otlp

    return await export_otlp(args)


async def _ui(args: argparse.Namespace) -> int:
    try:
        from core_agent.trace_viewer.server import serve_viewer
    except ImportError as exc:
        from core_agent.contracts.errors import ConfigurationError

        raise ConfigurationError(
            f"the trace viewer needs the `ui` extra ({exc.name} is missing): "
            "pip install 'core-agent[ui]'"
        ) from exc
    from core_agent.contracts.settings import AgentSettings

    data_dir = AgentSettings(**_trust(args)).data_dir
    await serve_viewer(
        lambda: _kernel(args)[0],
        port=args.port,
        open_browser=not args.no_open,
        runtime_dir=data_dir / "runtime",
    )
    return EXIT_OK


async def _stats(args: argparse.Namespace) -> int:
    from core_agent.stats_commands import stats

    return await stats(args, _kernel()[0])


async def _chat(args: argparse.Namespace) -> int:
    from core_agent.chat.repl import run_chat

    return await run_chat(
        args.workspace,
        debug=args.debug,
        painted=args.painted,
        agent=getattr(args, "agent_definition", None),
        trust_agent_file=args.trust_agent_file,
    )


def _knowledge(name: str) -> Any:
    async def handler(args: argparse.Namespace) -> int:
        from core_agent import knowledge_commands

        result: int = await getattr(knowledge_commands, name)(args)
        return result

    return handler


def _replay(name: str) -> Any:
    async def handler(args: argparse.Namespace) -> int:
        from core_agent.replay import commands

        # A fork carries on live: a person at a terminal is asked about risky calls there.
        args.ask_human = _ask_in_terminal if sys.stdin is not None and sys.stdin.isatty() else None
        result: int = await getattr(commands, name)(args)
        return result

    return handler


def _schema() -> int:
    from shared.agent_protocol import protocol_json_schema

    print(json.dumps(protocol_json_schema(), indent=2))
    return EXIT_OK


async def _plugins(args: argparse.Namespace) -> int:
    from core_agent.plugin_inventory import inventory_json, plugin_inventory
    from core_agent.safety.terminal_text import printable

    groups = plugin_inventory()
    if args.json:
        print(json.dumps(inventory_json(groups), indent=2))
        return EXIT_OK
    # Plain lines, not a table: targets and errors are long, and must stay whole.
    for group in groups:
        note = f"  ({group.note})" if group.note else ""
        print(f"{group.group}{note}" + ("" if group.plugins else ": none installed"))
        width = max((len(plugin.name) for plugin in group.plugins), default=0)
        for plugin in group.plugins:
            line = (
                f"  {plugin.name:<{width}}  {plugin.distribution} {plugin.version}  {plugin.target}"
            )
            if not plugin.loads:
                line += f"  DOES NOT LOAD: {plugin.error}"
            print(printable(line, newlines=False))
    return EXIT_OK


async def _policy_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core_agent.container import KernelContainer
    from core_agent.contracts.errors import UsageError
    from core_agent.contracts.settings import AgentSettings
    from core_agent.kernel.call_check import check_call

    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object")
    from core_agent.container import use_agent_file

    settings = AgentSettings(**_trust(args))
    if args.workspace:
        settings = settings.model_copy(update={"workspace_roots": (Path(args.workspace),)})
    container = KernelContainer()
    container.settings.override(settings)
    use_agent_file(container, args.agent)
    settings = container.settings()
    registry = container.tool_registry()
    if args.tool not in registry.names():
        raise UsageError(
            f"unknown tool {args.tool!r}; available tools: {', '.join(registry.names())}"
        )
    sandbox = container.sandbox()
    try:
        report = await check_call(
            tools=registry,
            policy=container.policy_engine(),
            sandbox=sandbox,
            threshold=settings.policy_approval_required_risk,
            tool=args.tool,
            arguments=arguments,
            tainted=args.tainted,
        )
    finally:
        await sandbox.close()
    print(json.dumps(report, indent=2))
    # Scripts ask "would this run?": refused (denied by policy or the sandbox) is a failure.
    refused = report["denied"] or not report["valid"] or not report["sandbox"]["allowed"]
    return EXIT_FAILED if refused else EXIT_OK


async def _route(args: argparse.Namespace) -> int:
    from core_agent.container import KernelContainer, use_agent_file
    from core_agent.contracts.settings import AgentSettings
    from shared.agent_protocol import TaskRequest

    # Only the router and the tool specs: no store is opened, and no model is called
    # unless AGENT_ROUTER_CLASSIFIER=model asks for one.
    container = KernelContainer()
    container.settings.override(AgentSettings(**_trust(args)))
    use_agent_file(container, args.agent)
    request = TaskRequest(task=args.task, force_mode=args.mode)
    names = list(request.tools) if request.tools is not None else None
    decision = await container.router().route(request, container.tool_registry().specs(names))
    payload = {
        "strategy": decision.strategy,
        "reason": decision.reason,
        "forced": decision.forced,
        "features": decision.features,
    }
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(f"strategy: {decision.strategy}\nreason: {decision.reason}")
        for name, value in decision.features.items():
            print(f"  {name}: {value}")
    return EXIT_OK


def _kernel(args: argparse.Namespace | None = None) -> tuple[AgentKernel, Any]:
    """The configured kernel, without background recovery; with ``--agent``'s file applied.

    A command is a short-lived process: orphaned tasks are taken over by ``recover`` and
    ``resume``, or by a long-lived host, not by whatever command happens to run next.
    """
    from core_agent.agent_files import load_agent_file
    from core_agent.container import create_kernel
    from core_agent.contracts.settings import AgentSettings

    settings = AgentSettings(**_trust(args))
    path = getattr(args, "agent", None)
    agent = load_agent_file(path) if path else None
    kernel = create_kernel(settings.model_copy(update={"recovery": "off"}), agent=agent)
    return kernel, agent.apply(settings) if agent else settings


async def _run(args: argparse.Namespace) -> int:
    import os.path
    from contextlib import aclosing

    from rich.console import Console

    from core_agent.chat.model_text import ModelText
    from core_agent.chat.rendering import StreamingAnswer
    from core_agent.safety.terminal_text import printable
    from shared.agent_protocol import (
        LLMCompleted,
        LLMDelta,
        LLMFailed,
        PlanCreated,
        PlanStepStarted,
        StrategyFallback,
        StrategySelected,
        TaskCanceled,
        TaskFailed,
        TaskQueued,
        TaskRequest,
        TaskSucceeded,
        TaskWaitingApproval,
        ToolCompleted,
        ToolStarted,
    )

    # The request first: a bad task or option is reported before anything else is printed.
    request = TaskRequest(
        task=args.task,
        session_id=args.session,
        force_mode=args.mode,
        max_turns=args.max_turns,
        # The task records the agent file it ran with: resume it with the same --agent.
        # (abspath reads no file: it joins the working directory.)
        metadata={"agent_file": os.path.abspath(args.agent)} if args.agent else {},  # noqa: ASYNC240
    )
    out, err = Console(highlight=False), Console(stderr=True, highlight=False, quiet=args.quiet)
    kernel, settings = _kernel(args)
    if settings.sandbox_mode == "unconfined":
        err.print(
            "warning: AGENT_SANDBOX_MODE=unconfined: commands run without operating-system "
            "confinement (they can write anywhere you can and use the network).",
            style="yellow",
            markup=False,
        )
    if settings.gateway_name == "scripted" and settings.scripted_model_script is None:
        from core_agent.contracts.settings import MODEL_CONFIGURATION_HELP

        err.print(
            "[yellow]Using the shipped scripted demo model: it follows fixed rules (arithmetic "
            "and the time), it is not a language model.[/yellow]\n"
            + MODEL_CONFIGURATION_HELP
            + "\n",
            markup=True,
        )
    if sys.stdin is not None and sys.stdin.isatty():
        kernel.set_approval_callback(_ask_in_terminal)
    # Without a terminal nobody can answer here: a risky call leaves the task waiting,
    # durably, for `core-agent resolve` (exit 3), rather than being denied on the user's behalf.
    status = EXIT_FAILED
    trace_id = session_id = ""
    # The answer, not the way to it, is what stdout carries. A terminal sees it stream, a try
    # the model gave up replaced by the next (as in the chat); a pipe or a file, which cannot
    # take text back, gets the task's answer once, when it has succeeded.
    on_terminal = not args.json and sys.stdout is not None and sys.stdout.isatty()
    live = StreamingAnswer(out, markdown=False) if on_terminal else None
    text = ModelText()
    async with kernel, aclosing(kernel.stream_task(request)) as events:
        try:
            async for event in events:
                if args.json:
                    out.print(event.model_dump_json(), soft_wrap=True, markup=False)
                    if event.depth == 0 and isinstance(event, TaskWaitingApproval):
                        status = EXIT_WAITING
                    elif event.depth == 0 and isinstance(
                        event, TaskSucceeded | TaskFailed | TaskCanceled
                    ):
                        status = EXIT_OK if isinstance(event, TaskSucceeded) else EXIT_FAILED
                    continue
                if isinstance(event, LLMDelta):
                    # A nested agent's text is its report to this task, not the answer.
                    if event.depth == 0:
                        taken_back = text.add(event)
                        if live is not None:
                            live.take_back(taken_back)
                            live.add(event.text)
                    continue
                if live is not None:
                    live.finish()  # before anything else is printed on the terminal
                if event.depth == 0 and isinstance(event, LLMCompleted | LLMFailed):
                    text.call_ended()
                elif event.depth == 0 and isinstance(event, ToolStarted | PlanStepStarted):
                    text.clear()
                if event.depth == 0 and isinstance(event, TaskQueued):
                    trace_id, session_id = event.trace_id, event.session_id
                elif isinstance(event, StrategySelected):
                    err.print(
                        f"strategy: {event.strategy} ({event.reason})", style="dim", markup=False
                    )
                elif isinstance(event, PlanCreated):
                    steps = ", ".join(f"{s['id']}: {s['goal']}" for s in event.steps)
                    err.print(
                        f"plan r{event.revision}: {printable(steps)}", style="dim", markup=False
                    )
                elif isinstance(event, PlanStepStarted):
                    err.print(
                        f"\n▶ step {event.step_id}: {printable(event.goal)}",
                        style="dim",
                        markup=False,
                    )
                elif isinstance(event, StrategyFallback):
                    err.print(
                        f"\nfalling back to {event.to_strategy}: {printable(event.reason)}",
                        style="yellow",
                        markup=False,
                    )
                elif isinstance(event, TaskWaitingApproval):
                    err.print(
                        f"\nThe task is waiting for you. See `core-agent approvals`, then "
                        f"`core-agent resolve {event.request_id} --approve --reason '...'` "
                        "or `--deny`.",
                        style="yellow",
                        markup=False,
                    )
                    if event.depth == 0:
                        status = EXIT_WAITING
                elif isinstance(event, ToolStarted):
                    call = event.tool_call
                    shown = (
                        json.dumps(call.arguments)
                        if call.arguments is not None
                        else call.raw_arguments
                    )
                    err.print(
                        f"\n→ {printable(call.name)}({printable(shown or '')})",
                        style="cyan",
                        markup=False,
                    )
                elif isinstance(event, ToolCompleted):
                    result = event.result
                    style = "red" if result.is_error else "green"
                    err.print(f"← {printable(result.content[:500])}", style=style, markup=False)
                elif event.depth == 0 and isinstance(
                    event, TaskSucceeded | TaskFailed | TaskCanceled
                ):
                    if isinstance(event, TaskSucceeded):
                        status = EXIT_OK
                        if live is None or not text.shows(event.output):
                            # Not streamed as it is (a pipe, a typed answer): printed whole.
                            answer = printable(event.output)
                            if answer:
                                out.print(
                                    answer,
                                    end="" if answer.endswith("\n") else "\n",
                                    markup=False,
                                    emoji=False,
                                    highlight=False,
                                    soft_wrap=True,
                                )
                    else:
                        status = EXIT_FAILED
                    _print_summary(err, event, trace_id, session_id)
        finally:
            if live is not None:
                live.finish()  # an interruption too leaves the text drawn, the cursor shown
    return status


async def _serve(args: argparse.Namespace) -> int:
    from core_agent.container import create_kernel
    from core_agent.contracts.errors import UsageError
    from core_agent.contracts.settings import AgentSettings
    from core_agent.stdio_server import ServerLimits, check_workspace, serve_stdio

    if args.max_message_bytes < 1024 or args.drain_timeout < 0:
        raise UsageError("--max-message-bytes must be at least 1024, --drain-timeout at least 0")
    settings = AgentSettings()
    check_workspace(settings)
    limits = ServerLimits(
        max_message_bytes=args.max_message_bytes,
        max_requests=args.max_requests,
        max_tasks=args.max_tasks,
        output_buffer_bytes=args.output_buffer_bytes,
    )
    # A long-lived host: tasks whose process died are recovered, as AGENT_RECOVERY says.
    # The kernel is built once stdout is the protocol's (a plugin may print as it loads).
    await serve_stdio(lambda: create_kernel(settings), limits=limits, drain_s=args.drain_timeout)
    return EXIT_OK


_ANSWERS: dict[str, Literal["once", "task", "session"]] = {
    "y": "once",
    "yes": "once",
    "t": "task",
    "s": "session",
}


async def _ask_in_terminal(request: ApprovalRequest) -> ApprovalDecision:
    """Show a risky call on stderr and read the decision from the terminal.

    Ctrl-C at the prompt denies this call (the run goes on, and the model is told); only a
    terminal is asked: without one the task waits durably instead (see ``_run``).
    """
    from core_agent.safety.terminal_text import printable
    from shared.agent_protocol import ApprovalDecision

    call = request.tool_call
    shown = json.dumps(call.arguments, indent=2) if call and call.arguments is not None else ""
    answer = await _read_answer(
        f"\n--- approval needed ({request.risk.value} risk, rule {request.rule}) ---\n"
        f"tool: {printable(call.name) if call else '-'}\narguments: {printable(shown)}\n"
        f"why: {printable(request.reason or request.question)}\n"
        "approve? [y]es once / [t] same call this task / [s] same call this session / [N]o: "
    )
    if answer is None:
        print("\n(interrupted: denied)", file=sys.stderr, flush=True)
    scope = _ANSWERS.get((answer or "").strip().lower())
    reason = "approved in the terminal" if scope else "not approved in the terminal"
    return ApprovalDecision(
        request_id=request.request_id,
        approved=scope is not None,
        scope=scope or "once",
        reason="interrupted at the prompt (Ctrl-C)" if answer is None else reason,
        decided_by="cli",
    )


async def _read_answer(prompt: str) -> str | None:
    """Show ``prompt`` on stderr; the line typed at the terminal, or ``None`` on Ctrl-C.

    Read on the event loop (no thread left blocked on stdin after an interruption), with
    SIGINT taken as an answer from before the prompt is shown until it is answered.
    """
    import os
    import signal

    import anyio
    import anyio.abc

    fd = sys.stdin.fileno()
    answer: list[str | None] = []
    async with anyio.create_task_group() as group:

        async def read() -> None:
            chunks: list[bytes] = []
            while not chunks or not chunks[-1].endswith(b"\n"):
                await anyio.wait_readable(fd)
                chunk = os.read(fd, 4096)
                if not chunk:  # end of input
                    break
                chunks.append(chunk)
            answer.append(b"".join(chunks).decode(errors="replace"))
            group.cancel_scope.cancel()

        async def interrupted(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with anyio.open_signal_receiver(signal.SIGINT) as signals:
                task_status.started()
                async for _ in signals:
                    answer.append(None)
                    group.cancel_scope.cancel()
                    return

        await group.start(interrupted)
        print(prompt, end="", file=sys.stderr, flush=True)
        group.start_soon(read)
    return answer[0] if answer else None


def _print_summary(
    console: Console,
    event: TaskSucceeded | TaskFailed | TaskCanceled,
    trace_id: str,
    session_id: str,
) -> None:
    usage = event.usage
    cost = "unknown" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    status = event.kind.removeprefix("task.")
    console.print()
    if event.kind == "task.failed":
        from core_agent.safety.terminal_text import printable

        console.print(
            f"error ({event.error_type}): {printable(event.error or '')}", style="red", markup=False
        )
    console.print(
        f"status: {status}  task: {event.task_id}  trace: {trace_id}  "
        f"tokens: {usage.input_tokens} in / {usage.output_tokens} out  cost: {cost}  "
        f"session: {session_id}",
        markup=False,
        soft_wrap=True,
    )


_REFUSALS = frozenset(
    {"SandboxRefusedError", "PolicyDeniedError", "ApprovalDeniedError", "ToolHookBlockedError"}
)


async def _audit(args: argparse.Namespace) -> int:
    from core_agent.safety.terminal_text import printable
    from shared.agent_protocol import (
        ApprovalRequested,
        ApprovalResolved,
        InjectionSuspected,
        PolicyDecided,
        ToolCompleted,
        ToolHookApplied,
    )

    kernel, _ = _kernel()
    async with kernel:
        events = await kernel.task_events(await kernel.find_task_id(args.task_id))
    for event in events:
        if isinstance(event, ToolCompleted):
            result = event.result
            if result.error_type not in _REFUSALS:
                continue
            line = f"refused   {result.name}: {result.error_type}: {result.content[:200]}"
        elif isinstance(event, PolicyDecided):
            line = (
                f"policy    {event.tool}: {event.risk.value} by rule {event.rule}"
                + (" DENIED" if event.denied else "")
                + (" (approval required)" if event.approval_required else "")
                + (" [tainted]" if event.tainted else "")
            )
        elif isinstance(event, ApprovalRequested):
            request = event.request
            subject = request.tool_call.name if request.tool_call else "question"
            line = f"asked     {subject} ({request.risk.value}): request {request.request_id}"
        elif isinstance(event, ApprovalResolved):
            decision = event.decision
            verdict = f"approved ({decision.scope})" if decision.approved else "denied"
            line = f"decided   request {decision.request_id}: {verdict} {decision.reason}".rstrip()
        elif isinstance(event, InjectionSuspected):
            line = f"injection {event.tool}: {', '.join(event.signals)}"
        elif isinstance(event, ToolHookApplied):
            line = f"hook      {event.tool}: {event.hook} {event.action} {event.reason}".rstrip()
        else:
            continue
        if args.json:
            print(event.model_dump_json())
        else:
            print(f"{event.occurred_at:%H:%M:%S} {printable(line, newlines=False)}")
    return EXIT_OK


async def _approvals(args: argparse.Namespace) -> int:
    from core_agent.safety.terminal_text import printable

    kernel, _ = _kernel()
    async with kernel:
        pending = await kernel.pending_approvals()
    if args.json:
        print(json.dumps([request.model_dump(mode="json") for request in pending], indent=2))
        return EXIT_OK
    if not pending:
        print("No task is waiting for a decision.")
    for request in pending:
        print(f"request {request.request_id} (task {request.task_id}, risk {request.risk.value})")
        call = request.tool_call
        if call is not None:
            shown = printable(f"{call.name} {json.dumps(call.arguments)}", newlines=False)
            print(f"  {shown} (rule {request.rule})")
            print(f"  why: {printable(request.reason)}")
        else:
            print(f"  {printable(request.question or request.reason)}")
    return EXIT_OK


async def _resolve(args: argparse.Namespace) -> int:
    from shared.agent_protocol import ApprovalDecision

    kernel, _ = _kernel(args)
    decision = ApprovalDecision(
        request_id=args.request_id, approved=args.approve, reason=args.reason, decided_by="cli"
    )
    async with kernel:
        result = await kernel.resolve_approval(args.request_id, decision)
    return _print_result(result, as_json=args.json)


def _print_result(result: TaskResult, *, as_json: bool = False) -> int:
    from core_agent.safety.terminal_text import printable
    from shared.agent_protocol import TaskStatus

    if as_json:
        print(result.model_dump_json(indent=2))
    elif result.output:
        print(printable(result.output))
    line = f"status: {result.status.value}  task: {result.task_id}"
    if result.error and result.status is not TaskStatus.SUCCEEDED:
        line += f"  ({printable(result.error, newlines=False)})"
    if not as_json:
        print(line, file=sys.stderr)
    if result.status is TaskStatus.WAITING_APPROVAL:
        print(
            f"answer with: core-agent resolve {result.pending_approval} --approve|--deny",
            file=sys.stderr,
        )
        return EXIT_WAITING
    return EXIT_OK if result.status is TaskStatus.SUCCEEDED else EXIT_FAILED


async def _resume(args: argparse.Namespace) -> int:
    kernel, _ = _kernel(args)
    async with kernel:
        result = await kernel.resume(await kernel.find_task_id(args.task_id))
    return _print_result(result, as_json=args.json)


async def _cancel(args: argparse.Namespace) -> int:
    from shared.agent_protocol import TaskStatus

    kernel, _ = _kernel()
    async with kernel:
        task_id = await kernel.find_task_id(args.task_id)
        await kernel.cancel_task(task_id, args.reason)
        state = await kernel.get_task(task_id)
    if args.json:
        print(state.model_dump_json(indent=2))
    elif state.status is TaskStatus.CANCELED:
        print(f"task {task_id} canceled")
    else:
        print(
            f"task {task_id} runs in {state.owner}: asked it to cancel; it stops within "
            "AGENT_CANCEL_CHECK_S"
        )
    return EXIT_OK


async def _recover(args: argparse.Namespace) -> int:
    kernel, _ = _kernel(args)
    async with kernel:
        results = await kernel.recover("fail" if args.fail else "resume")
    if args.json:
        print(json.dumps([result.model_dump(mode="json") for result in results], indent=2))
        return EXIT_OK
    if not results:
        print("No task was left by a process that died.")
    for result in results:
        line = f"{result.task_id}  {result.status.value}"
        if result.error:
            from core_agent.safety.terminal_text import printable

            line += f"  {printable(result.error, newlines=False)[:120]}"
        print(line)
    return EXIT_OK


async def _tasks(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from core_agent.safety.terminal_text import printable
    from shared.agent_protocol import TaskStatus

    kernel, _ = _kernel()
    async with kernel:
        tasks = await kernel.list_tasks(
            status=TaskStatus(args.status) if args.status else None, limit=args.limit
        )
    if args.json:
        print(json.dumps([t.model_dump(mode="json") for t in tasks], indent=2))
        return EXIT_OK
    table = Table("task", "status", "created", "tokens", "task text")
    table.columns[0].no_wrap = True
    for task in tasks:
        table.add_row(
            task.task_id[:SHORT_ID],  # a prefix every command taking a task id accepts
            task.status.value,
            task.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            f"{task.usage.input_tokens}/{task.usage.output_tokens}",
            printable(task.request.task[:60], newlines=False),
        )
    Console().print(table)
    return EXIT_OK


async def _trace(args: argparse.Namespace) -> int:
    from rich.console import Console

    kernel, _ = _kernel()
    async with kernel:
        task = await kernel.get_task(await kernel.find_task_id(args.task_id))
        spans = await kernel.task_spans(task.task_id)
    if args.json:
        print(
            json.dumps(
                {
                    "task_id": task.task_id,
                    "trace_id": task.trace_id,
                    "status": task.status.value,
                    "spans": [
                        {
                            "span_id": s.span_id,
                            "parent_span_id": s.parent_span_id,
                            "kind": s.kind,
                            "name": s.name,
                            "status": s.status,
                            "started_at": s.started_at.isoformat(),
                            "latency_ms": round(s.latency_ms, 3),
                            "tokens_in": s.tokens_in,
                            "tokens_out": s.tokens_out,
                            "cost_usd": s.cost_usd,
                            "error": s.error,
                            "attributes": s.attributes,
                        }
                        for s in spans
                    ],
                },
                indent=2,
                default=str,
            )
        )
        return EXIT_OK
    from core_agent.task_views import print_span_tree

    print_span_tree(Console(highlight=False), task, spans)
    return EXIT_OK


async def _show(args: argparse.Namespace) -> int:
    from rich.console import Console

    from core_agent.task_views import print_conversation

    kernel, _ = _kernel()
    async with kernel:
        task = await kernel.get_task(await kernel.find_task_id(args.task_id))
        events = await kernel.task_events(task.task_id)
    if args.json:
        print(
            json.dumps(
                {
                    "task": task.model_dump(mode="json"),
                    "events": [event.model_dump(mode="json") for event in events],
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return EXIT_OK
    print_conversation(Console(highlight=False), task, events)
    return EXIT_OK


async def _sessions(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from core_agent.contracts.errors import UsageError
    from core_agent.safety.terminal_text import printable

    kernel, _ = _kernel()
    action = args.sessions_command
    if action in ("fork", "retry"):
        from core_agent import session_commands

        if action == "fork":
            return await session_commands.fork(args, kernel)
        if sys.stdin is not None and sys.stdin.isatty():
            kernel.set_approval_callback(_ask_in_terminal)
        return _print_result(await session_commands.retry(args, kernel), as_json=args.json)
    async with kernel:
        if action == "new":
            metadata: dict[str, str] = {}
            for item in args.meta:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise UsageError(f"--meta takes KEY=VALUE, not {item!r}")
                metadata[key] = value
            session = await kernel.create_session(
                user_id=args.user, metadata=metadata, session_id=args.session_id
            )
            print(session.model_dump_json(indent=2) if args.json else session.session_id)
            return EXIT_OK
        if action == "list":
            sessions = await kernel.list_sessions(user_id=args.user, limit=args.limit)
            if args.json:
                print(json.dumps([s.model_dump(mode="json") for s in sessions], indent=2))
                return EXIT_OK
            table = Table("session", "user", "tasks", "last active", "state", "metadata")
            for item in sessions:
                table.add_row(
                    item.session_id,
                    printable(item.user_id or "", newlines=False),
                    str(item.task_count),
                    item.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
                    "closed" if item.closed_at else "open",
                    printable(json.dumps(item.metadata, ensure_ascii=False)[:60], newlines=False),
                )
            Console().print(table)
            return EXIT_OK
        if action == "show":
            transcript = await kernel.session_transcript(args.session_id)
            if args.json:
                print(transcript.model_dump_json(indent=2))
                return EXIT_OK
            from core_agent.session_commands import print_transcript

            print_transcript(Console(highlight=False), transcript)
            return EXIT_OK
        if action == "close":
            closed = await kernel.close_session(args.session_id)
            print(f"session {closed.session_id} closed")
            return EXIT_OK
        deleted = await kernel.delete_session(args.session_id)
        print(
            f"session {deleted.session_id} deleted: {deleted.tasks} tasks, "
            f"{deleted.entries} history entries, {deleted.summaries} summaries"
        )
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
