"""Placing a job where it runs: its files written (and removed again after a failure), the
submit command run exactly once, the record made. Shared by single jobs, chain links and arrays.

Submission is exact: the job store is checked before anything is written; Ctrl-C waits from the
submit command until the record is written; a failure that may have created the job (a lost
connection, a scheduler timeout) is never retried blindly: the scheduler is asked whether this
submission's job exists (its script's name is unique), and a job that exists is recorded.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, List, Mapping, Optional, Tuple

from ..dialects import Dialect
from ..errors import HpcLaunchError, SchedulerError, SpecError, StoreError, TransportError
from ..site.profiles import Profile
from ..protocol import LOCAL_HOST, exit_path_for, live_log_for
from ..records import JobRecord, JobStore, adopt_command
from ..states import JobState
from ..transport.base import Transport
from .connect import transport_for

if TYPE_CHECKING:
    from ..prepare import Prepared

SUBMIT_ATTEMPTS = 3


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


def find_submitted(dialect: Dialect, transport: Transport, cwd: str, script_relpath: str) -> Optional[str]:
    """The id of the job this submission created, if the scheduler shows one; None if it cannot tell."""
    try:
        return dialect.find_submitted(lambda argv: transport.run(argv, cwd=cwd, timeout=60), script_relpath)
    except HpcLaunchError:
        return None


def run_submit(
    transport: Transport,
    argv: List[str],
    cwd: str,
    dialect: Dialect,
    *,
    env: Optional[Mapping[str, Optional[str]]] = None,
    script_relpath: str = "",
    script_text: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Run the submit command and return the job id. A clear refusal is retried only when it says
    "try later"; anything that may have created the job first asks the scheduler for it.
    `script_text` goes on the command's stdin where the dialect takes the script that way."""
    stdin = script_text if dialect.script_on_stdin else None
    delay = 1.0
    last_err = ""
    rc = 0
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            result = transport.run(argv, cwd=cwd, env=env, timeout=120, stdin=stdin)
        except TransportError as exc:
            if not getattr(exc, "maybe_ran", False):
                raise
            found = find_submitted(dialect, transport, cwd, script_relpath) if script_relpath else None
            if found:
                return found
            raise TransportError(
                f"lost contact while submitting on {transport.host}: the job may or may not exist",
                hint=f"look for a job running {script_relpath} in the scheduler's queue; `hpc-launch adopt` records it",
            ) from None
        if result.rc == 0:
            try:
                return dialect.parse_submit(result.out)
            except SchedulerError:
                found = find_submitted(dialect, transport, cwd, script_relpath) if script_relpath else None
                if found:  # a site wrapper printed something unexpected, but the job exists
                    return found
                raise
        rc = result.rc
        last_err = (result.err or result.out).strip()
        if dialect.is_transient(last_err):
            # "Socket timed out" and the like: the scheduler may have created the job anyway
            found = find_submitted(dialect, transport, cwd, script_relpath) if script_relpath else None
            if found:
                return found
            if attempt < SUBMIT_ATTEMPTS:
                sleep(delay)
                delay *= 2
                continue
        break
    first = last_err.splitlines()[0] if last_err else f"exit code {rc}"
    raise SchedulerError(f"{argv[0]} refused the job: {first}")


def record_for(
    profile: Profile,
    dialect: Dialect,
    *,
    job_id: str,
    host: str,
    name: str,
    workdir: str,
    script_path: str,
    submit_argv: List[str],
) -> JobRecord:
    """The record of a submitted (or adopted) job: every path on `host`, absolute."""
    from ..render import fill

    log_path = (
        f"{workdir}/{fill(profile.log.name, {'name': name, 'job_id': job_id, 'job_num': dialect.job_num(job_id)})}"
    )
    return JobRecord(
        job_id=job_id,
        cluster=profile.name,
        dialect=profile.dialect,
        host=host,
        name=name,
        workdir=workdir,
        script_path=script_path,
        log_path=live_log_for(log_path) if profile.log.live == "tee" else log_path,
        exit_path=exit_path_for(log_path),
        submit_time=time.time(),
        # with no scheduler the job starts at once
        state=(JobState.QUEUED if dialect.has_scheduler else JobState.RUNNING).value,
        submit_argv=list(submit_argv),
        extra={"commands": dict(profile.commands)} if profile.commands else {},
    )


