"""Job states, the same words for every scheduler."""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT})
