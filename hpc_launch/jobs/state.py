"""A job's state: who decides it, and keeping the store up to date. One policy for all dialects.

Who decides a job's state, in order:
1. the scheduler, while it knows the job (ONE query per cluster for all its tracked jobs,
   with the dialect's own fallbacks: PBS history off, Torque-style qstat, ...);
2. the exit-code file the job script wrote beside its log, once the scheduler has forgotten
   the job (or says it ended without saying how);
3. the scheduler's accounting (qacct, sacct) when the script left no exit-code file;
4. otherwise the job died without running its exit trap (node lost, SIGKILL): failed, unless
   a cancel was requested.

A cancel counts only when it was asked for (by us, recorded before the request went out) or the
scheduler says so: a SIGTERM or SIGKILL nobody asked for (walltime, out-of-memory killer) is a
failure, not a cancel.

Reading a job does more than read it (`refresh`, `state_poller`: `status`, `list -r`, `logs -f`):
after its new state is stored come the after-steps, named in `AFTER_ENDING` (a job that has just
ended: its bad hosts are recorded for the cluster, and its chain's waiting links are moved off
them) and `AFTER_READING` (every read: the --notify messages its jobs left for a relay are sent).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from msgspec.structs import replace as replace_struct

from .. import dialects
from ..notify import relay as notify_relay
from ..dialects import ChainHandOff, Dialect, PendingExclusion, StartEstimates, StatusInfo
from ..dialects.base import StartEstimate
from ..errors import HpcLaunchError, SchedulerError, TransportError
from ..logs import read_exit_code
from ..protocol import (
    BAD_HOST_TTL_S,
    EXIT_HANG,
    EXIT_LOST_START,
    EXIT_PREFLIGHT,
    EXIT_RESUMABLE,
    EXIT_SIGINT,
    EXIT_SIGKILL,
    EXIT_SIGTERM,
    EXIT_WALLTIME,
    LOCAL_HOST,
    kept_off_in,
    parse_bad_hosts_file,
)
from ..records import JobRecord, JobStore, recordable_bad_hosts
from ..states import JobState
from ..transport.base import Transport
from .connect import TransportFor, transport_for
from .groups import subjobs_of


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


@dataclass(frozen=True)
class Outcome:
    state: JobState
    exit_code: Optional[int] = None
    raw: str = ""  # the scheduler's word, or where the answer came from
    comment: str = ""
    never_runs: bool = False
    # a queued job: when the scheduler expects it to start (epoch s) and why it waits
    estimated_start: Optional[float] = None
    pending_reason: str = ""


def runner(transport: Transport, rec: JobRecord) -> Callable[[List[str]], Any]:
    commands = (rec.extra or {}).get("commands", {})
    return lambda argv: transport.run(dialects.with_site_commands(argv, commands), timeout=60)


def query(transport: Transport, records: List[JobRecord]) -> Dict[str, Outcome]:
    """job_id -> Outcome for records all on one cluster/host."""
    if not records:
        return {}
    dialect = dialects.get(records[0].dialect)
    run = runner(transport, records[0])
    known = dialect.query_jobs(run, {r.job_id: r.script_name for r in records})
    answers = {rec.job_id: _decide(dialect, run, transport, rec, known.get(rec.job_id)) for rec in records}
    # a job the scheduler says cannot start as it is has no start to estimate
    queued = [job for job, got in answers.items() if got.state == JobState.QUEUED and not got.never_runs]
    if queued:  # one more command, only while some wait
        estimates: Dict[str, StartEstimate] = {}
        try:
            if isinstance(dialect, StartEstimates):
                estimates = dialect.start_estimates(run, queued)
        except (SchedulerError, TransportError):
            estimates = {}  # a courtesy: never what stops a refresh
        for job in queued:
            est, info = estimates.get(job), known.get(job)
            at = est.at if est is not None and est.at is not None else (info.estimated_start if info else None)
            reason = (est.reason if est is not None else "") or answers[job].comment
            answers[job] = replace(answers[job], estimated_start=at, pending_reason=reason)
    return answers


def _decide(
    dialect: Dialect, run: Callable[[List[str]], Any], transport: Transport, rec: JobRecord, info: Optional[StatusInfo]
) -> Outcome:
    if info is not None and info.active:
        if info.state == JobState.UNKNOWN:
            # a word we do not know never ends (or restarts) a job: keep what we had
            return Outcome(JobState(rec.state), None, info.raw, info.comment or rec.comment, info.never_runs)
        return Outcome(info.state, None, info.raw, info.comment, info.never_runs)
    if info is None or info.ended:  # forgotten by the scheduler: a user's array ends as its tasks did
        tasks = subjobs_of(lambda: transport, rec)
        if tasks:
            return _array_outcome(
                rec, [(t.job_id, read_exit_code(transport, t.exit_path, t.script_name)) for t in tasks]
            )
    code = read_exit_code(transport, rec.exit_path, rec.script_name)
    if info is not None and not info.ended:
        # the scheduler says how it ended (state and maybe its own exit status)
        state = info.state
        if code == EXIT_RESUMABLE:  # "failed, exit 75" to the scheduler: stopped for time, resumable
            return Outcome(JobState.TIMEOUT, code, info.raw, exit_hint(JobState.TIMEOUT, code, rec))
        if state == JobState.FAILED and cancel_requested(rec) and code in (None, EXIT_SIGTERM, EXIT_SIGKILL):
            state = JobState.CANCELLED
        code = code if code is not None else info.exit_code
        return Outcome(state, code, info.raw, info.comment or exit_hint(state, code, rec))
    if code is None and info is None:
        acct = dialect.accounting(run, rec.job_id)
        if acct is not None and not acct.active:
            state = acct.state
            if state == JobState.FAILED and cancel_requested(rec):
                state = JobState.CANCELLED
            return Outcome(state, acct.exit_code, acct.raw or "accounting", acct.comment)
    raw = info.raw if info is not None else "gone"
    comment = info.comment if info is not None else ""
    if code in (None, EXIT_SIGTERM, EXIT_SIGKILL) and not cancel_requested(rec):
        verdict = dialect.log_verdict(_log_tail(transport, rec))
        if verdict is not None:  # the scheduler killed it for a limit and said so in the log
            return Outcome(verdict.state, code, raw, verdict.comment)
    state = state_from_exit_code(code, rec)
    return Outcome(state, code, raw, comment or exit_hint(state, code, rec))


def _array_outcome(rec: JobRecord, codes: List[Tuple[str, Optional[int]]]) -> Outcome:
    """An array (its own id, with no exit file of its own) from its tasks' exit files: as good as its
    worst task, which the comment names."""
    worst = [JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED, JobState.DONE]
    states = [(task, code, state_from_exit_code(code, rec)) for task, code in codes]
    state = min((s for _, _, s in states), key=worst.index)
    if state == JobState.DONE:
        return Outcome(state, 0, "tasks", f"all {len(codes)} array tasks wrote exit code 0")
    bad = [(task, code) for task, code, s in states if s == state]
    task, code = bad[0]
    how = f"exit code {code}" if code is not None else exit_hint(state, code, rec)
    return Outcome(state, code, "tasks", f"{len(bad)} of {len(codes)} array tasks {state.value}, first {task}: {how}")


def _log_tail(transport: Transport, rec: JobRecord, size: int = 16384) -> str:
    try:
        end = transport.size(rec.log_path)
        if not end:
            return ""
        return transport.read_from(rec.log_path, max(0, end - size), size).decode("utf-8", "replace")
    except (OSError, HpcLaunchError):
        return ""


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


def record_bad_hosts(
    store: JobStore, rec: JobRecord, got: Outcome, transport: Transport, extra: Dict[str, Any]
) -> None:
    """After-step: the hosts a job that just ended found bad, remembered for its cluster (later
    jobs avoid them) and in its record's `extra["bad_hosts"]`."""
    here = not dialects.get(rec.dialect).has_scheduler  # its hosts may be this machine (records.py)
    bad = recordable_bad_hosts(bad_hosts_of(transport, rec, got), here=here)
    if bad:
        extra["bad_hosts"] = store.add_bad_hosts(rec.cluster, bad, rec.job_id, BAD_HOST_TTL_S)


