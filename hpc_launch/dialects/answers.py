"""What a dialect reads a scheduler's answers into (a job's status, a start estimate, a test
submission's verdict, a cancel's outcome), the `run(argv)` callable it is handed, and the words
every scheduler shares for "try again" and "that job has left"."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import msgspec

from ..states import JobState

Run = Callable[[List[str]], Any]  # argv -> result with .rc, .out, .err


class StatusInfo(msgspec.Struct, frozen=True):
    state: JobState
    exit_code: Optional[int] = None
    raw: str = ""  # the scheduler's own word, for `status` output
    # The scheduler says the job is over but not how it ended (Torque-style `C` without an
    # exit status): the exit-code file decides.
    ended: bool = False
    comment: str = ""  # the scheduler's reason (PBS comment, Slurm reason), shown to the user
    never_runs: bool = False  # the scheduler says the job can never start (end the follow)
    # when the scheduler expects a queued job to start (epoch s), where its status answer says
    # it (PBS Pro's estimated.start_time); None: not said
    estimated_start: Optional[float] = None

    @property
    def active(self) -> bool:
        return not (self.ended or self.state.terminal)


class StartEstimate(msgspec.Struct, frozen=True):
    """What the scheduler says of a queued job's start (`Dialect.start_estimates`)."""

    at: Optional[float] = None  # epoch seconds; None: the scheduler has no estimate yet
    reason: str = ""  # why it waits, in plain words after the scheduler's own code


class WouldStart(msgspec.Struct, frozen=True):
    """What the scheduler says, without submitting, of when a job would start
    (`Dialect.parse_test_submit`)."""

    at: Optional[float] = None  # epoch seconds; None: no time said
    hosts: str = ""  # the nodes it would run on, as the scheduler writes them (`pod[1-2]`)
    queue: str = ""  # the queue / partition it would run in
    error: str = ""  # the scheduler's refusal, one line: as asked, the job could not be queued


class CancelOutcome(msgspec.Struct, frozen=True):
    sent: bool  # the scheduler took the request (the job ends asynchronously)
    already_ended: bool = False  # the job had finished or left before the request
    message: str = ""  # the scheduler's words, one line
    note: str = ""  # what the cancel did beyond asking, for the user (no scheduler: stopped processes continued)


# Messages that mean "the scheduler did not take the job, try again later" (nothing was created).
TRANSIENT_PATTERNS = [
    r"cannot connect to server",
    r"connection refused",
    r"connection timed out",
    r"socket timed out",
    r"unable to contact slurm controller",
    r"resource temporarily unavailable",
    r"unable to contact qmaster",
    r"commlib error",
    r"try again",
]
# Messages of a status query that only mean "some of these jobs have left the scheduler".
UNKNOWN_JOB_PATTERNS = [r"invalid job id", r"unknown job", r"do(?:es)? not exist", r"job has finished"]
