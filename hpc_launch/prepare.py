"""Preparing a submission (the one place that decides where a job is submitted from): JobSpec -> JobScript
plus where it goes. `--dry-run` is `prepare()` printed; `jobs.submit()` runs the very same Prepared, so the two
cannot differ.
"""

from __future__ import annotations

import os
import shutil
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

import msgspec
from msgspec.structs import replace

from . import dialects
from .site import profiles
from .errors import HpcLaunchError, SpecError
from .capsule import private_note, snapshot
from .protocol import CAPSULE_CODE, LOCAL_HOST, capsule_relpath, is_local
from .render import JobScript, render
from .resolve import ResolvedJob, resolve
from .spec import JobSpec

if TYPE_CHECKING:
    from .records import BadHost


class Prepared(msgspec.Struct):
    script: JobScript
    host: str  # where the submit command runs: "localhost" or an ssh alias
    # (local file, path relative to the work dir): the snapshot of the user's --script and the
    # code beside it, written into the job's capsule (hpc_launch/capsule.py); the job runs that copy
    uploads: Tuple[Tuple[str, str], ...] = ()
    # (path on the cluster, path relative to the work dir): a --script only the cluster has, copied there
    remote_code: Optional[Tuple[str, str]] = None

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
        where = "" if self.host == LOCAL_HOST else f"[on {self.host} over ssh] "
        sends = ""
        if self.uploads:
            local, rel = self.uploads[0]
            others = f" and {len(self.uploads) - 1} file(s) beside it" if len(self.uploads) > 1 else ""
            sends = (
                f"# capsule: {local}{others} -> {self.job.workdir}/{os.path.dirname(rel)}/ (the job runs this copy)\n"
            )
        elif self.remote_code:
            sends = (
                f"# capsule: {self.remote_code[0]} -> {self.job.workdir}/{self.remote_code[1]} "
                "(copied there; the job runs the copy)\n"
            )
        chain = "".join(
            f"\n# then link {link}: {shlex.join(self.script.link(link).held_submit_argv(f'<job of link {link - 1}>'))}"
            for link in range(2, self.job.chain + 1)
        )
        return f"{sends}# submit: {where}cd {path_expr(self.job.workdir)} && {cmd}{chain}"


def choose_host(spec: JobSpec, profile: profiles.Profile) -> str:
    """Where to submit: --login wins; else locally when the scheduler is here (on the login
    node), else the profile's login host over SSH (from a laptop)."""
    if spec.login:
        return LOCAL_HOST if is_local(spec.login) else spec.login
    dialect = dialects.get(profile.dialect)
    if not dialect.has_scheduler or not profile.login:
        return LOCAL_HOST
    program = profile.commands.get(dialect.submit_program, dialect.submit_program)
    return LOCAL_HOST if shutil.which(program) else profile.login


def job_workdir(spec: JobSpec, host: str, cwd: Optional[str]) -> str:
    """The work dir as the script will name it, the same in a dry-run and a submission: absolute
    here; over SSH `~/...` (the script says "$HOME"/...), relative paths taken from the remote home."""
    workdir = spec.workdir
    if host == LOCAL_HOST:
        return os.path.abspath(os.path.join(cwd or os.getcwd(), os.path.expanduser(workdir or ".")))
    if not workdir:
        return f"~/hpc-launch/{spec.name}"  # the local cwd means nothing on the remote login node
    if workdir == "~" or workdir.startswith(("/", "~/")):
        return workdir.rstrip("/") or "/"
    return "~/" + workdir


def remembered_bad_hosts(
    cluster: str, *, here: bool = False, note: Callable[[str], Any] = lambda line: None
) -> List["BadHost"]:
    """Hosts an earlier job on `cluster` found bad, not yet expired; none when no store exists yet
    (a dry-run creates nothing). A row that names no host is skipped and named, never refused as
    an --exclude; `here`: never this machine (no scheduler: the jobs run from it)."""
    from .paths import no_bad_hosts_marker, store_path

    store = store_path()
    if not store.exists() or no_bad_hosts_marker(store).exists():
        return []  # without importing the store (sqlite3): what a submit mostly meets
    from .records import JobStore

    try:
        jobs = JobStore()
        skipped = jobs.malformed_bad_hosts(cluster)
        if skipped:
            note(
                f"skipped {len(skipped)} bad-host record(s) of {cluster} that name no host: "
                + ", ".join(f"{b.host!r} (job {b.job_id})" for b in skipped)
                + f"; `hpc-launch hosts --forget --cluster {cluster}` clears them"
            )
        return jobs.bad_hosts(cluster, here=here)
    except HpcLaunchError:
        return []  # a store that cannot be read here is reported where it must be written