def keep_waiting_links_off(
    store: JobStore, rec: JobRecord, got: Outcome, transport: Transport, extra: Dict[str, Any]
) -> None:
    """After-step: once a link found bad hosts, its chain's links that wait are changed to avoid
    them, where the scheduler can change a waiting job (`avoid_in_later_links`)."""
    if extra.get("bad_hosts"):
        avoid_in_later_links(store, rec, transport)


def relay_notifications(store: JobStore, records: List[JobRecord], transport: Transport) -> None:
    """After-step: this side has a network: send the --notify messages the jobs could not."""
    notify_relay.relay(store, records, transport)


AfterEnding = Callable[[JobStore, JobRecord, "Outcome", Transport, Dict[str, Any]], None]
AfterReading = Callable[[JobStore, List[JobRecord], Transport], None]
# What storing a job's new state also does, in order, when the job has just ended (its record's
# `extra` is written after them: a step may add to it).
AFTER_ENDING: Tuple[Tuple[str, AfterEnding], ...] = (
    ("record the hosts it found bad", record_bad_hosts),
    ("keep the chain's waiting links off them", keep_waiting_links_off),
)
# What reading jobs also does, once their states are stored (`state_poller`: at a change of state
# and every RELAY_EVERY_S).
AFTER_READING: Tuple[Tuple[str, AfterReading], ...] = (("relay notifications", relay_notifications),)


