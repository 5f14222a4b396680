"""Risk levels that the policy engine assigns to tool calls."""

from __future__ import annotations

from enum import StrEnum


class RiskLevel(StrEnum):
    """Ordered risk grade of an action: ``low < medium < high < critical``."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """Position in the order, 0 for ``low``; compare ranks, not strings."""
        return _ORDER.index(self)

    def at_least(self, other: RiskLevel) -> bool:
        """Whether this level is as risky as ``other`` or more."""
        return self.rank >= other.rank


_ORDER = (RiskLevel.LOW, RiskLevel.MEDIUM, RiskLevel.HIGH, RiskLevel.CRITICAL)