def prepared_record(dialect: Dialect, prepared: "Prepared", job_id: str, workdir: str, script_path: str) -> JobRecord:
    """The record of a prepared job just submitted as `job_id` (a job, a chain's first link, an array task)."""
    job = prepared.job
    return record_for(
        job.profile,
        dialect,
        job_id=job_id,
        host=prepared.host,
        name=job.name,
        workdir=workdir,
        script_path=script_path,
        submit_argv=prepared.script.submit_argv,
    )


def check_inputs(transport: Transport, prepared: "Prepared", workdir: str) -> None:
    """What the job needs where it will run, checked before anything is written there."""
    job = prepared.job
    where = "here" if prepared.host == LOCAL_HOST else f"on {prepared.host}"
    if job.venv and transport.size(f"{transport.resolve_path(job.venv)}/bin/activate") is None:
        raise SpecError(
            f"--venv {job.venv}: there is no {job.venv}/bin/activate {where}",
            hint=(
                f"create it {where} (python3 -m venv {job.venv} && {job.venv}/bin/pip "
                "install 'hpc-launch[train]') or pass another --venv"
            ),
        )
    script = prepared.remote_code[0] if prepared.remote_code else None if prepared.uploads else job.script
    if script:
        path = transport.resolve_path(script if script.startswith(("/", "~")) else f"{workdir}/{script}")
        if transport.size(path) is None:
            raise SpecError(
                f"--script {script}: no such file {where}",
                hint="give the path of your training script as the job will see it",
            )
        # a directory has a size too; here prepare refused it already, there only `test` can tell
        if prepared.host != LOCAL_HOST and transport.run(["test", "-f", path]).rc != 0:
            raise SpecError(
                f"--script {script}: is a directory (or not a plain file) {where}, not a training script",
                hint="give the script's file, e.g. --script train.py",
            )


def opened(
    prepared: "Prepared", store: Optional[JobStore], transport: Optional[Transport]
) -> Tuple[JobStore, Transport, bool]:
    """The job store checked writable (a store that cannot take the record refuses before
    anything exists) and a transport to where the job goes; own: whether we opened it."""
    store = store or JobStore()
    store.check_writable()
    own = transport is None
    return store, transport or transport_for(prepared.host), own


def placed(transport: Transport, prepared: "Prepared") -> Tuple[str, str]:
    """The work dir as that host's absolute path (the script names it as rendered: `~/x` is
    "$HOME"/x in it) and the script's path there, once the job's inputs are checked there."""
    workdir = transport.resolve_path(prepared.job.workdir)
    check_inputs(transport, prepared, workdir)
    return workdir, f"{workdir}/{prepared.script.script_relpath}"


def write(transport: Transport, path: str, text: str, mode: int, written: List[str], host: str) -> None:
    try:
        transport.put_text(path, text, mode=mode)
    except OSError as exc:
        where = "here" if host == LOCAL_HOST else f"on {host}"
        raise SpecError(
            f"cannot write {path} {where}: {exc.strerror or exc}",
            hint="pass --workdir with a directory you can write, with free space",
        ) from None
    written.append(path)


def add_or_explain(store: JobStore, record: JobRecord, prepared: "Prepared") -> None:
    try:
        store.add(record)
    except StoreError as exc:
        adopt = adopt_command(
            record.cluster, record.job_id, record.workdir, record.name, record.script_path, record.host
        )
        raise NotRecorded(
            f"job {record.job_id} was submitted but could not be recorded ({exc.message})",
            hint=f"once the store works again: {adopt}",
        ) from None


def discard(transport: Transport, path: Optional[str]) -> None:
    """Remove a file after a failed submit; say so if it stays (the original error is the news)."""
    if not path:
        return
    try:
        transport.remove(path)
    except Exception as exc:  # a lost connection: the user must know a file was left
        sys.stderr.write(
            f"hpc-launch: warning: could not remove {path} on {transport.host} ({exc}): remove it yourself\n"
        )


def discard_empty_dirs(transport: Transport, directory: str) -> None:
    """Remove the directories a failed submit created under `directory` (the job's own, so
    unique to it) and their parent when that is empty now; a file in them keeps them."""
    script = 'find "$1" -depth -type d -empty -delete 2>/dev/null; rmdir -- "$(dirname -- "$1")" 2>/dev/null; true'
    try:
        transport.run(["sh", "-c", script, "sh", directory])
    except Exception:  # nothing but empty directories is at stake; the original error is the news
        pass
