"""A job's life: its submission, its state, its end, its cancel. One policy for all dialects.

Submission is exact: the job store is checked before anything is written; Ctrl-C waits from the
submit command until the record is written; a failure that may have created the job (a lost
connection, a scheduler timeout) is never retried blindly: the scheduler is asked whether this
submission's job exists (its script's name is unique), and a job that exists is recorded.

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
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional

from . import dialects, secrets
from .dialects import StatusInfo
from .errors import HpcLaunchError, SchedulerError, SpecError, StoreError, TransportError
from .logs import read_exit_code
from .records import JobRecord, JobStore
from .states import JobState

if TYPE_CHECKING:
    from .prepare import Prepared

LOCAL = "localhost"
SUBMIT_ATTEMPTS = 3

# Polling schedule of a follower or `status --watch`: quick at first, then gentle on the
# controller (submitit-style backoff; never one query per job per second).
BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
# How long `cancel` waits for the scheduler to confirm the end (PBS kept a qdel'ed job R for 17 s).
CANCEL_CONFIRM_S = 45.0

# Exit codes the job script's traps write (templates/body/prologue.sh.j2).
EXIT_SIGTERM, EXIT_SIGINT, EXIT_SIGKILL = 143, 130, 137
# The trainer stopped itself before the walltime at a complete checkpoint (train/stop.py).
EXIT_RESUMABLE = 75


def cancel_requested(rec: JobRecord) -> bool:
    return bool((rec.extra or {}).get("cancel_requested_at")) or rec.state == JobState.CANCELLED.value


def state_from_exit_code(code: Optional[int], rec: JobRecord) -> JobState:
    """The one exit-code-to-state policy for what the job script reported (or failed to)."""
    asked = cancel_requested(rec)
    if code == 0:
        return JobState.DONE
    if code == EXIT_RESUMABLE:
        return JobState.TIMEOUT
    if code is None or code in (EXIT_SIGTERM, EXIT_SIGINT, EXIT_SIGKILL):
        return JobState.CANCELLED if asked else JobState.FAILED
    return JobState.FAILED


def exit_hint(state: JobState, code: Optional[int], rec: JobRecord) -> str:
    """A one-line reason for an end that is not self-explaining."""
    if state == JobState.FAILED and code == EXIT_SIGKILL and not cancel_requested(rec):
        return "killed by SIGKILL that nobody requested: usually the out-of-memory killer (lower --micro-batch, or use ZeRO offload)"
    if state == JobState.FAILED and code == EXIT_SIGTERM and not cancel_requested(rec):
        return "terminated by SIGTERM that hpc-launch did not send (walltime, preemption or an admin)"
    if state == JobState.FAILED and code is None:
        return "ended without writing its exit code (node lost or killed with SIGKILL)"
    if code == EXIT_RESUMABLE:
        return "stopped before its walltime at a complete checkpoint: resumable (the next --chain link, or submit again)"
    return ""


@dataclass(frozen=True)
class Outcome:
    state: JobState
    exit_code: Optional[int] = None
    raw: str = ""  # the scheduler's word, or where the answer came from
    comment: str = ""
    never_runs: bool = False


def _runner(transport, rec: JobRecord) -> Callable[[List[str]], Any]:
    commands = (rec.extra or {}).get("commands", {})
    return lambda argv: transport.run(dialects.with_site_commands(argv, commands), timeout=60)


def query(transport, records: List[JobRecord]) -> Dict[str, Outcome]:
    """job_id -> Outcome for records all on one cluster/host."""
    if not records:
        return {}
    dialect = dialects.get(records[0].dialect)
    run = _runner(transport, records[0])
    known = dialect.query_jobs(run, {r.job_id: r.script_name for r in records})
    return {rec.job_id: _decide(dialect, run, transport, rec, known.get(rec.job_id)) for rec in records}


def _decide(dialect, run, transport, rec: JobRecord, info: Optional[StatusInfo]) -> Outcome:
    if info is not None and info.active:
        if info.state == JobState.UNKNOWN:
            # a word we do not know never ends (or restarts) a job: keep what we had
            return Outcome(JobState(rec.state), None, info.raw, info.comment or rec.comment, info.never_runs)
        return Outcome(info.state, None, info.raw, info.comment, info.never_runs)
    code = read_exit_code(transport, rec.exit_path, rec.script_name)
    if info is not None and not info.ended:
        # the scheduler says how it ended (state and maybe its own exit status)
        state = info.state
        if code == EXIT_RESUMABLE:  # "failed, exit 75" to the scheduler: stopped for time, resumable
            return Outcome(JobState.TIMEOUT, code, info.raw, exit_hint(JobState.TIMEOUT, code, rec))
        if state == JobState.FAILED and cancel_requested(rec) and code in (None, EXIT_SIGTERM, EXIT_SIGKILL):
            state = JobState.CANCELLED
        return Outcome(state, code if code is not None else info.exit_code, info.raw, info.comment)
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


def _log_tail(transport, rec: JobRecord, size: int = 16384) -> str:
    try:
        end = transport.size(rec.log_path)
        if not end:
            return ""
        return transport.read_from(rec.log_path, max(0, end - size), size).decode("utf-8", "replace")
    except (OSError, HpcLaunchError):
        return ""


def _store_outcome(store: JobStore, rec: JobRecord, got: Outcome) -> None:
    fields: dict = {"state": got.state.value}
    if got.exit_code is not None:
        fields["exit_code"] = got.exit_code
    if got.comment != rec.comment:
        fields["comment"] = got.comment
    if got.state.terminal and rec.end_time is None:
        fields["end_time"] = time.time()
    store.update(rec.cluster, rec.job_id, **fields)


def refresh_is_cheap(rec: JobRecord) -> bool:
    """A job on this machine with no scheduler: one local `ps` tells its state."""
    return rec.host == "localhost" and not dialects.get(rec.dialect).has_scheduler and not JobState(rec.state).terminal


def refresh(store: JobStore, records: Iterable[JobRecord], transport_for, keep: Optional[List[JobRecord]] = None) -> List[JobRecord]:
    """Update the store for every active record: one scheduler query per (cluster, host).
    Returns `keep` (default: `records`) as stored afterwards."""
    records = list(records)
    groups: Dict[tuple, List[JobRecord]] = {}
    for rec in records:
        if not JobState(rec.state).terminal:
            groups.setdefault((rec.cluster, rec.host), []).append(rec)
    for (_cluster, host), recs in groups.items():
        transport = transport_for(host)
        answers = query(transport, recs)
        for rec in recs:
            _store_outcome(store, rec, answers[rec.job_id])
    return [store.get(r.job_id, r.cluster) for r in (records if keep is None else keep)]


class NeverRuns(HpcLaunchError):
    """The scheduler says the job can never start: following it would wait forever."""

    exit_code = 1
    final = True  # a follower stops at once (not a transient query failure)


def state_poller(transport, record: JobRecord, store: Optional[JobStore] = None,
                 on_comment: Optional[Callable[[str], None]] = None):
    """A `state()` callable for logs.follow that keeps the record up to date and reports the
    scheduler's comment when it changes."""
    seen = {"comment": record.comment}

    def state() -> JobState:
        current = store.get(record.job_id, record.cluster) if store else record
        got = query(transport, [current])[record.job_id]
        if store is not None:
            _store_outcome(store, current, got)
        if got.comment and got.comment != seen["comment"] and on_comment is not None:
            on_comment(got.comment)
        seen["comment"] = got.comment
        if got.never_runs:
            raise NeverRuns(f"job {record.job_id} will never run: {got.comment}",
                            hint=f"cancel it with `hpc-launch cancel {record.job_id}` and resubmit with fewer nodes or another queue")
        return got.state

    return state


