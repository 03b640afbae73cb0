"""Durations and timestamps, as the API writes them and as Python holds them.

A duration given to the client is a `datetime.timedelta`, a number of seconds (int or
float, as `time.sleep` takes), or a string in revenant's syntax (`250ms`, `30s`, `5m`,
`1h30m`, `2d`). It is sent as the string form; whole milliseconds, the API's unit.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Optional, Union

Duration = Union[timedelta, int, float, str]
"""A timedelta, seconds as a number, or `"30s"`-style text."""

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^(?:[0-9]+(?:ms|s|m|h|d))+$")
_PART = re.compile(r"([0-9]+)(ms|s|m|h|d)")


def duration_ms(value: Duration, name: str) -> int:
    """Whole milliseconds of a duration; `ValueError` naming `name` when it is
    negative, not finite, or not revenant's syntax; `TypeError` for other types."""
    if isinstance(value, bool):
        raise TypeError(f"{name}: a duration is a timedelta, seconds or text like '30s', not a bool")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        if not _DURATION.match(value):
            raise ValueError(
                f"{name}: {value!r} is not a duration; use text like 250ms, 30s, 5m, 1h30m, 2d"
            )
        return sum(int(n) * _UNITS_MS[unit] for n, unit in _PART.findall(value))
    else:
        raise TypeError(
            f"{name}: a duration is a timedelta, seconds or text like '30s', not {type(value).__name__}"
        )
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"{name}: {value!r} is not a finite duration")
    if seconds < 0:
        raise ValueError(f"{name}: {value!r} is negative")
    return round(seconds * 1000)


def duration_text(value: Duration, name: str) -> str:
    """The API's form of a duration: `"1500ms"`, or the given text when already text."""
    if isinstance(value, str):
        duration_ms(value, name)  # validated, sent as written
        return value
    return f"{duration_ms(value, name)}ms"


def duration_seconds(value: Duration, name: str) -> float:
    """Seconds of a duration, checked as `duration_ms`."""
    return duration_ms(value, name) / 1000.0


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 timestamp of the API (`2026-12-01T08:00:03.120Z`) as an aware
    datetime; None stays None. Python before 3.11 reads neither `Z` nor fractions of
    other than 3 or 6 digits, so both are normalised first."""
    if value is None:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    match = re.match(r"^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(.*)$", text)
    if match:
        head, fraction, zone = match.groups()
        text = head + ("." + (fraction + "000000")[:6] if fraction else "") + zone
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def format_time(value: datetime, name: str) -> str:
    """An aware datetime as RFC 3339; a naive one is refused (its zone is a guess)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name}: expected a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(
            f"{name}: {value!r} has no time zone; give an aware datetime (tzinfo=timezone.utc)"
        )
    return value.isoformat()
