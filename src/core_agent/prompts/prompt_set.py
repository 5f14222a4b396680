"""The prompt set: the instructions the kernel gives models, kept as data, not code.

Each prompt is a text file shipped in this package (``system.md``, ``planner.md``...), read
with ``importlib.resources`` so an installed wheel finds it. ``AGENT_PROMPTS_DIR`` names a
directory whose ``<name>.md`` files replace the shipped ones by name; the others stay.

A prompt's variables are declared here, in ``PROMPT_SPECS``, not in its file: the code that
renders a prompt decides what it can supply, so an override cannot ask for more. Placeholders
are ``string.Template``'s ``$name`` (or ``${name}``), and ``$$`` is a literal dollar sign;
braces need no escaping, which matters for prompts that show the model JSON. Everything is
checked when the set is loaded (the container loads it while it builds the kernel): an
unreadable or empty file, a stray ``$``, a placeholder the prompt does not declare, or a
required one missing is a ``ConfigurationError`` naming the file, so a bad override stops
start-up rather than a task. Rendering substitutes values into the template in one pass and
never reads the values as templates, so text containing ``$x`` or ``{x}`` goes through as is.

What is not in the set, on purpose: text the kernel adds around these prompts as part of its
own protocol or safety design stays in code, next to the behaviour it describes. The notice
that tool output in ``<untrusted-data>`` tags is data (``contracts.untrusted.UNTRUSTED_NOTICE``) is
appended to every task's system prompt, configured or requested, so that no override can drop
it; the ReAct loop's ``[core-agent notice]`` messages (a repeated call, a streak of failed
calls, an unusable structured answer), the structured-output instruction (it names the
``final_answer`` tool and embeds the schema) and the markers that open the planner's and a
step's user messages (scripted models and tests match on them) change together with the code.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from core_agent.contracts.errors import ConfigurationError, UsageError

SUFFIX = ".md"
"""Every prompt file is ``<name>.md``, shipped or overriding."""
SETTING = "AGENT_PROMPTS_DIR"


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """A prompt's name, what it is for, and the variables its renderer supplies."""

    name: str
    purpose: str
    variables: frozenset[str] = frozenset()
    """Placeholders a template of this prompt may use (each rendering supplies them all)."""
    required: frozenset[str] = frozenset()
    """Placeholders every template of this prompt must use (a subset of ``variables``)."""


PROMPT_SPECS: Mapping[str, PromptSpec] = {
    spec.name: spec
    for spec in (
        PromptSpec(
            "system",
            "the system prompt of every task (a request's own system_prompt replaces it)",
        ),
        PromptSpec(
            "planner",
            "asks for a plan graph as JSON (plan-and-execute)",
            # Plans longer than this are refused and asked for again: the model must be told.
            variables=frozenset({"max_steps"}),
            required=frozenset({"max_steps"}),
        ),
        PromptSpec("step", "the system prompt of one plan step's ReAct loop"),
        PromptSpec("synthesis", "writes the final answer from the steps' results"),
        PromptSpec(
            "classifier",
            "counts a task's sub-goals for the router (AGENT_ROUTER_CLASSIFIER=model)",
        ),
        PromptSpec(
            "summary",
            "folds a session's oldest turns into its running summary (compaction)",
            # The summary's room is bounded by tokens: a summary told no length is cut off.
            variables=frozenset({"words"}),
            required=frozenset({"words"}),
        ),
    )
}
"""Every prompt of the set, by name."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One checked template and where it came from."""

    spec: PromptSpec
    template: string.Template
    source: str
    """The file it was read from (a path, or the shipped file's name)."""

    def render(self, **values: object) -> str:
        """The text with each ``$name`` replaced by ``str(values[name])``.

        Values are inserted as they are: a ``$`` or a brace in them is not a placeholder.

        Raises:
            UsageError: ``values`` are not exactly the prompt's declared variables (a bug in
                the caller, not in the file: the file was checked when it was loaded).
        """
        if set(values) != self.spec.variables:
            raise UsageError(
                f"the {self.spec.name} prompt is rendered with {_names(self.spec.variables)}, "
                f"not {_names(values)}"
            )
        return self.template.substitute(values)