# ---------------------------------------------------------------------------------------------
# cancel


@dataclass(frozen=True)
class CancelResult:
    state: JobState
    exit_code: Optional[int]
    message: str  # one line for the user


def cancel(store: JobStore, record: JobRecord, transport, *, confirm_s: float = CANCEL_CONFIRM_S,
           sleep: Callable[[float], None] = time.sleep) -> CancelResult:
    """Ask the scheduler to end the job, then record the end the scheduler reports.

    A job that had already ended is reported as it ended, never relabelled as cancelled.
    """
    dialect = dialects.get(record.dialect)
    run = _runner(transport, record)
    before = query(transport, [record])[record.job_id]
    if before.state.terminal:
        _store_outcome(store, record, before)
        return CancelResult(before.state, before.exit_code, _ended_line(record.job_id, before, "had already ended"))
    extra = dict(record.extra or {})
    extra["cancel_requested_at"] = time.time()
    store.update(record.cluster, record.job_id, extra=extra)  # recorded before the request goes out
    result = run(dialect.cancel_argv(record.job_id))
    outcome = dialect.parse_cancel(result.rc, result.out, result.err)
    if not outcome.sent and not outcome.already_ended:
        extra.pop("cancel_requested_at", None)
        store.update(record.cluster, record.job_id, extra=extra)
        from .errors import SchedulerError

        raise SchedulerError(f"could not cancel {record.job_id}: {outcome.message}")
    # a job cancelled before it started never read (and deleted) its --pass-env file
    _discard(transport, secrets.path_for(record.script_path))
    deadline = time.monotonic() + confirm_s
    delay = 0.5
    while True:
        current = store.get(record.job_id, record.cluster)
        got = query(transport, [current])[record.job_id]
        _store_outcome(store, current, got)
        if got.state.terminal:
            if outcome.already_ended and got.state != JobState.CANCELLED:
                return CancelResult(got.state, got.exit_code, _ended_line(record.job_id, got, "had already ended"))
            return CancelResult(got.state, got.exit_code, _ended_line(record.job_id, got, "ended"))
        if time.monotonic() >= deadline:
            return CancelResult(got.state, None, f"cancel of {record.job_id} requested; the scheduler still reports it "
                                                 f"{got.state.value} ({got.raw}): `hpc-launch status {record.job_id}` shows when it ends")
        sleep(delay)
        delay = min(delay * 2, 4.0)


