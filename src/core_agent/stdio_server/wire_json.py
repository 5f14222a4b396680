r"""JSON on the protocol's wire: text that is not Unicode found in input, never in output.

JSON lets a string hold a lone surrogate escape (``"\ud800"``): Python decodes it to a
``str`` that UTF-8 cannot encode, so it can be neither stored nor echoed. Input holding one
is refused where it is read (``lone_surrogate_at`` says where). Output is encoded so that it
cannot fail: text that is not Unicode (a file name of undecodable bytes in a tool's output,
say) is sent with U+FFFD in place of each lone surrogate.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

log = logging.getLogger(__name__)

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
"""In decoded text any surrogate is a lone one: ``json`` joins the pairs."""

JsonPath = tuple[str | int, ...]


def may_hold_lone_surrogates(line: bytes) -> bool:
    """Whether the JSON text ``line`` may decode to a lone surrogate (it has such escapes).

    UTF-8 itself cannot carry surrogates, so only escapes can; a line without any needs no
    closer look.
    """
    return _SURROGATE_ESCAPE.search(line) is not None


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (holds no lone surrogate)."""
    return _SURROGATE.search(text) is None


def lone_surrogate_at(value: Any) -> JsonPath | None:
    r"""Where decoded JSON ``value`` holds text that is not Unicode: member names and indexes.

    A member name that is not Unicode ends the path, shown escaped (``member name
    '\ud800'``). ``None`` when all its text is Unicode.
    """
    stack: list[tuple[JsonPath, Any]] = [((), value)]
    while stack:  # not recursive: nested as deep as ``json`` reads
        path, item = stack.pop()
        if isinstance(item, str):
            if not is_unicode(item):
                return path
        elif isinstance(item, dict):
            for key, member in item.items():
                if not is_unicode(key):
                    return (*path, f"member name {key!a}")
                stack.append(((*path, key), member))
        elif isinstance(item, list):
            stack.extend(((*path, index), member) for index, member in enumerate(item))
    return None


def describe(path: JsonPath) -> str:
    """``path`` as a host reads it: ``params.task_id``."""
    return ".".join(str(part) for part in path) or "params"


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, each lone surrogate as U+FFFD."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode()


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8 (non-ASCII text as is); it cannot fail on text."""
    return utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def model_json(model: BaseModel) -> bytes:
    """``model`` as JSON in UTF-8; it cannot fail on text (see the module)."""
    try:
        return model.model_dump_json().encode()
    except (PydanticSerializationError, UnicodeError):
        log.warning("a %s holds text that is not Unicode: sent with U+FFFD", type(model).__name__)
        dumped = json.dumps(
            model.model_dump(), ensure_ascii=False, separators=(",", ":"), default=_as_json
        )
        return utf8(dumped)


def _as_json(value: object) -> object:
    # What ``model_dump`` leaves that ``json`` cannot write: times, and anything else as text.
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
