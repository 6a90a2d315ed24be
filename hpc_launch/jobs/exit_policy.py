"""The one exit-code policy: what a job's exit code (or its absence) means, and the one-line
reason for an end that does not explain itself. A cancel counts only when it was asked for (by
us, recorded before the request went out): a SIGTERM or SIGKILL nobody asked for (walltime,
out-of-memory killer) is a failure, not a cancel."""

from __future__ import annotations

from typing import Optional

from ..protocol import (
    EXIT_HANG,
    EXIT_LOST_START,
    EXIT_PREFLIGHT,
    EXIT_RESUMABLE,
    EXIT_SIGINT,
    EXIT_SIGKILL,
    EXIT_SIGTERM,
    EXIT_WALLTIME,
)
from ..records import JobRecord
from ..states import JobState


def cancel_requested(rec: JobRecord) -> bool:
    return bool((rec.extra or {}).get("cancel_requested_at")) or rec.state == JobState.CANCELLED.value


def state_from_exit_code(code: Optional[int], rec: JobRecord) -> JobState:
    """The one exit-code-to-state policy for what the job script reported (or failed to)."""
    asked = cancel_requested(rec)
    if code == 0:
        return JobState.DONE
    if code in (EXIT_RESUMABLE, EXIT_WALLTIME):
        return JobState.TIMEOUT
    if code == EXIT_LOST_START:  # its start gate stopped it: another cluster trains this (where --submit)
        return JobState.CANCELLED
    if code is None or code in (EXIT_SIGTERM, EXIT_SIGINT, EXIT_SIGKILL):
        return JobState.CANCELLED if asked else JobState.FAILED
    return JobState.FAILED


def exit_hint(state: JobState, code: Optional[int], rec: JobRecord) -> str:
    """A one-line reason for an end that is not self-explaining."""
    if state == JobState.FAILED and code == EXIT_SIGKILL and not cancel_requested(rec):
        return (
            "killed by SIGKILL that nobody requested: usually the "
            "out-of-memory killer (lower --micro-batch, or use ZeRO offload)"
        )
    if state == JobState.FAILED and code == EXIT_SIGTERM and not cancel_requested(rec):
        return "terminated by SIGTERM that hpc-launch did not send (walltime, preemption or an admin)"
    if state == JobState.FAILED and code is None:
        return "ended without writing its exit code (node lost or killed with SIGKILL)"
    if code == EXIT_RESUMABLE:
        return (
            "stopped before its walltime at a complete checkpoint: resumable (the next --chain link, or submit again)"
        )
    if code == EXIT_WALLTIME:
        return (
            "no scheduler here, so hpc-launch ended the job at its walltime (SIGTERM, then SIGKILL to what "
            "still ran after the grace): ask for more with --walltime, or let the trainer checkpoint and resume"
        )
    if code == EXIT_HANG:
        return (
            "a rank hung and the watchdog ended the job: `hpc-launch "
            "doctor` names the rank and host (its stacks are in the log)"
        )
    if code == EXIT_LOST_START:
        return "another cluster of its group started this training first: this copy exited without training"
    if code == EXIT_PREFLIGHT:
        return (
            "the pre-flight gate found the job was not what was asked, so "
            "nothing trained: `hpc-launch doctor` names the host and the fix"
        )
    return ""