def _ended_line(job_id: str, got: Outcome, verb: str) -> str:
    code = f" with exit code {got.exit_code}" if got.exit_code is not None else ""
    why = f" ({got.comment})" if got.comment else ""
    return f"job {job_id} {verb}: {got.state.value}{code}{why}"


# ---------------------------------------------------------------------------------------------
# submit


class NotRecorded(HpcLaunchError):
    """The job exists but the store could not record it: the message says how to adopt it."""

    exit_code = 3


@contextmanager
def signals_held() -> Iterator[List[int]]:
    """SIGINT/SIGTERM/SIGHUP wait until the block ends: between the scheduler's answer and the
    record, an interrupt would leave a job nobody knows of. Yields the signals that came."""
    caught: List[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in held}
    try:
        yield caught
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _find_submitted(dialect, transport, cwd: str, script_relpath: str) -> Optional[str]:
    """The id of the job this submission created, if the scheduler shows one; None if it cannot tell."""
    try:
        return dialect.find_submitted(lambda argv: transport.run(argv, cwd=cwd, timeout=60), script_relpath)
    except HpcLaunchError:
        return None


def run_submit(transport, argv: List[str], cwd: str, dialect, *, env=None, script_relpath: str = "",
               sleep: Callable[[float], None] = time.sleep) -> str:
    """Run the submit command and return the job id. A clear refusal is retried only when it says
    "try later"; anything that may have created the job first asks the scheduler for it."""
    delay = 1.0
    last_err = ""
    rc = 0
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            result = transport.run(argv, cwd=cwd, env=env, timeout=120)
        except TransportError as exc:
            if not getattr(exc, "maybe_ran", False):
                raise
            found = _find_submitted(dialect, transport, cwd, script_relpath) if script_relpath else None
            if found:
                return found
            raise TransportError(
                f"lost contact while submitting on {transport.host}: the job may or may not exist",
                hint=f"look for a job running {script_relpath} in the scheduler's queue; `hpc-launch adopt` records it") from None
        if result.rc == 0:
            try:
                return dialect.parse_submit(result.out)
            except SchedulerError:
                found = _find_submitted(dialect, transport, cwd, script_relpath) if script_relpath else None
                if found:  # a site wrapper printed something unexpected, but the job exists
                    return found
                raise
        rc = result.rc
        last_err = (result.err or result.out).strip()
        if dialect.is_transient(last_err):
            # "Socket timed out" and the like: the scheduler may have created the job anyway
            found = _find_submitted(dialect, transport, cwd, script_relpath) if script_relpath else None
            if found:
                return found
            if attempt < SUBMIT_ATTEMPTS:
                sleep(delay)
                delay *= 2
                continue
        break
    first = last_err.splitlines()[0] if last_err else f"exit code {rc}"
    raise SchedulerError(f"{argv[0]} refused the job: {first}")


