"""Submitting one job (and the later links of its chain), and adopting one that has no record."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, cast

from .. import capsule, dialects, secrets
from ..dialects import Dialect
from ..dialects.none import RELEASE_WAIT_S, release_path
from ..errors import HpcLaunchError, SchedulerError, SpecError, TransportError
from ..paths import read_user_file
from ..protocol import CAPSULE_GIT_DIFF, CAPSULE_MANIFEST, CAPSULE_PROBE, LOCAL_HOST
from ..site.profiles import Profile
from ..records import JobRecord, JobStore
from ..transport.base import Transport
from ..transport.send_files import FileWriteError, FilesAhead
from .groups import submit_link
from .where import check_before_submit
from .placing import (
    NotRecorded,
    add_or_explain,
    discard,
    discard_empty_dirs,
    find_submitted,
    opened,
    placed,
    prepared_record,
    record_for,
    run_submit,
    signals_held,
)

if TYPE_CHECKING:
    from ..prepare import Prepared


def submit(
    prepared: "Prepared",
    *,
    transport: Optional[Transport] = None,
    store: Optional[JobStore] = None,
    sleep: Callable[[float], None] = time.sleep,
    on_recorded: Optional[Callable[[JobRecord], None]] = None,
    check: bool = True,
) -> JobRecord:
    """Write the script where it will run, submit it, record it. Returns the JobRecord.

    `on_recorded` runs while interrupts are still held (the CLI prints the job id there).
    `check`: first ask the scheduler to validate the script without queueing it (where.py)."""

    job = prepared.job
    dialect = dialects.get(job.profile.dialect)
    store, transport, own_transport = opened(prepared, store, transport)
    try:
        workdir, script_path = placed(transport, prepared)
        if job.container:  # the image must be there before anything is written (hpc_launch/container.py)
            from ..container import check_image

            job.container_record = check_image(transport, job, workdir)
        written: List[str] = []
        recorded = False
        # The files go with the first command that runs (over SSH on its stdin, in one round trip:
        # transport/send_files.py): the scheduler's check if it has one, else the submit command.
        ahead = FilesAhead(transport)
        try:
            capsule_dir = _send_ahead(ahead, prepared, workdir, script_path, written, check)
            with signals_held() as caught:
                job_id = _submit_command(ahead, transport, prepared, dialect, workdir, caught, sleep)
                record = _first_record(dialect, prepared, job_id, workdir, script_path, capsule_dir)
                try:
                    add_or_explain(store, record, prepared)
                except NotRecorded:  # its message names the job and its `adopt` line: it may run
                    release(transport, dialect, record)
                    raise
                recorded = True
                # the job's files now: never removed by a failure after this; a later link's failure
                # leaves the earlier links, recorded
                written.clear()
                release(transport, dialect, record)
                if on_recorded is not None:
                    on_recorded(record)
                previous = job_id
                for link in range(2, job.chain + 1):
                    previous = submit_link(
                        transport, store, prepared, dialect, workdir, record, link, previous, sleep, on_recorded
                    )
        except NotRecorded:
            raise
        except BaseException as exc:  # Ctrl-C too: nothing half-done is left behind, the secrets least of all
            _undo(transport, prepared, workdir, written, recorded, exc)
            raise
        if caught:
            raise KeyboardInterrupt  # after the record: the job is known, the interrupt still counts
        return record
    finally:
        if own_transport:
            transport.close()


def _send_ahead(
    ahead: FilesAhead, prepared: "Prepared", workdir: str, script_path: str, written: List[str], check: bool
) -> str:
    """The capsule and the script queued to go with the first command; the scheduler's check run
    (with them) where asked; then the secrets file. Returns the capsule's directory."""
    job = prepared.job
    capsule_dir = write_capsule(ahead, prepared, workdir, written)
    queue(ahead, script_path, prepared.script.text.encode(), 0o755, written)
    if check:  # the scheduler's own validation, where it has one: a refusal queues nothing
        check_before_submit(cast(Transport, ahead), prepared, workdir)
    # --pass-env values go in a 0600 file the job reads and deletes (hpc_launch/secrets.py);
    # the submit command runs without them, so no scheduler keeps a copy
    if job.pass_env:  # after the check: a refused job never had its values written
        secrets_path = secrets.path_for(script_path)
        queue(ahead, secrets_path, secrets.encode(secrets.collect(job.pass_env)), 0o600, written, private=True)
    return capsule_dir