def after_reading(store: JobStore, records: List[JobRecord], transport: Transport) -> None:
    for _, step in AFTER_READING:
        step(store, records, transport)


def bad_hosts_of(transport: Transport, rec: JobRecord, got: Outcome) -> Dict[str, str]:
    """host -> reason: what the job's own checks wrote (its bad-hosts file) and, for a failure,
    the scheduler's word in the log naming a node that failed (the dialect's `node_failure`)."""
    bad: Dict[str, str] = {}
    try:
        data = transport.read_from(rec.bad_hosts_path, 0, 65536)
        bad.update(parse_bad_hosts_file(data.decode("utf-8", "replace")))
    except (OSError, HpcLaunchError):
        pass
    patterns = dialects.scheduler_words(dialects.get(rec.dialect), "node_failure")
    if got.state == JobState.FAILED and patterns:
        tail = _log_tail(transport, rec)
        for pattern in patterns:
            for m in re.finditer(pattern, tail, re.M):
                bad.setdefault(m.group("host"), f"node failure: {m.group(0).strip()[:200]}")
    return bad


def avoid_in_later_links(store: JobStore, rec: JobRecord, transport: Transport) -> List[str]:
    """Keep the chain's links that have not started off every host remembered as bad, where the
    scheduler can change a pending job (Slurm). Returns the ids of the links changed.

    The link itself did so for the next link as it ended (`keep_dependents_off_shell`), often long
    before this runs: its log's kept-off lines are recorded for those links' summaries."""
    chain = (rec.extra or {}).get("chain")
    dialect = dialects.get(rec.dialect)
    hosts = sorted({b.host for b in store.bad_hosts(rec.cluster)})
    if not chain or not hosts or not isinstance(dialect, PendingExclusion):
        return []
    kept_off = kept_off_in(_log_tail(transport, rec)) if dialect.supports(ChainHandOff) else {}
    changed = []
    for later in store.list(cluster=rec.cluster, limit=10000):
        extra = later.extra or {}
        if later.job_id in kept_off and extra.get("chain") == chain:
            extra = {**extra, "excluded": sorted(set(extra.get("excluded", [])) | set(kept_off[later.job_id]))}
            store.update(later.cluster, later.job_id, extra=extra)
            changed.append(later.job_id)
        elif (
            extra.get("chain") == chain
            and extra.get("link", 0) > (rec.extra or {}).get("link", 0)
            and JobState(later.state) == JobState.QUEUED
        ):
            # the list replaces the link's own (Slurm's ExcNodeList): keep what it was submitted with
            keep_off = sorted(set(hosts) | set(extra.get("excluded", [])))
            argv = dialect.exclude_pending_argv(later.job_id, keep_off)
            result = runner(transport, later)(argv or [])
            if result.rc == 0:
                changed.append(later.job_id)
                store.update(later.cluster, later.job_id, extra={**extra, "excluded": keep_off})
    return changed


def refresh_is_cheap(rec: JobRecord) -> bool:
    """A job on this machine with no scheduler: one local `ps` tells its state."""
    return rec.host == LOCAL_HOST and not dialects.get(rec.dialect).has_scheduler and not JobState(rec.state).terminal


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