def record_for(profile, dialect, *, job_id: str, host: str, name: str, workdir: str, script_path: str,
               submit_argv: List[str]) -> JobRecord:
    """The record of a submitted (or adopted) job: every path on `host`, absolute."""
    from .render import fill

    log_path = f"{workdir}/{fill(profile.log.name, {'name': name, 'job_id': job_id, 'job_num': dialect.job_num(job_id)})}"
    return JobRecord(
        job_id=job_id, cluster=profile.name, dialect=profile.dialect, host=host,
        name=name, workdir=workdir, script_path=script_path,
        log_path=log_path + (".live" if profile.log.live == "tee" else ""),
        exit_path=log_path + ".exitcode", submit_time=time.time(),
        # with no scheduler the job starts at once
        state=(JobState.QUEUED if dialect.has_scheduler else JobState.RUNNING).value,
        submit_argv=list(submit_argv),
        extra={"commands": dict(profile.commands)} if profile.commands else {},
    )


def _check_inputs(transport, prepared: "Prepared", workdir: str) -> None:
    """What the job needs where it will run, checked before anything is written there."""
    job = prepared.job
    where = "here" if prepared.host == LOCAL else f"on {prepared.host}"
    if job.venv and transport.size(f"{transport.resolve_path(job.venv)}/bin/activate") is None:
        raise SpecError(f"--venv {job.venv}: there is no {job.venv}/bin/activate {where}",
                        hint=f"create it {where} (python3 -m venv {job.venv} && {job.venv}/bin/pip install 'hpc-launch[train]') or pass another --venv")
    if job.script and not prepared.uploads:
        path = job.script if job.script.startswith(("/", "~")) else f"{workdir}/{job.script}"
        if transport.size(transport.resolve_path(path)) is None:
            raise SpecError(f"--script {job.script}: no such file {where}", hint="give the path of your training script as the job will see it")


def _opened(prepared, store: Optional[JobStore], transport):
    """The job store checked writable (a store that cannot take the record refuses before
    anything exists) and a transport to where the job goes; own: whether we opened it."""
    from .transport import open_transport

    store = store or JobStore()
    store.check_writable()
    own = transport is None
    return store, transport or open_transport(None if prepared.host == LOCAL else prepared.host), own


def _placed(transport, prepared) -> "tuple[str, str]":
    """The work dir as that host's absolute path (the script names it as rendered: `~/x` is
    "$HOME"/x in it) and the script's path there, once the job's inputs are checked there."""
    workdir = transport.resolve_path(prepared.job.workdir)
    _check_inputs(transport, prepared, workdir)
    return workdir, f"{workdir}/{prepared.script.script_relpath}"