def _submit_command(
    ahead: FilesAhead,
    transport: Transport,
    prepared: "Prepared",
    dialect: Dialect,
    workdir: str,
    caught: List[int],
    sleep: Callable[[float], None],
) -> str:
    """The submit command run once (with the files still queued); after a Ctrl-C its failure is
    no refusal: the job it may have made is looked for (`interrupted_submit`)."""
    job = prepared.job
    try:
        return run_submit(
            cast(Transport, ahead),
            prepared.script.submit_argv,
            workdir,
            dialect,
            script_text=prepared.script.text,
            env=submitter_env(dialect, prepared.host, dict(secrets.submit_env(job.pass_env) or {})),
            script_relpath=prepared.script.script_relpath,
            sleep=sleep,
        )
    except (SchedulerError, TransportError):
        if not caught:
            raise
        return interrupted_submit(dialect, transport, workdir, prepared)


def _first_record(
    dialect: Dialect, prepared: "Prepared", job_id: str, workdir: str, script_path: str, capsule_dir: str
) -> JobRecord:
    """The job's record: its capsule, its chain (the first link), the hosts it was kept off."""
    job = prepared.job
    record = prepared_record(dialect, prepared, job_id, workdir, script_path)
    record.extra = {**record.extra, "capsule": capsule_dir}
    if job.chain > 1:
        record.extra = {**record.extra, "chain": job_id, "link": 1, "links": job.chain}
    if job.exclude:  # kept off by the scheduler: the summary says so
        record.extra = {**record.extra, "excluded": list(job.exclude)}
    return record


def _undo(
    transport: Transport, prepared: "Prepared", workdir: str, written: List[str], recorded: bool, exc: BaseException
) -> None:
    """What a failed submission wrote removed; a file that could not be written is one line
    naming the fix (SpecError), anything else is re-raised by the caller."""
    for path in reversed(written):
        discard(transport, path)
    if not recorded:  # links recorded share the capsule; none was: it goes too
        discard_empty_dirs(transport, f"{workdir}/{prepared.script.capsule_relpath}")
    if isinstance(exc, FileWriteError):
        where = "here" if prepared.host == LOCAL_HOST else f"on {prepared.host}"
        raise SpecError(
            f"cannot write {exc.filename} {where}: {exc.strerror}",
            hint="pass --workdir with a directory you can write, with free space",
        ) from None


def interrupted_submit(dialect: Dialect, transport: Transport, workdir: str, prepared: "Prepared") -> str:
    """A terminal's Ctrl-C reaches the submit command too: its failure then is no refusal.
    The job it may have created before it died is recorded; else the interrupt goes on, and
    nothing was submitted (with no scheduler an unreleased job never starts: dialects/none.py)."""
    found = find_submitted(dialect, transport, workdir, prepared.script.script_relpath)
    if found:
        return found
    raise KeyboardInterrupt


def submitter_env(
    dialect: Dialect, host: str, env: Optional[Dict[str, Optional[str]]]
) -> Optional[Dict[str, Optional[str]]]:
    """With no scheduler, the launched job waits for its record (dialects/none.py); on this
    machine it also watches this process, so a submit killed before the record starts nothing."""
    if dialect.has_scheduler or host != LOCAL_HOST:
        return env
    return {**(env or {}), "HPC_LAUNCH_SUBMITTER": str(os.getpid())}


def release(transport: Transport, dialect: Dialect, record: JobRecord) -> None:
    """Let a job with no scheduler start: its record exists now (or the user has its adopt line)."""
    if dialect.has_scheduler:
        return
    path = release_path(record.script_path)
    try:
        if record.host == LOCAL_HOST:  # in this process: a Ctrl-C to the terminal's group cannot cut it
            transport.put_text(path, "", mode=0o600)
            problem = ""
        else:  # one command (no SFTP session): the job's files went with the submit command
            done = transport.run(["touch", "--", path], timeout=60)
            problem = "" if done.rc == 0 else (done.err.strip() or f"touch exit code {done.rc}")
    except (OSError, HpcLaunchError) as exc:
        problem = str(getattr(exc, "strerror", None) or getattr(exc, "message", None) or exc)
    if problem:
        raise SpecError(
            f"job {record.job_id} is recorded but could not be started: cannot write {path} ({problem})",
            hint=f"it gives up by itself within {RELEASE_WAIT_S} s; then submit again",
        )


