"""A queued job's start as last refreshed (kept in its record's `extra[START_KEY]`), and in plain
words: `in 2h10m (Resources: waiting for nodes)`, or why there is no estimate."""

from __future__ import annotations

import time
from typing import Optional, Tuple

from .. import dialects
from ..dialects import StartEstimates
from ..records import JobRecord
from ..states import JobState

START_KEY = "start_estimate"  # a queued job's record.extra: {"at": epoch s or None, "reason": why it waits}


def start_of(rec: JobRecord) -> Tuple[Optional[float], str]:
    """(estimated start, why it waits) of a queued job as last refreshed; (None, "") otherwise."""
    got = (rec.extra or {}).get(START_KEY) if JobState(rec.state) == JobState.QUEUED else None
    if not isinstance(got, dict):
        return None, ""
    at = got.get("at")
    return (float(at) if isinstance(at, (int, float)) else None), str(got.get("reason") or "")


def span_words(seconds: float) -> str:
    """A duration as `2h10m`, `3d4h`, `5m`, `40s` (two units at most: an estimate is rough)."""
    s = max(0, int(seconds))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d}d{h}h" if h else f"{d}d"
    if h:
        return f"{h}h{m:02d}m" if m else f"{h}h"
    return f"{m}m" if m else f"{s}s"


def start_words(rec: JobRecord, now: Optional[float] = None) -> str:
    """When a queued job starts and why it waits, in plain words (`status`'s "starts" column and a
    follower's waiting line): `in 2h10m (Resources: waiting for nodes)`. "" for a job not queued."""
    if JobState(rec.state) != JobState.QUEUED:
        return ""
    if ((rec.extra or {}).get(START_KEY) or {}).get("never"):
        return "not as it is (the scheduler says why)"
    at, reason = start_of(rec)
    dialect = dialects.get(rec.dialect)
    if at is not None:
        left = at - (time.time() if now is None else now)
        when = f"in {span_words(left)}" if left >= 60 else "any moment (the estimate is due)"
    elif not dialect.has_scheduler:
        return reason
    elif dialect.supports(StartEstimates):
        when = "not estimated yet"
    else:  # the scheduler has none to give: say so rather than guess
        when = f"no estimate from {dialect.title}"
    return f"{when} ({reason})" if reason else when
