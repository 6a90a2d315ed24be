"""Job states from the scheduler: ONE query per cluster for all its tracked jobs, then the
exit-code file for jobs the scheduler has forgotten.

A scheduler's answer wins while it knows the job; once the job has left it (finished long
ago, or a scheduler with no history), the exit-code file the script wrote decides: 0 done,
143/130 cancelled, anything else failed; no file at all means the job died without running
its exit trap (killed, node lost): failed, unless we cancelled it ourselves.
"""

from __future__ import annotations

import time
from typing import Dict, Iterable, List, Optional

from . import dialects
from .dialects.gridengine import GridEngine
from .errors import SchedulerError
from .logs import read_exit_code
from .records import JobRecord, JobStore
from .states import JobState

# Polling schedule of a follower or `status --watch`: quick at first, then gentle on the
# controller (submitit-style backoff; never one query per job per second).
BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


def _from_exit_code(code: Optional[int], rec: JobRecord) -> JobState:
    if code is None:
        return JobState.CANCELLED if rec.state == JobState.CANCELLED.value else JobState.FAILED
    if code == 0:
        return JobState.DONE
    if code in (143, 130, 137) or rec.state == JobState.CANCELLED.value:
        return JobState.CANCELLED
    return JobState.FAILED


def query(transport, records: List[JobRecord]) -> Dict[str, tuple]:
    """job_id -> (JobState, exit_code, scheduler word) for records all on one cluster/host."""
    if not records:
        return {}
    dialect = dialects.get(records[0].dialect)
    commands = records[0].extra.get("commands", {}) if records[0].extra else {}
    ids = [r.job_id for r in records]
    argv = dialects.with_site_commands(dialect.status_argv(ids), commands)
    result = transport.run(argv, timeout=60)
    if result.rc != 0 and dialect.status_needs_history_fallback and "option" in (result.err + result.out).lower():
        # Torque-style qstat (Slurm's wrapper) has no -x: ask again without history
        result = transport.run(dialects.with_site_commands(dialect.status_argv(ids, history=False), commands), timeout=60)
    known = dialect.parse_status(result.out, ids)
    # A non-zero exit with unknown-job messages (or none: Torque's qstat says nothing, rc 153)
    # only means some jobs have left the scheduler. Anything else is a real failure.
    err = result.err.strip()
    if result.rc != 0 and not known and err and dialect.name != "none" and not _unknown_job_error(err):
        raise SchedulerError(f"{argv[0]} failed on {transport.host}: {err.splitlines()[0][:200]}")
    out: Dict[str, tuple] = {}
    for rec in records:
        info = known.get(rec.job_id)
        if info is not None and info.active:
            out[rec.job_id] = (info.state, None, info.raw)
            continue
        code = read_exit_code(transport, rec.exit_path)
        if info is not None and info.ended and info.exit_code is None:
            out[rec.job_id] = (_from_exit_code(code, rec), code, info.raw)
            continue
        if info is not None:
            state = info.state
            if rec.state == JobState.CANCELLED.value and state == JobState.FAILED:
                state = JobState.CANCELLED
            out[rec.job_id] = (state, code if code is not None else info.exit_code, info.raw)
            continue
        if isinstance(dialect, GridEngine) and code is None:
            acct = transport.run(dialects.with_site_commands(dialect.accounting_argv(rec.job_id), commands), timeout=60)
            if acct.rc == 0:
                info = dialect.parse_accounting(acct.out)
                state = JobState.CANCELLED if rec.state == JobState.CANCELLED.value else info.state
                out[rec.job_id] = (state, info.exit_code, "qacct")
                continue
        out[rec.job_id] = (_from_exit_code(code, rec), code, "gone")
    return out


def _unknown_job_error(err: str) -> bool:
    low = err.lower()
    return any(s in low for s in ("invalid job id", "unknown job", "do not exist", "does not exist", "job has finished"))


def refresh(store: JobStore, records: Iterable[JobRecord], transport_for) -> List[JobRecord]:
    """Update the store for every active record: one scheduler query per (cluster, host)."""
    groups: Dict[tuple, List[JobRecord]] = {}
    for rec in records:
        if not JobState(rec.state).terminal:
            groups.setdefault((rec.cluster, rec.host), []).append(rec)
    for (cluster, host), recs in groups.items():
        transport = transport_for(host)
        for job_id, (state, code, _raw) in query(transport, recs).items():
            fields = {"state": state.value}
            if code is not None:
                fields["exit_code"] = code
            if state.terminal:
                fields["end_time"] = time.time()
            store.update(cluster, job_id, **fields)
    return [store.get(r.job_id, r.cluster) for r in records]


def state_poller(transport, record: JobRecord, store: Optional[JobStore] = None):
    """A `state()` callable for logs.follow that also keeps the record up to date."""

    def state() -> JobState:
        current = store.get(record.job_id, record.cluster) if store else record
        got = query(transport, [current])[record.job_id]
        if store is not None:
            fields = {"state": got[0].value}
            if got[1] is not None:
                fields["exit_code"] = got[1]
            if got[0].terminal:
                fields["end_time"] = time.time()
            store.update(record.cluster, record.job_id, **fields)
        return got[0]

    return state