def submit(prepared: "Prepared", *, transport=None, store: Optional[JobStore] = None,
           sleep: Callable[[float], None] = time.sleep,
           on_recorded: Optional[Callable[[JobRecord], None]] = None) -> JobRecord:
    """Write the script where it will run, submit it, record it. Returns the JobRecord.

    `on_recorded` runs while interrupts are still held (the CLI prints the job id there)."""

    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    store, transport, own_transport = _opened(prepared, store, transport)
    try:
        workdir, script_path = _placed(transport, prepared)
        written: List[str] = []
        # --pass-env values go in a 0600 file the job reads and deletes (hpc_launch/secrets.py);
        # the submit command runs without them, so no scheduler keeps a copy
        secrets_path = secrets.path_for(script_path) if job.pass_env else None
        try:
            for local_path, relpath in prepared.uploads:
                try:
                    with open(local_path, encoding="utf-8") as fh:
                        text = fh.read()
                except (OSError, UnicodeDecodeError) as exc:
                    raise SpecError(f"--script {local_path}: cannot send it with the job ({getattr(exc, 'strerror', None) or 'not a UTF-8 text file'})",
                                    hint="give a Python script, or the path of one already on the cluster") from None
                _write(transport, f"{workdir}/{relpath}", text, 0o644, written, prepared.host)
            _write(transport, script_path, prepared.script.text, 0o755, written, prepared.host)
            if secrets_path:
                written.append(secrets_path)  # first: a write that fails halfway is removed too
                transport.put_private(secrets_path, secrets.encode(secrets.collect(job.pass_env)))
            with signals_held() as caught:
                job_id = run_submit(transport, prepared.script.submit_argv, workdir, dialect,
                                    env=secrets.submit_env(job.pass_env), script_relpath=prepared.script.script_relpath, sleep=sleep)
                record = record_for(profile, dialect, job_id=job_id, host=prepared.host, name=job.name, workdir=workdir,
                                    script_path=script_path, submit_argv=prepared.script.submit_argv)
                if job.chain > 1:
                    record.extra = {**record.extra, "chain": job_id, "link": 1, "links": job.chain}
                _add_or_explain(store, record, prepared)
                if on_recorded is not None:
                    on_recorded(record)
                previous = job_id
                for link in range(2, job.chain + 1):
                    written = []  # earlier links exist: a failure now leaves them, recorded
                    previous = _submit_link(transport, store, prepared, dialect, workdir, record, link, previous, sleep)
        except NotRecorded:
            raise
        except BaseException:  # Ctrl-C too: nothing half-done is left behind, the secrets least of all
            for path in reversed(written):
                _discard(transport, path)
            raise
        if caught:
            raise KeyboardInterrupt  # after the record: the job is known, the interrupt still counts
        return record
    finally:
        if own_transport:
            transport.close()


def _submit_link(transport, store: JobStore, prepared: "Prepared", dialect, workdir: str, first: JobRecord,
                 link: int, previous: str, sleep) -> str:
    """Link `link` of a chain: the same script under its own name, held until `previous` ends.
    It resumes from the newest complete checkpoint (or exits at once if training is done)."""
    script = prepared.script
    name = script.script_name.replace(".sh", f"-link{link}.sh")
    relpath = script.script_relpath.replace(script.script_name, name)
    script_path = f"{workdir}/{relpath}"
    _write(transport, script_path, script.text.replace(script.script_name, name), 0o755, [], prepared.host)
    pass_env = prepared.job.pass_env
    if pass_env:  # each link reads and deletes its own secrets file
        transport.put_private(secrets.path_for(script_path), secrets.encode(secrets.collect(pass_env)))
    argv = [a.replace(script.script_name, name) for a in script.submit_argv]
    argv = argv[:-1] + dialect.depend_flags(previous) + argv[-1:]
    job_id = run_submit(transport, argv, workdir, dialect, env=secrets.submit_env(pass_env), script_relpath=relpath, sleep=sleep)
    record = record_for(prepared.job.profile, dialect, job_id=job_id, host=first.host, name=first.name, workdir=workdir,
                        script_path=script_path, submit_argv=argv)
    record.extra = {**record.extra, "chain": first.job_id, "link": link, "links": first.extra["links"]}
    _add_or_explain(store, record, prepared)
    return job_id


