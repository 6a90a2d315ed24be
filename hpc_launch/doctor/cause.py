"""What a doctor cause is (`Cause`: the program's own words, the cause and the fix as one line
each, where the words come from) and what doctor knows besides the log (`Facts`). The table itself:
causes.py, from causes_setup.py and causes_run.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple


def scheduler_words(key: str) -> Tuple[str, ...]:
    """Every scheduler's own wording for the cause `key` (each dialect's `failure_wording`)."""
    from .. import dialects

    return tuple(p for d in dialects.all_dialects() for p in dialects.scheduler_words(d, key))


def unscheduled_words(key: str) -> Tuple[str, ...]:
    """The wording for the cause `key` of the dialects with no scheduler (local, pods): hpc-launch's own."""
    from .. import dialects

    return tuple(p for d in dialects.all_dialects() if not d.has_scheduler for p in dialects.scheduler_words(d, key))


@dataclass(frozen=True)
class Facts:
    """What the scheduler and the exit-code file say, besides the log."""

    exit_code: Optional[int] = None
    state: Optional[str] = None
    comment: str = ""

    @property
    def cancelled(self) -> bool:
        return self.state == "cancelled"


@dataclass(frozen=True)
class Cause:
    key: str
    title: str  # a few words, for "also seen" and the docs
    patterns: Tuple[str, ...]  # the program's own words for this failure (regexes, re.M)
    cause: str  # one line; {name} from the pattern's named groups, [[...]] only when they matched
    fix: str
    source: str  # which program prints it, and where in its source
    weak: Tuple[str, ...] = ()  # words that also appear for other reasons: they count only after every strong match
    signal: Optional[Callable[[Facts], Optional[str]]] = None  # evidence from the exit code or state, not the log
    signal_weak: bool = False
    weak_cause: str = ""  # the cause line when the evidence is only weak
    # the last resort: only for a failed job that no other cause's own words explain (its words also show
    # in logs of jobs that ended well, and under the failures the other causes name)
    fallback: bool = False
    # Where no scheduler runs the job (local, pods) hpc-launch itself is the one that ended it: its words
    # (unscheduled_words) get these cause and fix lines instead, never "the scheduler ...".
    unscheduled_patterns: Tuple[str, ...] = ()
    unscheduled_cause: str = ""
    unscheduled_fix: str = ""
