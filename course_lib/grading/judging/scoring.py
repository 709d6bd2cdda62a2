"""The instructor's scoring rule: all or nothing (the default) or partial credit, and a late penalty.

The grader records what happened (status, cases passed out of cases run); the rule turns it into points when
the gradebook is exported, and the gradebook records the rule and every export's points.

- **All or nothing** (default): an exercise's points when every hidden case passed, else 0. Known mistakes
  often pass the easy cases, so partial credit rewards exactly them; it is an instructor's choice.
- **Partial credit** (``--partial-credit``): ``points * cases_passed / cases_total`` for an exercise that ran
  and failed some cases (``fail``); an error, a timeout, a refused or missing cell still earns 0.
- **Late penalty** (``--deadline`` and ``--late-penalty``): a submission after the deadline loses a share of
  its total, ``"10%/day"`` (per started day), ``"2%/hour"`` (per started hour) or ``"50%"`` (once), never
  below 0. The submission time is the file's modification time or, with ``--submission-times CSV``, the time
  the instructor supplies (the LMS's submission time); the rule says which (``times``).

An override (``course-grade override``) replaces an exercise's points; the late penalty applies to the total
afterwards.

Example:
    >>> rule = ScoringRule(partial_credit=True, deadline="2026-11-20T23:59:00Z", penalty="10%/day")
    >>> exercise_points(2.0, "fail", 3, 4, rule)
    1.5
    >>> late_factor(rule, "2026-11-22T08:00:00Z")   # 32 hours late: two started days
    (115260.0, 0.8)
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["ScoringRule", "exercise_points", "late_factor", "parse_time", "parse_penalty"]

_UNITS = {"day": 86400.0, "hour": 3600.0, "minute": 60.0}
_PENALTY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*(?:/\s*(day|hour|minute))?\s*$")


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (``2026-11-20T23:59``, ``...Z``, ``...+01:00``); a time without zone is UTC."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as err:
        raise ValueError(f"time: expected ISO 8601 such as 2026-11-20T23:59:00Z, got {text!r}") from err
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_penalty(text: str) -> tuple[float, float | None]:
    """``(percent, unit in seconds or None for once)`` of a penalty such as ``"10%/day"`` or ``"50%"``."""
    match = _PENALTY.match(text)
    if match is None:
        raise ValueError(f"late penalty: expected 'N%/day', 'N%/hour', 'N%/minute' or 'N%', got {text!r}")
    percent = float(match.group(1))
    if not 0 <= percent <= 100:
        raise ValueError(f"late penalty: expected a percentage from 0 to 100, got {percent}")
    return percent, _UNITS[match.group(2)] if match.group(2) else None


@dataclass(frozen=True)
class ScoringRule:
    """How recorded results become points (see the module's docstring)."""

    partial_credit: bool = False
    deadline: str | None = None
    penalty: str = ""
    times: str = "mtime"  # "mtime": the file's modification time; "supplied": --submission-times

    def __post_init__(self) -> None:
        if self.deadline is not None:
            parse_time(self.deadline)
        if self.penalty:
            parse_penalty(self.penalty)
        if self.times not in ("mtime", "supplied"):
            raise ValueError(f"times: expected 'mtime' or 'supplied', got {self.times!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ScoringRule:
        """The rule from its recorded form (other settings recorded beside it are ignored)."""
        return cls(**{k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__})

    def describe(self) -> str:
        """One line for the reports: what the rule does."""
        parts = ["partial credit per hidden case" if self.partial_credit else "all or nothing per exercise"]
        if self.deadline and self.penalty:
            parts.append(f"deadline {self.deadline}, late penalty {self.penalty} "
                         f"({'file times' if self.times == 'mtime' else 'supplied times'})")
        return "; ".join(parts)


def exercise_points(maximum: float, status: str, cases_passed: int, cases_total: int, rule: ScoringRule) -> float:
    """An exercise's points under ``rule`` from its recorded result: its ``maximum`` for a ``pass``;
    ``maximum * passed / total`` for a ``fail`` under partial credit; else 0."""
    if status == "pass":
        return float(maximum)
    if rule.partial_credit and status == "fail" and cases_total > 0:
        return round(float(maximum) * max(0, min(cases_passed, cases_total)) / cases_total, 4)
    return 0.0


def late_factor(rule: ScoringRule, submitted_at: str | None) -> tuple[float, float]:
    """``(seconds late, factor applied to the total)`` for a submission made at ``submitted_at``."""
    if not rule.deadline or not rule.penalty or not submitted_at:
        return 0.0, 1.0
    late = (parse_time(submitted_at) - parse_time(rule.deadline)).total_seconds()
    if late <= 0:
        return 0.0, 1.0
    percent, unit = parse_penalty(rule.penalty)
    units = 1 if unit is None else math.ceil(late / unit)
    return late, max(0.0, round(1.0 - percent * units / 100.0, 6))