def chain_links(store: JobStore, rec: JobRecord) -> List[JobRecord]:
    """Every link of the chain `rec` belongs to, in order (just `rec` when it is not chained)."""
    chain = (rec.extra or {}).get("chain")
    if not chain:
        return [rec]
    links = [r for r in store.list(cluster=rec.cluster, limit=10000) if (r.extra or {}).get("chain") == chain]
    return sorted(links, key=lambda r: r.extra.get("link", 0))


def _write(transport, path: str, text: str, mode: int, written: List[str], host: str) -> None:
    try:
        transport.put_text(path, text, mode=mode)
    except OSError as exc:
        where = "here" if host == LOCAL else f"on {host}"
        raise SpecError(f"cannot write {path} {where}: {exc.strerror or exc}",
                        hint="pass --workdir with a directory you can write, with free space") from None
    written.append(path)


def _add_or_explain(store: JobStore, record: JobRecord, prepared: "Prepared") -> None:
    try:
        store.add(record)
    except StoreError as exc:
        import shlex

        adopt = ["hpc-launch", "adopt", record.job_id, "--cluster", record.cluster, "--workdir", record.workdir,
                 "--name", record.name, "--script", record.script_path]
        if record.host != LOCAL:
            adopt += ["--login", record.host]
        raise NotRecorded(f"job {record.job_id} was submitted but could not be recorded ({exc.message})",
                          hint=f"once the store works again: {shlex.join(adopt)}") from None


def _discard(transport, path: Optional[str]) -> None:
    """Remove a file after a failed submit; say so if it stays (the original error is the news)."""
    if not path:
        return
    try:
        transport.remove(path)
    except Exception as exc:  # a lost connection: the user must know a file was left
        sys.stderr.write(f"hpc-launch: warning: could not remove {path} on {transport.host} ({exc}): remove it yourself\n")


def adopt(store: JobStore, profile, *, job_id: str, host: str, name: str, workdir: str, script_path: str) -> JobRecord:
    """Record a job that exists but has no record (the store failed, or a lost connection)."""
    dialect = dialects.get(profile.dialect)
    record = record_for(profile, dialect, job_id=job_id, host=host, name=name, workdir=workdir.rstrip("/"),
                        script_path=script_path, submit_argv=[])
    store.add(record)
    return record


# ---------------------------------------------------------------------------------------------
# job arrays and sweeps: tracked, followed and cancelled as a group


def submit_array(prepared: "Prepared", extras: List[dict], *, transport=None, store: Optional[JobStore] = None,
                 sleep: Callable[[float], None] = time.sleep,
                 on_recorded: Optional[Callable[[JobRecord], None]] = None) -> List[JobRecord]:
    """One array job (rendered with `render(array=...)`): one submit command, one record per task,
    each with `extras[i]` and the array's id in its extra."""

    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    if job.pass_env:
        raise SpecError("--pass-env cannot reach an array's tasks (each would read the one secrets file)",
                        hint="export the value in the job's environment another way, or submit the points one by one")
    store, transport, own_transport = _opened(prepared, store, transport)
    try:
        workdir, script_path = _placed(transport, prepared)
        written: List[str] = []
        try:
            _write(transport, script_path, prepared.script.text, 0o755, written, prepared.host)
            with signals_held() as caught:
                parent = run_submit(transport, prepared.script.submit_argv, workdir, dialect,
                                    script_relpath=prepared.script.script_relpath, sleep=sleep)
                try:
                    tasks = dialect.array_task_ids(parent, len(extras))
                except SchedulerError as exc:  # a qsub that took the job but made no array of it
                    written.clear()  # the job exists: its script stays, and so does its record
                    record = record_for(profile, dialect, job_id=parent, host=prepared.host, name=job.name, workdir=workdir,
                                        script_path=script_path, submit_argv=prepared.script.submit_argv)
                    record.extra = {**record.extra, "sweep": extras[0].get("sweep"), "array_refused": exc.message}
                    _add_or_explain(store, record, prepared)
                    raise SchedulerError(f"job {parent} was submitted but is not a job array ({exc.message})",
                                         hint=f"`hpc-launch cancel {parent}` (it is recorded), then run the sweep with --separate") from None
                records = []
                for i, task in enumerate(tasks):
                    record = record_for(profile, dialect, job_id=task, host=prepared.host, name=job.name, workdir=workdir,
                                        script_path=script_path, submit_argv=prepared.script.submit_argv)
                    record.extra = {**record.extra, **extras[i], "array": parent, "task": i}
                    _add_or_explain(store, record, prepared)
                    records.append(record)
                    if on_recorded is not None:
                        on_recorded(record)
        except NotRecorded:
            raise
        except BaseException:
            for path in reversed(written):
                _discard(transport, path)
            raise
        if caught:
            raise KeyboardInterrupt
        return records
    finally:
        if own_transport:
            transport.close()


