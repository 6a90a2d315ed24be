"""Cancelling a job, or a sweep's or an array's jobs together, and reporting how they ended.

A cancel is recorded before the request goes out; a job that had already ended is reported as
it ended, never relabelled as cancelled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional

from .. import dialects, secrets
from ..errors import SchedulerError
from ..protocol import CANCEL_CONFIRM_S, CANCEL_POLL
from ..records import JobRecord, JobStore
from ..states import JobState
from ..transport.base import Transport
from .connect import TransportFor, transport_for
from .groups import lookup
from .placing import discard
from .state import Outcome, query, refresh, runner, store_outcome


@dataclass(frozen=True)
class CancelResult:
    state: JobState
    exit_code: Optional[int]
    message: str  # one line for the user


def cancel(
    store: JobStore,
    record: JobRecord,
    transport: Transport,
    *,
    confirm_s: float = CANCEL_CONFIRM_S,
    sleep: Callable[[float], None] = time.sleep,
) -> CancelResult:
    """Ask the scheduler to end the job, then record the end the scheduler reports.

    A job that had already ended is reported as it ended, never relabelled as cancelled.
    """
    dialect = dialects.get(record.dialect)
    run = runner(transport, record)
    before = query(transport, [record])[record.job_id]
    if before.state.terminal:
        store_outcome(store, record, before, transport)
        return CancelResult(before.state, before.exit_code, _ended_line(record.job_id, before, "had already ended"))
    extra = dict(record.extra or {})
    extra["cancel_requested_at"] = time.time()
    store.update(record.cluster, record.job_id, extra=extra)  # recorded before the request goes out
    result = run(dialect.cancel_argv(record.job_id))
    outcome = dialect.parse_cancel(result.rc, result.out, result.err)
    if not outcome.sent and not outcome.already_ended:
        extra.pop("cancel_requested_at", None)
        store.update(record.cluster, record.job_id, extra=extra)
        raise SchedulerError(f"could not cancel {record.job_id}: {outcome.message}")
    # a job cancelled before it started never read (and deleted) its --pass-env file
    discard(transport, secrets.path_for(record.script_path))
    deadline = time.monotonic() + confirm_s
    delay = CANCEL_POLL.first
    never_started = before.state == JobState.QUEUED
    while True:
        current = store.get(record.job_id, record.cluster)
        got = query(transport, [current])[record.job_id]
        if never_started and got.state == JobState.CANCELLED:
            # A code the scheduler gives it is not the job's own: Grid Engine's qacct says exit 0 for a
            # job it failed to start (Eqw, `failed 26: opening input/output file`).
            got = replace(got, exit_code=None)
        store_outcome(store, current, got, transport)
        if got.state.terminal:
            if outcome.already_ended and got.state != JobState.CANCELLED:
                return CancelResult(got.state, got.exit_code, _ended_line(record.job_id, got, "had already ended"))
            if never_started and got.state == JobState.CANCELLED:
                why = f" ({got.comment})" if got.comment else ""
                line = _noted(f"job {record.job_id} cancelled before it ran{why}", outcome.note)
            else:
                line = _noted(_ended_line(record.job_id, got, "ended"), outcome.note)
            return CancelResult(got.state, got.exit_code, line)
        if time.monotonic() >= deadline:
            return CancelResult(
                got.state,
                None,
                _noted(
                    f"cancel of {record.job_id} requested; the scheduler still reports it "
                    f"{got.state.value} ({got.raw}): `hpc-launch status {record.job_id}` shows when it ends",
                    outcome.note,
                ),
            )
        sleep(delay)
        delay = CANCEL_POLL.after(delay)


def _noted(line: str, note: str) -> str:
    return f"{line}; {note}" if note else line


def _ended_line(job_id: str, got: Outcome, verb: str) -> str:
    code = f" with exit code {got.exit_code}" if got.exit_code is not None else ""
    why = f" ({got.comment})" if got.comment else ""
    return f"job {job_id} {verb}: {got.state.value}{code}{why}"


def cancel_group(
    store: JobStore,
    records: List[JobRecord],
    transport_for: TransportFor = transport_for,
    *,
    confirm_s: float = CANCEL_CONFIRM_S,
    sleep: Callable[[float], None] = time.sleep,
) -> List[str]:
    """Cancel jobs of a sweep or array together: one cancel per array (the scheduler ends its
    tasks), one per other job; then the ends the scheduler reports. Returns a line per job."""
    records = refresh(store, records, transport_for)
    active = [r for r in records if not JobState(r.state).terminal]
    lines = [
        _ended_line(r.job_id, Outcome(JobState(r.state), r.exit_code, comment=r.comment), "had already ended")
        for r in records
        if JobState(r.state).terminal
    ]
    targets: Dict[tuple, JobRecord] = {}
    for r in active:
        extra = dict(r.extra or {})
        extra["cancel_requested_at"] = time.time()
        store.update(r.cluster, r.job_id, extra=extra)  # recorded before the request goes out
        targets.setdefault((r.cluster, r.host, extra.get("array") or r.job_id), r)
    for (_cluster, host, target), r in targets.items():
        dialect = dialects.get(r.dialect)
        result = runner(transport_for(host), r)(dialect.cancel_argv(target))
        outcome = dialect.parse_cancel(result.rc, result.out, result.err)
        if not outcome.sent and not outcome.already_ended:
            lines.append(f"could not cancel {target}: {outcome.message}")
        elif outcome.note:
            lines.append(f"job {target}: {outcome.note}")
    deadline = time.monotonic() + confirm_s
    delay = CANCEL_POLL.first
    pending = active
    while pending:
        current = [store.get(r.job_id, r.cluster) for r in pending]  # with their cancel requests
        pending = [r for r in refresh(store, current, transport_for) if not JobState(r.state).terminal]
        if not pending or time.monotonic() >= deadline:
            break
        sleep(delay)
        delay = CANCEL_POLL.after(delay)
    for r in active:
        now = store.get(r.job_id, r.cluster)
        if JobState(now.state).terminal:
            lines.append(
                _ended_line(now.job_id, Outcome(JobState(now.state), now.exit_code, comment=now.comment), "ended")
            )
        else:
            lines.append(
                f"cancel of {now.job_id} requested; the scheduler still reports it {now.state}: `hpc-launch status "
                f"{now.job_id}` shows when it ends"
            )
    return lines


def cancel_ident(
    store: JobStore, ident: str, cluster: Optional[str] = None, transport_for: TransportFor = transport_for
) -> List[str]:
    """`hpc-launch cancel ID`: a job, or every job of the sweep or array ID names. Lines to print."""
    target = lookup(store, ident, cluster)
    if target.group:
        return cancel_group(store, target.records, transport_for)
    record = target.records[0]
    if JobState(record.state).terminal:  # the same answer whether or not the record was refreshed
        return [
            _ended_line(
                record.job_id,
                Outcome(JobState(record.state), record.exit_code, comment=record.comment),
                "had already ended",
            )
        ]
    return [cancel(store, record, transport_for(record.host)).message]
