"""One way to read a host name, shared by the policy engine and the SSRF guard.

If the policy matched ``localhost`` on the raw host while the network layer connected to what
the resolver made of ``localhost.`` or ``ｌｏｃａｌｈｏｓｔ``, a deny rule would miss hosts the
guard then reaches. Both call ``normalize_host``.
"""

from __future__ import annotations

import unicodedata

_DOTS = ("\u3002", "\uff0e", "\uff61")
"""Ideographic and fullwidth full stops, which IDNA treats as label separators."""


def normalize_host(host: str) -> str:
    """``host`` as compared everywhere: NFKC-folded, IDNA-encoded, lower case, no final dot.

    Raises:
        ValueError: Not a valid host name (an empty label, a label IDNA refuses).
    """
    text = unicodedata.normalize("NFKC", host).strip()
    for dot in _DOTS:
        text = text.replace(dot, ".")
    text = text.rstrip(".")
    if not text:
        raise ValueError(f"{host!r} is not a host name")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:  # an IPv6 literal
        return text.lower()
    try:
        return text.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"{host!r} is not a valid host name: {exc}") from exc