def prepare(
    spec: JobSpec,
    *,
    profile_file: profiles.ProfileFiles = None,
    cwd: Optional[str] = None,
    stamp: Optional[str] = None,
    note: Callable[[str], Any] = lambda line: None,
) -> Prepared:
    """`note(line)` hears what the user should know (hosts avoided, or that cannot be)."""
    profile = profiles.load(spec.cluster, profile_file=profile_file)
    host = choose_host(spec, profile)
    dialect = dialects.get(profile.dialect)
    remembered = remembered_bad_hosts(profile.name, here=not dialect.has_scheduler, note=note)
    bad = [b for b in remembered if b.host not in (spec.exclude or [])]
    if bad:
        names = ", ".join(f"{b.host} ({b.reason}, job {b.job_id})" for b in bad)
        if dialect.supports(dialects.HostExclusion) or not dialect.has_scheduler:
            spec = replace(spec, exclude=list(spec.exclude or []) + [b.host for b in bad])
            note(
                f"avoiding {len(bad)} host(s) an earlier job found "
                f"bad: {names}; `hpc-launch hosts --forget` clears them"
            )
        else:
            note(
                f"{profile.dialect} cannot exclude hosts, and earlier jobs found {names} bad: --spares K holds K extra "
                f"nodes and trains on those that pass the start-up check"
            )
    stamp = stamp or datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    script, uploads, remote_code, import_from = _capsule_code(spec, host, cwd, capsule_relpath(spec.name, stamp), note)
    # the caller's spec stays as it was
    spec = replace(spec, workdir=job_workdir(spec, host, cwd), script=script)
    job = replace(resolve(spec, profile, cwd=cwd, host=host), import_from=import_from)
    if job.spares:  # those the scheduler could not keep the job off: the spares check takes them last
        job = replace(job, tried_last=[b.host for b in bad if b.host not in job.exclude])
    return Prepared(script=render(job, stamp=stamp), host=host, uploads=uploads, remote_code=remote_code)


def _capsule_code(
    spec: JobSpec, host: str, cwd: Optional[str], capsule: str, note: Callable[[str], Any]
) -> Tuple[Optional[str], Tuple[Tuple[str, str], ...], Optional[Tuple[str, str]], Optional[str]]:
    """Where the job finds the user's --script: a copy in its capsule, so every chain link and
    requeue runs what was submitted. (script as the job names it, files to send, a file to copy
    on the cluster, a directory the job imports the script's neighbours from.)"""
    if not spec.script:
        return None, (), None, None
    code = f"{capsule}/{CAPSULE_CODE}"
    local = os.path.abspath(os.path.join(cwd or os.getcwd(), os.path.expanduser(spec.script)))
    if host == LOCAL_HOST and os.path.isdir(local):
        raise SpecError(
            f"--script {spec.script}: is a directory, not a training script",
            hint="give the script's file, e.g. --script train.py (the modules beside it go along)",
        )
    if host == LOCAL_HOST and os.path.exists(local) and not os.path.isfile(local):
        raise SpecError(  # a FIFO would hold the submit, /dev/zero fill the job's memory
            f"--script {spec.script}: is not a regular file but a device, FIFO or socket",
            hint="give your training script's file, e.g. --script train.py",
        )
    if host == LOCAL_HOST or os.path.isfile(local):
        if not os.path.isfile(local):
            return local, (), None, None  # named as given: the inputs check says it is missing
        files, whole = snapshot(local)
        private = private_note(files)
        if private:
            note(private)
        if not whole:
            note(
                f"the code beside --script {local} is more than a job takes along ({os.path.dirname(local)} is big): "
                "the job runs a copy of the script and imports the modules beside it from where they are"
            )
        return (
            f"{code}/{files[0].rel}",
            tuple((f.local, f"{code}/{f.rel}") for f in files),
            None,
            None if whole else os.path.dirname(local),
        )
    # only the cluster has it: copied there into the capsule; its neighbours are imported where they are
    name = spec.script.rstrip("/").rsplit("/", 1)[-1]
    return f"{code}/{name}", (), (spec.script, f"{code}/{name}"), os.path.dirname(spec.script) or "."
