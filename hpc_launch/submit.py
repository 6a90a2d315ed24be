"""Submission: JobSpec -> JobScript -> (transport) -> JobRecord.

Dry-run and real submission share one path: `prepare()` builds everything a submission needs
and `submit()` runs it. `--dry-run` is `prepare()` printed.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, List, Optional

from . import dialects, profiles
from .errors import SchedulerError, TransportError
from .render import JobScript, render
from .spec import JobSpec, ResolvedJob, resolve

LOCAL = "localhost"
SUBMIT_ATTEMPTS = 3


@dataclass
class Prepared:
    script: JobScript
    host: str  # where the submit command runs: "localhost" or an ssh alias

    @property
    def job(self) -> ResolvedJob:
        return self.script.job

    @property
    def script_path(self) -> str:
        return f"{self.job.workdir.rstrip('/')}/{self.script.script_relpath}"

    def submit_display(self) -> str:
        import shlex

        from .render import path_expr

        cmd = shlex.join(self.script.submit_argv)
        where = "" if self.host == LOCAL else f"[on {self.host} over ssh] "
        return f"{where}cd {path_expr(self.job.workdir)} && {cmd}"


def choose_host(spec: JobSpec, profile: profiles.Profile) -> str:
    """Where to submit: --login wins; else locally when the scheduler is here (on the login
    node), else the profile's login host over SSH (from a laptop)."""
    if spec.login:
        return LOCAL if spec.login in ("local", LOCAL) else spec.login
    dialect = dialects.get(profile.dialect)
    if not dialect.has_scheduler or not profile.login:
        return LOCAL
    program = profile.commands.get(dialect.submit_program, dialect.submit_program)
    return LOCAL if shutil.which(program) else profile.login


def prepare(spec: JobSpec, *, profile_file: Optional[str] = None, cwd: Optional[str] = None, stamp: Optional[str] = None) -> Prepared:
    profile = profiles.load(spec.cluster, profile_file=profile_file)
    host = choose_host(spec, profile)
    if host != LOCAL and not spec.workdir:
        # the local cwd means nothing on the remote login node
        spec.workdir = f"~/hpc-launch/{spec.name}"
    job = resolve(spec, profile, cwd=cwd)
    stamp = stamp or datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    return Prepared(script=render(job, stamp=stamp), host=host)


# ---------------------------------------------------------------------------------------------


def _run_submit(transport, argv: List[str], cwd: str, dialect, *, env=None, sleep: Callable[[float], None] = time.sleep):
    """Run the submit command; retry only when the scheduler clearly refused (nothing created).

    A failure after the command may have reached the scheduler (a lost connection mid-call)
    is never retried: a second job would be worse than an error that says to check `list`.
    """
    delay = 1.0
    last_err = ""
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            result = transport.run(argv, cwd=cwd, env=env, timeout=120)
        except TransportError as exc:
            if getattr(exc, "maybe_ran", False):
                raise TransportError(
                    f"lost contact while submitting on {transport.host}: the job may or may not exist",
                    hint="check `hpc-launch list --refresh` or the scheduler before submitting again",
                ) from None
            raise
        if result.rc == 0:
            return dialect.parse_submit(result.out)
        last_err = (result.err or result.out).strip()
        if attempt < SUBMIT_ATTEMPTS and dialect.is_transient(last_err):
            sleep(delay)
            delay *= 2
            continue
        break
    first = last_err.splitlines()[0] if last_err else f"exit code {result.rc}"
    raise SchedulerError(f"{argv[0]} refused the job: {first}")


def submit(prepared: Prepared, *, transport=None, store=None, sleep: Callable[[float], None] = time.sleep):
    """Write the script where it will run, submit it, record it. Returns the JobRecord."""
    from .records import JobRecord, JobStore
    from .transport import open_transport

    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    own_transport = transport is None
    transport = transport or open_transport(None if prepared.host == LOCAL else prepared.host)
    try:
        workdir = transport.resolve_path(job.workdir)
        if workdir != job.workdir:
            # re-render with the absolute path of that host so the record's paths are exact
            job.workdir = workdir
            job.spec.workdir = workdir
            prepared = Prepared(script=render(job, stamp=prepared.script.stamp), host=prepared.host)
        script_path = prepared.script_path
        transport.put_text(script_path, prepared.script.text, mode=0o755)
        try:
            import os

            passed = {k: os.environ[k] for k in job.pass_env}
            job_id = _run_submit(transport, prepared.script.submit_argv, workdir, dialect, env=passed or None, sleep=sleep)
        except Exception:
            transport.remove(script_path)  # nothing half-done is left behind
            raise
        log_path = f"{workdir}/{log_name(profile, job.name, job_id, dialect)}"
        record = JobRecord(
            job_id=job_id, cluster=profile.name, dialect=profile.dialect, host=prepared.host,
            name=job.name, workdir=workdir, script_path=script_path,
            log_path=log_path + (".live" if profile.log.live == "tee" else ""),
            exit_path=log_path + ".exitcode", submit_time=time.time(), state="queued",
            submit_argv=list(prepared.script.submit_argv),
            extra={"commands": dict(profile.commands)} if profile.commands else {},
        )
        (store or JobStore()).add(record)
        return record
    finally:
        if own_transport:
            transport.close()


def log_name(profile: profiles.Profile, name: str, job_id: str, dialect) -> str:
    from .render import fill

    return fill(profile.log.name, {"name": name, "job_id": job_id, "job_num": dialect.job_num(job_id)})

