"""``--since``: the moments people type, read against a fixed now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from core_agent.contracts.errors import UsageError
from core_agent.observability.metrics import moment_since

SHANGHAI = timezone(timedelta(hours=8))
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=SHANGHAI)


@pytest.mark.parametrize(
    ("text", "back"),
    [
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("30m", timedelta(minutes=30)),
        ("45min", timedelta(minutes=45)),
        ("90s", timedelta(seconds=90)),
        ("2w", timedelta(weeks=2)),
        ("1.5h", timedelta(minutes=90)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_a_duration_goes_back_from_now(text: str, back: timedelta) -> None:
    assert moment_since(text, now=NOW) == NOW - back


def test_dates_and_times_without_a_zone_are_in_nows_zone() -> None:
    assert moment_since("2026-11-20", now=NOW) == datetime(2026, 11, 20, tzinfo=SHANGHAI)
    assert moment_since("2026-11-20T09:30", now=NOW) == datetime(
        2026, 11, 20, 9, 30, tzinfo=SHANGHAI
    )
    assert moment_since("2026-11-20 09:30:15", now=NOW) == datetime(
        2026, 11, 20, 9, 30, 15, tzinfo=SHANGHAI
    )


def test_a_zone_given_is_kept() -> None:
    assert moment_since("2026-11-20T01:30:00Z", now=NOW) == datetime(
        2026, 11, 20, 1, 30, tzinfo=UTC
    )
    assert moment_since("2026-11-20T09:30:00+08:00", now=NOW) == datetime(
        2026, 11, 20, 1, 30, tzinfo=UTC
    )


@pytest.mark.parametrize("text", ["yesterday", "", "24", "-3h", "7x", "2026-13-01", "h"])
def test_anything_else_is_refused_with_the_forms_it_takes(text: str) -> None:
    with pytest.raises(UsageError, match=r"cannot read .* give a duration back from now \(30m"):
        moment_since(text, now=NOW)
