"""A job's state kept up to date in the store: `refresh` (one scheduler query per cluster for all
its tracked jobs) and `state_poller` (a follower's `state()`). Who decides a state is
`outcome.py` (with the exit-code policy of `exit_policy.py`); a queued job's start is
`start_estimate.py`. The names of all three are re-exported here.

Reading a job does more than read it (`refresh`, `state_poller`: `status`, `list -r`, `logs -f`):
after its new state is stored come the after-steps (`after_steps.py`), named in `AFTER_ENDING` (a
job that has just ended: its bad hosts are recorded for the cluster, and its chain's waiting
links are moved off them) and `AFTER_READING` (every read: the --notify messages its jobs left
for a relay are sent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional

from msgspec.structs import replace as replace_struct

from .. import dialects
from ..errors import HpcLaunchError, SchedulerError, TransportError
from ..notify import relay as notify_relay
from ..protocol import LOCAL_HOST, POLL, POLL_NO_SCHEDULER, Backoff
from ..records import JobRecord, JobStore
from ..states import JobState
from ..transport.base import Transport
from .after_steps import AFTER_ENDING, AFTER_READING
from .connect import TransportFor, transport_for
from .exit_policy import cancel_requested, exit_hint, state_from_exit_code
from .outcome import Outcome, query, runner
from .start_estimate import START_KEY, span_words, start_of, start_words

__all__ = [  # callers import these from here (jobs/__init__, cancel, the CLI, tests)
    "AFTER_ENDING",
    "AFTER_READING",
    "START_KEY",
    "NeverRuns",
    "Outcome",
    "Unreached",
    "cancel_requested",
    "exit_hint",
    "poll_for",
    "query",
    "refresh",
    "refresh_is_cheap",
    "runner",
    "span_words",
    "start_of",
    "start_words",
    "state_from_exit_code",
    "state_poller",
    "store_outcome",
]


def store_outcome(store: JobStore, rec: JobRecord, got: Outcome, transport: Optional[Transport] = None) -> None:
    """Record what the scheduler said; when the job has just ended, also the hosts it found bad
    (remembered for the cluster, so later jobs avoid them)."""
    fields: dict = {"state": got.state.value}
    extra = {k: v for k, v in (rec.extra or {}).items() if k != START_KEY}
    if got.state == JobState.QUEUED and got.never_runs:
        extra[START_KEY] = {"at": None, "reason": "", "never": True}
    elif got.state == JobState.QUEUED and (got.estimated_start is not None or got.pending_reason):
        extra[START_KEY] = {"at": got.estimated_start, "reason": got.pending_reason}
    if got.state.terminal and not JobState(rec.state).terminal and transport is not None:
        for _, step in AFTER_ENDING:
            step(store, rec, got, transport, extra)
    if extra != (rec.extra or {}):
        fields["extra"] = extra
    if got.exit_code is not None:
        fields["exit_code"] = got.exit_code
    if got.comment != rec.comment:
        fields["comment"] = got.comment
    if got.state.terminal and rec.end_time is None:
        fields["end_time"] = time.time()
    store.update(rec.cluster, rec.job_id, **fields)


def after_reading(store: JobStore, records: List[JobRecord], transport: Transport) -> None:
    """Run the AFTER_READING steps for jobs just read (this module's table: tests replace it)."""
    for _, step in AFTER_READING:
        step(store, records, transport)


def refresh_is_cheap(rec: JobRecord) -> bool:
    """A job on this machine with no scheduler: one local `ps` tells its state."""
    return rec.host == LOCAL_HOST and not dialects.get(rec.dialect).has_scheduler and not JobState(rec.state).terminal


def poll_for(records: Iterable[JobRecord]) -> Backoff:
    """The pace of state queries while waiting for these jobs: a scheduler's is spared (POLL); where
    none of them has a scheduler, a query is a `ps` (POLL_NO_SCHEDULER)."""
    if any(dialects.get(r.dialect).has_scheduler for r in records):
        return POLL
    return POLL_NO_SCHEDULER


@dataclass(frozen=True)
class Unreached:
    """A (cluster, host) whose jobs could not be refreshed: they keep their last known state."""

    cluster: str
    host: str
    job_ids: List[str]
    error: HpcLaunchError

    @property
    def exit_code(self) -> int:
        return self.error.exit_code

    def one_line(self) -> str:
        via = "" if self.host == LOCAL_HOST else f" via {self.host}"
        return (
            f"not refreshed: job(s) {', '.join(self.job_ids)} on {self.cluster}{via} keep their last known state: "
            f"{self.error.one_line()}"
        )


def refresh(
    store: JobStore,
    records: Iterable[JobRecord],
    transport_for: TransportFor = transport_for,
    keep: Optional[List[JobRecord]] = None,
    on_unreached: Optional[Callable[[Unreached], None]] = None,
) -> List[JobRecord]:
    """Update the store for every active record: one scheduler query per (cluster, host), then
    the after-steps (`AFTER_ENDING` for each job that has just ended, `AFTER_READING` for each
    host's jobs): bad hosts recorded, waiting chain links moved off them, notifications relayed.
    Returns `keep` (default: `records`) as stored afterwards.

    A host that cannot be reached (or whose scheduler fails) does not stop the others: its jobs
    keep their last known state and it goes to `on_unreached`; without one, the first such error
    is raised once every other host has been refreshed."""
    records = list(records)
    groups: Dict[tuple, List[JobRecord]] = {}
    for rec in records:
        # an ended job may still owe a --notify message from its outbox (notify/relay.py)
        if not JobState(rec.state).terminal or notify_relay.wanted(rec):
            groups.setdefault((rec.cluster, rec.host), []).append(rec)
    down: Dict[str, TransportError] = {}  # a host that failed is not tried again for its other clusters
    unreached: List[Unreached] = []
    for (cluster, host), recs in groups.items():
        try:
            if host in down:
                raise down[host]
            transport = transport_for(host)
            active = [rec for rec in recs if not JobState(rec.state).terminal]
            answers = query(transport, active)
            for rec in active:
                store_outcome(store, rec, answers[rec.job_id], transport)
            after_reading(store, recs, transport)
        except (TransportError, SchedulerError) as exc:
            if isinstance(exc, TransportError):
                down[host] = exc
            unreached.append(Unreached(cluster, host, [r.job_id for r in recs], exc))
    for gone in unreached:
        if on_unreached is None:
            raise gone.error
        on_unreached(gone)
    return [store.get(r.job_id, r.cluster) for r in (records if keep is None else keep)]


RELAY_EVERY_S = 30.0


class NeverRuns(HpcLaunchError):
    """The scheduler says the job can never start: following it would wait forever."""

    exit_code = 1
    final = True  # a follower stops at once (not a transient query failure)


def state_poller(
    transport: Transport,
    record: JobRecord,
    store: Optional[JobStore] = None,
    on_comment: Optional[Callable[[str], None]] = None,
    on_start: Optional[Callable[[JobRecord], None]] = None,
) -> Callable[[], JobState]:
    """A `state()` callable for logs.follow that keeps the record up to date and reports the
    scheduler's comment when it changes, and (`on_start`, with the record and its new estimate) a queued
    job's start estimate or pending reason when it changes (to the minute: backfill moves it by
    seconds at every pass)."""
    seen: Dict[str, Any] = {"comment": record.comment, "start": None, "relayed": 0.0}

    def state() -> JobState:
        current = store.get(record.job_id, record.cluster) if store else record
        got = query(transport, [current])[record.job_id]
        if store is not None:
            store_outcome(store, current, got, transport)
            # --notify: send what the job left for a relay, at each change and every RELAY_EVERY_S
            if got.state.value != current.state or time.monotonic() - seen["relayed"] > RELAY_EVERY_S:
                seen["relayed"] = time.monotonic()
                after_reading(store, [current], transport)
        if got.comment and got.comment != seen["comment"] and on_comment is not None:
            on_comment(got.comment)
        seen["comment"] = got.comment
        start = (None if got.estimated_start is None else round(got.estimated_start / 60), got.pending_reason)
        if got.state == JobState.QUEUED and start != seen["start"] and on_start is not None and not got.never_runs:
            at_rest = {k: v for k, v in (current.extra or {}).items() if k != START_KEY}
            on_start(
                replace_struct(
                    current,
                    state=got.state.value,
                    extra={**at_rest, START_KEY: {"at": got.estimated_start, "reason": got.pending_reason}},
                )
            )
        seen["start"] = start
        if got.never_runs:
            cancel = f"`hpc-launch cancel {record.job_id}`"
            raise NeverRuns(
                f"job {record.job_id} will never run as it is: {got.comment}",
                # the scheduler's words may name the user's own fix (Grid Engine's Eqw: qmod -cj)
                hint=f"or cancel it with {cancel}"
                if "`" in got.comment
                else f"cancel it with {cancel} and resubmit with fewer nodes or another queue",
            )
        return got.state

    return state
