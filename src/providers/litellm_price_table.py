"""Prices and context windows from the table litellm ships, read without importing litellm.

litellm bundles ``model_prices_and_context_window_backup.json`` (per-token prices and input
windows of some thousands of models). Importing litellm to read it costs seconds; reading the
file costs milliseconds, so gateways that do not otherwise need litellm read it here. No
network: only the installed file is read, and a litellm that is missing or moved the file
leaves every price unknown (``None``), never an error.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_TABLE_FILE = "model_prices_and_context_window_backup.json"

_lock = threading.Lock()
_table: dict[str, Any] | None = None


def _load() -> dict[str, Any]:
    global _table
    with _lock:
        if _table is None:
            _table = {}
            try:
                spec = importlib.util.find_spec("litellm")  # finds it; does not import it
                for folder in (spec.submodule_search_locations or ()) if spec else ():
                    path = Path(folder) / _TABLE_FILE
                    if path.is_file():
                        loaded = json.loads(path.read_text(encoding="utf-8"))
                        if isinstance(loaded, dict):
                            _table = loaded
                        break
            except (OSError, ValueError, ImportError):
                logger.debug("litellm's bundled price table could not be read", exc_info=True)
        return _table


def model_entry(model: str) -> dict[str, Any] | None:
    """The table's entry for ``model`` (``openai/gpt-4o-mini`` or ``gpt-4o-mini``), if any.

    The name with its provider prefix is looked up first, then without it, as litellm does
    for OpenAI models.
    """
    table = _load()
    candidates = [model]
    if "/" in model:
        candidates.append(model.split("/", 1)[1])
    for name in candidates:
        entry = table.get(name)
        if isinstance(entry, dict):
            return entry
    return None


def cost_usd(
    model: str, input_tokens: int, output_tokens: int, *, cache_read_tokens: int = 0
) -> float | None:
    """A call's cost at the table's per-token prices; ``None`` for a model it has no price.

    ``cache_read_tokens`` of the input were read from the provider's prompt cache: they cost
    the model's cache-read price where the table has one (as litellm counts them).
    """
    entry = model_entry(model)
    if entry is None:
        return None
    try:
        input_price = float(entry["input_cost_per_token"])
        output_price = float(entry["output_cost_per_token"])
        cached_price = float(entry.get("cache_read_input_token_cost") or input_price)
    except (KeyError, TypeError, ValueError):
        return None
    cached = min(max(cache_read_tokens, 0), input_tokens)
    return (
        (input_tokens - cached) * input_price + cached * cached_price + output_tokens * output_price
    )


def context_window(model: str) -> int | None:
    """The model's input window (``max_input_tokens``, else ``max_tokens``); else ``None``."""
    entry = model_entry(model)
    if entry is None:
        return None
    tokens = entry.get("max_input_tokens") or entry.get("max_tokens")
    try:
        return int(tokens) if tokens else None
    except (TypeError, ValueError):
        return None
