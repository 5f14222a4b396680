"""Secrets never reach the stores: what is redacted, and how.

A ``Redactor`` replaces, in any text, the values of the model and embedding keys, the values
of the host's credential variables (names with KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL...),
well-known key formats (OpenAI, Anthropic, GitHub, AWS, Google, Slack, Stripe keys, JWTs,
bearer tokens, private key blocks) and the patterns the user configures
(``AGENT_REDACT_PATTERNS``), with ``[REDACTED]``. The store wrappers in ``redacting_stores``
apply it to every event, span, checkpoint and memory before it is written; what the model and
the host see in memory is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from core_agent.contracts.errors import ConfigurationError

M = TypeVar("M", bound=BaseModel)

MARK = "[REDACTED]"
MIN_SECRET_CHARS = 8
"""Shorter values of credential variables are not treated as secrets (too many false hits)."""

KEY_FORMATS = (
    r"sk-ant-[A-Za-z0-9_\-]{20,}",
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"github_pat_[A-Za-z0-9_]{40,}",
    r"glpat-[A-Za-z0-9_\-]{20,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"AIza[0-9A-Za-z_\-]{35}",
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",
    r"hf_[A-Za-z0-9]{30,}",
    r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{20,}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)
"""Credential formats redacted wherever they appear."""

_CREDENTIAL_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|PRIVATE|SESSION|PAT)",
    re.IGNORECASE,
)
_NOT_A_SECRET = re.compile(r"(_SOCK|_PATH|_FILE|_DIR|_URL|_HOST|_PORT|_ID|_REGION)$", re.I)


def host_secrets(environ: Mapping[str, str]) -> list[str]:
    """Values of the environment's credential variables (``OPENAI_API_KEY``, ``GH_TOKEN``...)."""
    found = []
    for name, value in environ.items():
        if not _CREDENTIAL_NAME.search(name) or _NOT_A_SECRET.search(name):
            continue
        value = value.strip()
        if len(value) >= MIN_SECRET_CHARS and not value.startswith("/") and " " not in value:
            found.append(value)
    return found


class Redactor:
    """Replaces secrets (literal values and patterns) in text, data and protocol models."""

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        literals = sorted(
            {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True
        )
        parts = [re.escape(secret) for secret in literals]
        for pattern in (*KEY_FORMATS, *patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigurationError(
                    f"AGENT_REDACT_PATTERNS: {pattern!r} is not a regular expression: {exc}"
                ) from exc
            parts.append(f"(?:{pattern})")
        self._regex = re.compile("|".join(parts)) if parts else None

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by ``[REDACTED]``."""
        if self._regex is None or not value:
            return value
        return self._regex.sub(MARK, value)

    def contains_secret(self, value: str) -> bool:
        """Whether ``value`` holds something ``text`` would replace."""
        return self._regex is not None and self._regex.search(value) is not None

    def data(self, value: Any) -> Any:
        """JSON-like data with every string (keys included) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        return value

    def model(self, model: M) -> M:
        """A protocol model with its strings redacted (the same object when nothing is)."""
        if self._regex is None or not self.contains_secret(model.model_dump_json()):
            return model
        cleaned = self.data(model.model_dump(mode="json"))
        return type(model).model_validate(cleaned)
