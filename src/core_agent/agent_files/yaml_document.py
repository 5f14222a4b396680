"""A YAML document read safely, with the line and column of every key and value.

PyYAML rather than ruamel.yaml: it is already installed with litellm, and its safe loader
and node marks are all this needs (ruamel's round-trip editing is not); its pure-Python
loader is used so messages and positions do not depend on whether libyaml is present.

PyYAML's safe loader builds only plain data (mappings, lists, strings, numbers, booleans):
a ``!!python/...`` tag, or any tag the safe constructor does not know, is refused before
anything is built, at the node that carries it. The composed node tree is kept beside the
data so a problem found later (by the schema) can be located: ``position`` follows a path of
keys and indexes down the tree. Aliases share nodes, so every walk visits a node once.

Merge keys (``<<: *defaults``) are refused: PyYAML copies every merged pair into the mapping
that merges it, so a few hundred bytes of merges of merges build hundreds of megabytes, and
an agent file has no free-form section for shared defaults to live in anyway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from core_agent.agent_files.problems import AgentFileError, AgentFileProblem

Loc = tuple[str | int, ...]
"""A path into the document: mapping keys and list indexes (pydantic's ``loc``)."""

MAX_DEPTH = 32
"""Agent files are a few levels deep; deeper nesting is refused before anything walks it."""
_MERGE_TAG = "tag:yaml.org,2002:merge"
_CORE_TAG = re.compile(r"^tag:yaml\.org,2002:")


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """The data of one YAML document and the nodes it was built from."""

    data: Any
    root: Any
    """The composed root node (``yaml.MappingNode``...), for positions."""
    _keys: dict[int, dict[str, tuple[Any, Any]]] = field(default_factory=dict, repr=False)
    """Each mapping node's pairs by key, built when a position in it is first asked for."""

    @classmethod
    def parse(cls, text: str, source: str) -> YamlDocument:
        """Compose, check and build ``text``.

        Raises:
            AgentFileError: Invalid YAML, more than one document, an empty document, a tag
                that builds objects, or a key given twice in one mapping (YAML keeps the
                last without a word; here it is a mistake), each with its line and column.
        """
        loader = yaml.SafeLoader(text)
        try:
            try:
                root = loader.get_single_node()
            except RecursionError as exc:  # the composer recurses once per level
                raise AgentFileError.at(
                    source, 0, 0, f"nested more than {MAX_DEPTH} levels"
                ) from exc
            if root is None:
                raise AgentFileError.at(source, 1, 1, "the file is empty: " + _EXPECTED)
            problems = _tree_problems(root, loader)
            if problems:
                raise AgentFileError(source, problems)
            data = loader.construct_document(root)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            context = exc.context
            if context and exc.context_mark and mark and exc.context_mark.line != mark.line:
                context += f" started on line {exc.context_mark.line + 1}"
            detail = ": ".join(part for part in (context, exc.problem) if part)
            line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
            raise AgentFileError.at(source, line, column, f"invalid YAML: {detail}") from exc
        except yaml.reader.ReaderError as exc:
            line = text.count("\n", 0, exc.position) + 1
            column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
            raise AgentFileError.at(
                source,
                line,
                column,
                f"invalid YAML: character #x{exc.character:04x} is not allowed",
            ) from exc
        finally:
            loader.dispose()
        return cls(data=data, root=root)

    def position(self, loc: Loc, *, key: bool = False) -> tuple[int, int]:
        """1-based line and column of the value at ``loc`` (of its key with ``key=True``).

        A path that leaves the document (a key that is missing, a value the schema rewrote)
        stops at the deepest node it reached.
        """
        node = self.root
        for depth, part in enumerate(loc):
            last = depth == len(loc) - 1
            if isinstance(node, yaml.MappingNode):
                pair = self._pairs(node).get(str(part))
                if pair is None:
                    break
                if last and key:
                    node = pair[0]
                    break
                node = pair[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    break
                node = node.value[part]
            else:
                break
        mark = node.start_mark
        return mark.line + 1, mark.column + 1

    def _pairs(self, node: Any) -> dict[str, tuple[Any, Any]]:
        pairs = self._keys.get(id(node))
        if pairs is None:
            pairs = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    pairs.setdefault(key.value, (key, value))
            self._keys[id(node)] = pairs
        return pairs


_EXPECTED = "an agent file is a YAML mapping (model:, system_prompt:, tools:, ...)"


def _tree_problems(root: Any, loader: yaml.SafeLoader) -> list[AgentFileProblem]:
    """Refused tags, duplicate keys, and a root that is not a mapping."""
    problems: list[AgentFileProblem] = []
    if not isinstance(root, yaml.MappingNode):
        mark = root.start_mark
        kind = "a list" if isinstance(root, yaml.SequenceNode) else "a single value"
        problems.append(
            AgentFileProblem(mark.line + 1, mark.column + 1, f"{_EXPECTED}, not {kind}")
        )
    known = loader.yaml_constructors
    seen: set[int] = set()
    pending = [(root, 1)]
    while pending:
        node, depth = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        mark = node.start_mark
        if depth > MAX_DEPTH:
            problems.append(
                AgentFileProblem(
                    mark.line + 1, mark.column + 1, f"nested more than {MAX_DEPTH} levels"
                )
            )
            break
        if node.tag not in known:
            problems.append(
                AgentFileProblem(
                    mark.line + 1,
                    mark.column + 1,
                    f"the tag {_short_tag(node.tag)} is not allowed: an agent file holds plain "
                    "YAML data (mappings, lists, strings, numbers, booleans)",
                )
            )
            continue
        if isinstance(node, yaml.MappingNode):
            first: dict[str, Any] = {}
            for key, value in node.value:
                if key.tag == _MERGE_TAG:
                    problems.append(
                        AgentFileProblem(
                            key.start_mark.line + 1,
                            key.start_mark.column + 1,
                            "merge keys (<<) are not allowed in an agent file: write the keys out",
                        )
                    )
                    continue
                if isinstance(key, yaml.ScalarNode):
                    earlier = first.setdefault(key.value, key)
                    if earlier is not key:
                        problems.append(
                            AgentFileProblem(
                                key.start_mark.line + 1,
                                key.start_mark.column + 1,
                                f"duplicate key {key.value!r} (first given on line "
                                f"{earlier.start_mark.line + 1})",
                            )
                        )
                pending.extend(((key, depth + 1), (value, depth + 1)))
        elif isinstance(node, yaml.SequenceNode):
            pending.extend((item, depth + 1) for item in node.value)
    return problems


def _short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:python/object`` as it was written, ``!!python/object``."""
    return "!!" + tag[len("tag:yaml.org,2002:") :] if _CORE_TAG.match(tag) else repr(tag)