class PromptSet:
    """Every prompt of ``PROMPT_SPECS``, checked; render one with ``render(name, ...)``."""

    def __init__(self, prompts: Mapping[str, Prompt]) -> None:
        if set(prompts) != set(PROMPT_SPECS):
            raise UsageError(
                f"a prompt set has exactly the prompts {_names(PROMPT_SPECS, sign='')}"
            )
        self._prompts = dict(prompts)

    def __getitem__(self, name: str) -> Prompt:
        """The prompt called ``name``.

        Raises:
            KeyError: No prompt has that name.
        """
        return self._prompts[name]

    def __iter__(self) -> Iterator[Prompt]:
        """The prompts, in ``PROMPT_SPECS`` order."""
        return iter(self._prompts.values())

    def render(self, name: str, **values: object) -> str:
        """Prompt ``name`` rendered with ``values`` (see ``Prompt.render``)."""
        return self._prompts[name].render(**values)

    def with_literal(self, name: str, text: str, source: str) -> PromptSet:
        """This set with prompt ``name`` replaced by ``text``, taken literally.

        For text that is not a template (an agent file's system prompt): a ``$`` in it is a
        dollar sign, not a placeholder.

        Raises:
            UsageError: ``name`` is not a prompt, or its prompt has placeholders (its renderer
                supplies values a literal text would drop); ``text`` is blank.
        """
        spec = PROMPT_SPECS.get(name)
        if spec is None or spec.variables:
            raise UsageError(f"only a prompt without placeholders takes a literal text: {name!r}")
        if not text.strip():
            raise UsageError(f"the {name} prompt from {source} is empty")
        prompt = _checked(spec, text.strip().replace("$", "$$"), source)
        return PromptSet({**self._prompts, name: prompt})


def load_prompt_set(directory: Path | None = None) -> PromptSet:
    """The shipped prompts, each replaced by ``directory/<name>.md`` when that file exists.

    Raises:
        ConfigurationError: ``directory`` is not a directory or holds a file that is not a
            prompt's; a prompt file cannot be read, is empty, has a ``$`` that starts no
            placeholder, uses a placeholder its prompt does not declare, or lacks one it
            requires. The message names the file.
    """
    overrides = _override_files(directory) if directory is not None else {}
    prompts: dict[str, Prompt] = {}
    for name, spec in PROMPT_SPECS.items():
        path = overrides.get(name)
        if path is None:
            source = f"the shipped core_agent/prompts/{name}{SUFFIX}"
            text = _read(resources.files(__package__).joinpath(name + SUFFIX), source)
        else:
            source = str(path)
            text = _read(path, source)
        prompts[name] = _checked(spec, text, source)
    return PromptSet(prompts)


@cache
def default_prompts() -> PromptSet:
    """The shipped prompt set (read once per process; it never changes)."""
    return load_prompt_set()


def _override_files(directory: Path) -> dict[str, Path]:
    """``<name>.md`` files of ``directory`` by prompt name; any other visible file is refused.

    Strict on purpose: a misspelt ``planer.md`` would otherwise be ignored without a word.
    """
    if not directory.is_dir():
        raise ConfigurationError(f"{SETTING}={directory} is not a directory")
    found: dict[str, Path] = {}
    expected = [name + SUFFIX for name in PROMPT_SPECS]
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or path.is_dir():
            continue  # editors' swap files, version control
        if path.suffix != SUFFIX or path.stem not in PROMPT_SPECS:
            close = difflib.get_close_matches(path.name, expected, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigurationError(
                f"{SETTING}: {path} is not a prompt file{hint}; prompt files are "
                f"{', '.join(expected)}"
            )
        found[path.stem] = path
    return found


def _read(file: Path | Traversable, source: str) -> str:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"prompt file {source} cannot be read: {exc}") from exc
    # A file's final newline is the editor's, not the prompt's.
    text = text.strip()
    if not text:
        raise ConfigurationError(f"prompt file {source} is empty")
    return text


def _checked(spec: PromptSpec, text: str, source: str) -> Prompt:
    template = string.Template(text)
    for match in template.pattern.finditer(text):
        if match.group("invalid") is not None:
            line = text.count("\n", 0, match.start()) + 1
            raise ConfigurationError(
                f"prompt file {source}, line {line}: a '$' that starts no placeholder; "
                "write $$ for a dollar sign, $name or ${name} for a variable"
            )
    used = set(template.get_identifiers())
    allowed = f"the {spec.name} prompt allows " + (
        _names(spec.variables) if spec.variables else "no placeholders"
    )
    unknown = used - spec.variables
    if unknown:
        raise ConfigurationError(
            f"prompt file {source}: unknown placeholder {_names(unknown)}; {allowed}"
        )
    missing = spec.required - used
    if missing:
        raise ConfigurationError(
            f"prompt file {source}: lacks the placeholder {_names(missing)}, which the "
            f"{spec.name} prompt requires ({allowed}; placeholders are written $name)"
        )
    return Prompt(spec=spec, template=template, source=source)


def _names(names: Iterable[str], sign: str = "$") -> str:
    return ", ".join(f"{sign}{name}" for name in sorted(names))