def group_members(store: JobStore, ident: str, cluster: Optional[str] = None) -> List[JobRecord]:
    """The jobs of the sweep or job array `ident` names (a sweep id, an array's id as submit
    printed it, or that id's number), in point order; [] when it names none."""
    ident = ident.strip()
    members = []
    for r in store.list(cluster=cluster, limit=100000):
        extra = r.extra or {}
        array = str(extra.get("array") or "")
        if ident and (extra.get("sweep") == ident or array == ident or (array and array.split(".", 1)[0] in (ident, f"{ident}[]"))):
            members.append(r)
    return sorted(members, key=lambda r: (r.extra.get("point_index", r.extra.get("task", 0)), r.submit_time))


def find_jobs(store: JobStore, ident: str, cluster: Optional[str] = None) -> List[JobRecord]:
    """A job id -> [its record]; a sweep's or an array's id -> its jobs. Raises JobNotFound."""
    from .errors import JobNotFound

    try:
        return [store.get(ident, cluster)]
    except JobNotFound:
        members = group_members(store, ident, cluster)
        if members:
            return members
        raise


def cancel_group(store: JobStore, records: List[JobRecord], transport_for, *, confirm_s: float = CANCEL_CONFIRM_S,
                 sleep: Callable[[float], None] = time.sleep) -> List[str]:
    """Cancel jobs of a sweep or array together: one cancel per array (the scheduler ends its
    tasks), one per other job; then the ends the scheduler reports. Returns a line per job."""
    records = refresh(store, records, transport_for)
    active = [r for r in records if not JobState(r.state).terminal]
    lines = [_ended_line(r.job_id, Outcome(JobState(r.state), r.exit_code, comment=r.comment), "had already ended")
             for r in records if JobState(r.state).terminal]
    targets: Dict[tuple, JobRecord] = {}
    for r in active:
        extra = dict(r.extra or {})
        extra["cancel_requested_at"] = time.time()
        store.update(r.cluster, r.job_id, extra=extra)  # recorded before the request goes out
        targets.setdefault((r.cluster, r.host, extra.get("array") or r.job_id), r)
    for (_cluster, host, target), r in targets.items():
        dialect = dialects.get(r.dialect)
        result = _runner(transport_for(host), r)(dialect.cancel_argv(target))
        outcome = dialect.parse_cancel(result.rc, result.out, result.err)
        if not outcome.sent and not outcome.already_ended:
            lines.append(f"could not cancel {target}: {outcome.message}")
    deadline = time.monotonic() + confirm_s
    delay = 0.5
    pending = active
    while pending:
        current = [store.get(r.job_id, r.cluster) for r in pending]  # with their cancel requests
        pending = [r for r in refresh(store, current, transport_for) if not JobState(r.state).terminal]
        if not pending or time.monotonic() >= deadline:
            break
        sleep(delay)
        delay = min(delay * 2, 4.0)
    for r in active:
        now = store.get(r.job_id, r.cluster)
        if JobState(now.state).terminal:
            lines.append(_ended_line(now.job_id, Outcome(JobState(now.state), now.exit_code, comment=now.comment), "ended"))
        else:
            lines.append(f"cancel of {now.job_id} requested; the scheduler still reports it {now.state}: `hpc-launch status {now.job_id}` shows when it ends")
    return lines