def write_capsule(ahead: FilesAhead, prepared: "Prepared", workdir: str, written: List[str]) -> str:
    """The job's capsule where it will run (hpc_launch/capsule.py): the code it runs, what was
    submitted, and the probe each start runs, queued on `ahead`. Returns its directory."""
    directory = f"{workdir}/{prepared.script.capsule_relpath}"
    source = None
    for i, (local_path, relpath) in enumerate(prepared.uploads):
        try:  # a regular file only, bounded: a FIFO or device swapped in since the snapshot is refused
            text = read_user_file(Path(local_path), capsule.MAX_BYTES)
        except (OSError, UnicodeDecodeError) as exc:
            if i:
                continue  # a file beside the script that is not text: not code the job imports
            raise SpecError(
                f"--script {local_path}: cannot send it with the job "
                f"({getattr(exc, 'strerror', None) or 'not a UTF-8 text file'})",
                hint="give a Python script, or the path of one already on the cluster",
            ) from None
        queue(ahead, f"{workdir}/{relpath}", text.encode(), capsule.copy_mode(local_path), written)
    if prepared.remote_code:
        source, relpath = prepared.remote_code
        source = ahead.resolve_path(source if source.startswith(("/", "~")) else f"{workdir}/{source}")
        target = f"{workdir}/{relpath}"
        written.append(target)
        copied = ahead.run(["sh", "-c", 'mkdir -p -- "$(dirname -- "$2")" && cp -- "$1" "$2"', "sh", source, target])
        if copied.rc != 0:
            raise SpecError(
                f"--script {source}: cannot copy it into the job's capsule on {prepared.host} "
                f"({copied.err.strip() or copied.rc})",
                hint="pass --workdir with a directory you can write, with free space",
            )
    manifest, diff = capsule.manifest(prepared.job, list(prepared.uploads), prepared.host, source)
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    queue(ahead, f"{directory}/{CAPSULE_MANIFEST}", text.encode(), 0o644, written)
    if diff:
        # the user's alone: it may hold any tracked file's changes, a private one's too
        queue(ahead, f"{directory}/{CAPSULE_GIT_DIFF}", diff.encode(), 0o600, written)
    queue(ahead, f"{directory}/{CAPSULE_PROBE}", capsule.probe_source().encode(), 0o644, written)
    return directory


def queue(ahead: FilesAhead, path: str, data: bytes, mode: int, written: List[str], *, private: bool = False) -> None:
    """A file for the next command to write; listed in `written` now, so a failure at any point removes it."""
    written.append(path)
    ahead.add(path, data, mode, private=private)


def adopt(
    store: JobStore, profile: Profile, *, job_id: str, host: str, name: str, workdir: str, script_path: str
) -> JobRecord:
    """Record a job that exists but has no record (the store failed, or a lost connection).
    Every value is checked first: the record's ids and paths reach commands and file reads later."""
    dialect = dialects.get(profile.dialect)
    _check_adopted(dialect, job_id=job_id, host=host, name=name, workdir=workdir, script_path=script_path)
    record = record_for(
        profile,
        dialect,
        job_id=job_id,
        host=host,
        name=name,
        workdir=workdir.rstrip("/"),
        script_path=script_path,
        submit_argv=[],
    )
    store.add(record)
    return record


# A scheduler's job id: `123`, `123.server`, `123[4].server`, `123_4`; nothing a shell would read.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\[\]-]{0,127}\Z")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}\Z")


def _check_adopted(dialect: Dialect, *, job_id: str, host: str, name: str, workdir: str, script_path: str) -> None:
    if not _JOB_ID.match(job_id or ""):
        raise SpecError(
            f"{job_id!r} is not a job id", hint="give the id the scheduler printed, e.g. 12345 or 12345.server"
        )
    if not dialect.has_scheduler and (not job_id.isdigit() or int(job_id) < 2):
        raise SpecError(
            f"{job_id!r} is not the id of a job on this machine",
            hint="a local job's id is the process id submit printed (a number above 1)",
        )
    if host.startswith("-") or any(c.isspace() for c in host):
        raise SpecError(
            f"--login {host!r} is not an ssh host alias", hint="give the alias from ~/.ssh/config, e.g. abci"
        )
    if not _NAME.match(name or ""):
        raise SpecError(
            f"job name {name!r} is not usable",
            hint="use --name with a letter first, then letters, digits, '_', '.', '-'",
        )
    for what, path in (("--workdir", workdir), ("--script", script_path)):
        if not path.startswith("/") or any(ord(c) < 32 for c in path):
            raise SpecError(
                f"{what} {path!r} is not an absolute path",
                hint=f"give {what} as the absolute path on the host that submitted the job",
            )
