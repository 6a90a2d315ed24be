"""Walltime strings: parse once, print in each scheduler's form."""

from __future__ import annotations

import re

_FORMS = "HH:MM:SS, MM:SS, SS, D-HH:MM:SS, or 90m / 2h / 1d"
_COLON = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_UNIT = re.compile(r"^(\d+)\s*([smhd])$")


def parse_walltime(text: str) -> int:
    """Seconds in `text`; ValueError naming the accepted forms otherwise."""
    s = str(text).strip()
    m = _UNIT.match(s)
    if m:
        return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    m = _COLON.match(s)
    if not m or not s:
        raise ValueError(f"malformed walltime {text!r}: use {_FORMS}")
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if len(parts) == 1:
        seconds = parts[0]
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
        if parts[1] >= 60:
            raise ValueError(f"malformed walltime {text!r}: seconds must be below 60")
    else:
        h, mnt, sec = parts
        if mnt >= 60 or sec >= 60:
            raise ValueError(f"malformed walltime {text!r}: minutes and seconds must be below 60")
        seconds = h * 3600 + mnt * 60 + sec
    if days:
        seconds += int(days) * 86400
    if seconds <= 0:
        raise ValueError(f"walltime {text!r} must be longer than zero")
    return seconds


def hms(seconds: int) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}"


def minutes(seconds: int) -> int:
    return max(1, -(-int(seconds) // 60))
