"""Who decides a job's state, in order (one policy for all dialects):
1. the scheduler, while it knows the job (ONE query per cluster for all its tracked jobs,
   with the dialect's own fallbacks: PBS history off, Torque-style qstat, ...);
2. the exit-code file the job script wrote beside its log, once the scheduler has forgotten
   the job (or says it ended without saying how);
3. the scheduler's accounting (qacct, sacct) when the script left no exit-code file;
4. otherwise the job died without running its exit trap (node lost, SIGKILL): failed, unless
   a cancel was requested (exit_policy.py).
A queued job's answer also carries when it starts and why it waits, where the scheduler says."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import dialects
from ..dialects import Dialect, StartEstimates, StatusInfo
from ..dialects.base import StartEstimate
from ..errors import HpcLaunchError, SchedulerError, TransportError
from ..logs import read_exit_code
from ..protocol import EXIT_RESUMABLE, EXIT_SIGKILL, EXIT_SIGTERM
from ..records import JobRecord
from ..states import JobState
from ..transport.base import Transport
from .exit_policy import cancel_requested, exit_hint, state_from_exit_code
from .groups import subjobs_of


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
        verdict = dialect.log_verdict(log_tail(transport, rec))
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


def log_tail(transport: Transport, rec: JobRecord, size: int = 16384) -> str:
    try:
        end = transport.size(rec.log_path)
        if not end:
            return ""
        return transport.read_from(rec.log_path, max(0, end - size), size).decode("utf-8", "replace")
    except (OSError, HpcLaunchError):
        return ""
