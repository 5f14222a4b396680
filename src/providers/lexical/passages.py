"""What both keyword indexes share: checking passages and turning text into terms."""

from __future__ import annotations

import re
from collections.abc import Sequence

from core_agent.contracts.errors import UsageError
from providers.lexical.cjk_segmentation import segmented

# Letters and digits, as Tantivy's simple tokenizer and FTS5's unicode61 split them: an
# underscore separates words there too, so snake_case identifiers rank alike everywhere.
_WORD = re.compile(r"[^\W_]+")

# Words so common that matching them ranks nothing and costs a scan of most of the index.
STOPWORDS = frozenset(
    """a an and are as at be but by for from has have how i if in into is it its of on or
    that the their then there these they this to was were what when where which who why
    will with""".split()
) | frozenset(
    # Chinese function words and question words, as the segmenter cuts them.
    """的 了 是 在 和 与 及 或 也 都 就 把 被 对 从 为 以 之 而 这 那 这个 那个 这些 那些 我 你
    他 她 它 我们 你们 他们 有 吗 呢 吧 啊 么 什么 怎么 怎样 如何 哪 哪些 哪个 为什么 关于 一个
    请 帮 帮我 一下""".split()
)


def terms(text: str) -> list[str]:
    """Lower-cased words of ``text``, in order, as ``segmented`` sets them apart."""
    return _WORD.findall(segmented(text).lower())


def query_terms(query: str) -> list[str]:
    """The distinct words worth searching for; stopwords only when nothing else is left."""
    words = list(dict.fromkeys(terms(query)))
    meaningful = [w for w in words if w not in STOPWORDS]
    return meaningful or words


def search_terms(query: str, k: int) -> list[str]:
    """``query_terms`` of a search for ``k`` passages; ``UsageError`` when ``k`` < 1."""
    if k < 1:
        raise UsageError(f"k must be at least 1, got {k}")
    return query_terms(query)


def check_passages(passages: Sequence[tuple[str, str]]) -> None:
    """Refuse a batch with an empty or repeated id or a non-string text, before any write."""
    seen: set[str] = set()
    for passage_id, text in passages:
        if not isinstance(passage_id, str) or not passage_id:
            raise UsageError("passage ids must be non-empty strings")
        if passage_id in seen:
            raise UsageError(f"passage {passage_id!r} appears twice in one batch")
        if not isinstance(text, str):
            raise UsageError(f"passage {passage_id!r}: text must be a string")
        seen.add(passage_id)
