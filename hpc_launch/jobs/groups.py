"""Jobs that belong together: the links of a chain, the tasks of a job array, a sweep's points.
Which jobs an id names (one job, or a group) is decided here, for every command alike.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable, List, NoReturn, Optional, cast

from msgspec.structs import replace as replace_struct

from .. import dialects, secrets
from ..dialects import Arrays, Dialect
from ..errors import HpcLaunchError, JobNotFound, SchedulerError, SpecError
from ..records import JobRecord, JobStore
from ..states import JobState
from ..transport.base import Transport
from .placing import (
    NotRecorded,
    add_or_explain,
    discard,
    opened,
    placed,
    prepared_record,
    record_for,
    run_submit,
    signals_held,
    write,
)

if TYPE_CHECKING:
    from ..prepare import Prepared


def submit_link(
    transport: Transport,
    store: JobStore,
    prepared: "Prepared",
    dialect: Dialect,
    workdir: str,
    first: JobRecord,
    link: int,
    previous: str,
    sleep: Callable[[float], None],
    on_recorded: Optional[Callable[[JobRecord], None]] = None,
) -> str:
    """Link `link` of a chain: the same script under its own name, held until `previous` ends.
    It resumes from the newest complete checkpoint (or exits at once if training is done).
    `on_recorded` (the CLI naming it) runs once it is recorded."""
    script = prepared.script.link(link)
    script_path = f"{workdir}/{script.script_relpath}"
    write(transport, script_path, script.text, 0o755, [], prepared.host)
    pass_env = prepared.job.pass_env
    if pass_env:  # each link reads and deletes its own secrets file
        transport.put_private(secrets.path_for(script_path), secrets.encode(secrets.collect(pass_env)))
    argv = script.held_submit_argv(previous)
    job_id = run_submit(
        transport,
        argv,
        workdir,
        dialect,
        env=secrets.submit_env(pass_env),
        script_relpath=script.script_relpath,
        script_text=script.text,
        sleep=sleep,
    )
    record = record_for(
        prepared.job.profile,
        dialect,
        job_id=job_id,
        host=first.host,
        name=first.name,
        workdir=workdir,
        script_path=script_path,
        submit_argv=argv,
    )
    record.extra = {
        **record.extra,
        "chain": first.job_id,
        "link": link,
        "links": first.extra["links"],
        "capsule": first.extra.get("capsule"),
    }
    if prepared.job.exclude:
        record.extra["excluded"] = list(prepared.job.exclude)
    add_or_explain(store, record, prepared)
    if on_recorded is not None:
        on_recorded(record)
    return job_id


def chain_links(store: JobStore, rec: JobRecord) -> List[JobRecord]:
    """Every link of the chain `rec` belongs to, in order (just `rec` when it is not chained)."""
    chain = (rec.extra or {}).get("chain")
    if not chain:
        return [rec]
    links = [r for r in store.list(cluster=rec.cluster, limit=10000) if (r.extra or {}).get("chain") == chain]
    return sorted(links, key=lambda r: r.extra.get("link", 0))


def submit_array(
    prepared: "Prepared",
    extras: List[dict],
    *,
    transport: Optional[Transport] = None,
    store: Optional[JobStore] = None,
    sleep: Callable[[float], None] = time.sleep,
    on_recorded: Optional[Callable[[JobRecord], None]] = None,
) -> List[JobRecord]:
    """One array job (rendered with `render(array=...)`): one submit command, one record per task,
    each with `extras[i]` and the array's id in its extra."""

    dialect = _array_dialect(prepared)
    store, transport, own_transport = opened(prepared, store, transport)
    try:
        workdir, script_path = placed(transport, prepared)
        written: List[str] = []
        try:
            write(transport, script_path, prepared.script.text, 0o755, written, prepared.host)
            with signals_held() as caught:
                parent = run_submit(
                    transport,
                    prepared.script.submit_argv,
                    workdir,
                    dialect,
                    script_text=prepared.script.text,
                    script_relpath=prepared.script.script_relpath,
                    sleep=sleep,
                )
                task_record = partial(_task_record, dialect, prepared, workdir, script_path)
                try:
                    tasks = cast(Arrays, dialect).array_task_ids(parent, len(extras))
                except SchedulerError as exc:  # a qsub that took the job but made no array of it
                    written.clear()  # the job exists: its script stays, and so does its record
                    _record_refused_array(store, prepared, task_record(parent), extras, exc)
                records = []
                for i, task in enumerate(tasks):
                    record = task_record(task)
                    record.extra = {**record.extra, **extras[i], "array": parent, "task": i}
                    add_or_explain(store, record, prepared)
                    records.append(record)
                    if on_recorded is not None:
                        on_recorded(record)
        except NotRecorded:
            raise
        except BaseException:
            for path in reversed(written):
                discard(transport, path)
            raise
        if caught:
            raise KeyboardInterrupt
        return records
    finally:
        if own_transport:
            transport.close()


def _array_dialect(prepared: "Prepared") -> Dialect:
    """The job's dialect, which must have arrays; refused before anything is written where the
    job cannot be one array (no arrays, or --pass-env, which each task would read)."""
    job = prepared.job
    dialect = dialects.get(job.profile.dialect)
    if not isinstance(dialect, Arrays):  # sweep.plan asked first, and render refuses too
        raise SpecError(f"{dialect.title} has no job arrays", hint="run the sweep with --separate")
    if job.pass_env:
        raise SpecError(
            "--pass-env cannot reach an array's tasks (each would read the one secrets file)",
            hint="export the value in the job's environment another way, or submit the points one by one",
        )
    return dialect


def _task_record(dialect: Dialect, prepared: "Prepared", workdir: str, script_path: str, job_id: str) -> JobRecord:
    return prepared_record(dialect, prepared, job_id, workdir, script_path)


def _record_refused_array(
    store: JobStore, prepared: "Prepared", record: JobRecord, extras: List[dict], exc: SchedulerError
) -> NoReturn:
    """The scheduler took the job but made no array of it: recorded (it exists), then refused."""
    parent = record.job_id
    record.extra = {**record.extra, "sweep": extras[0].get("sweep"), "array_refused": exc.message}
    add_or_explain(store, record, prepared)
    raise SchedulerError(
        f"job {parent} was submitted but is not a job array ({exc.message})",
        hint=f"`hpc-launch cancel {parent}` (it is recorded), then run the sweep with --separate",
    ) from None


SCRIPT_READ_LIMIT = 1 << 20


def user_array_tasks(transport: Callable[[], Transport], rec: JobRecord) -> List[str]:
    """The task ids of a job the user made an array (`--directive "-J 1-2"`): its tasks, not the
    array, write the logs and exit files. [] for any other job (the script is read, and
    `transport()` asked for, only for an id the scheduler gives arrays)."""

    def script_text() -> str:
        try:
            return transport().read_from(rec.script_path, 0, SCRIPT_READ_LIMIT).decode("utf-8", "replace")
        except (OSError, HpcLaunchError):
            return ""

    return dialects.get(rec.dialect).user_array_tasks(rec.job_id, rec.submit_argv or [], script_text)


def subjob_view(parent: JobRecord, task_id: str) -> JobRecord:
    """A task of a user's array as a record of its own: its log and exit file are the array's
    with the task's number (`NAME.o20` -> `NAME.o20.1`, `.live` and `.exitcode` alike: the job
    script names them from its own number), its state what the array's was until it is asked."""
    dialect = dialects.get(parent.dialect)

    def renamed(path: str) -> str:
        if not path:
            return path
        folder, base = os.path.split(path)
        if parent.job_id in base:
            base = base.replace(parent.job_id, task_id)
        else:  # the last whole `20` in the name: the job's own number, after any digits of its name
            found = list(re.finditer(rf"(?<![0-9]){re.escape(dialect.job_num(parent.job_id))}(?![0-9])", base))
            if found:
                at = found[-1]
                base = base[: at.start()] + dialect.job_num(task_id) + base[at.end() :]
        return os.path.join(folder, base)

    index = re.search(r"\[(\d+)\]", task_id)
    extra = {**(parent.extra or {}), "array": parent.job_id, "task": int(index.group(1)) if index else 0}
    # how the task ended is its own: until asked, it is as far as the array (an ended one's tasks have begun)
    state = JobState.RUNNING.value if JobState(parent.state).terminal else parent.state
    return replace_struct(
        parent,
        job_id=task_id,
        log_path=renamed(parent.log_path),
        exit_path=renamed(parent.exit_path),
        extra=extra,
        state=state,
        exit_code=None,
        comment="",
        end_time=None,
    )


def subjobs_of(transport: Callable[[], Transport], parent: JobRecord) -> List[JobRecord]:
    """The tasks of a user's array as records (not stored: `recorded` stores them)."""
    return [subjob_view(parent, task) for task in user_array_tasks(transport, parent)]


def recorded(store: JobStore, views: List[JobRecord]) -> List[JobRecord]:
    """These jobs as stored; a task of a user's array is added the first time it is needed
    (following it keeps its record up to date)."""
    out = []
    for view in views:
        try:
            out.append(store.get(view.job_id, view.cluster))
        except JobNotFound:
            store.add(view)
            out.append(store.get(view.job_id, view.cluster))
    return out


_SUBJOB = re.compile(r"^(\d+)\[(\d+)\](.*)$")  # `9[1]`, `9[1].server`: a task of the array `9[]`


def subjob_of_recorded_array(store: JobStore, ident: str, cluster: Optional[str] = None) -> Optional[JobRecord]:
    """`9[1]` when only the array `9[]` was recorded (a user's `-J`): that task's record, or None."""
    m = _SUBJOB.match(ident.strip())
    if not m:
        return None
    try:
        parent = store.get(f"{m.group(1)}[]{m.group(3)}", cluster)
    except JobNotFound:
        return None
    suffix = parent.job_id[len(m.group(1)) + 2 :]
    return subjob_view(parent, f"{m.group(1)}[{m.group(2)}]{suffix}")


def group_members(store: JobStore, ident: str, cluster: Optional[str] = None) -> List[JobRecord]:
    """The jobs of the sweep, job array or first-to-start group `ident` names (a sweep id, an
    array's id as submit printed it, or that id's number; a group id), in point order; [] when
    it names none."""
    ident = ident.strip()
    members = []
    for r in store.list(cluster=cluster, limit=100000):
        extra = r.extra or {}
        array = str(extra.get("array") or "")
        if ident and (
            extra.get("sweep") == ident
            or extra.get("first_start") == ident  # where --submit's group (jobs/first_start.py)
            or array == ident
            or (array and array.split(".", 1)[0] in (ident, f"{ident}[]"))
        ):
            members.append(r)
    return sorted(members, key=lambda r: (r.extra.get("point_index", r.extra.get("task", 0)), r.submit_time))


def find_jobs(store: JobStore, ident: str, cluster: Optional[str] = None) -> List[JobRecord]:
    """A job id -> [its record]; a sweep's or an array's id -> its jobs. Raises JobNotFound."""
    try:
        return [store.get(ident, cluster)]
    except JobNotFound:
        members = group_members(store, ident, cluster)
        if members:
            return members
        task = subjob_of_recorded_array(store, ident, cluster)
        if task is not None:
            return [task]
        raise


@dataclass(frozen=True)
class Target:
    """What an id given to a command names: one job, or a sweep's or an array's jobs."""

    records: List[JobRecord]
    group: bool  # the id names a sweep or a job array (even one of a single job)


def lookup(store: JobStore, ident: str, cluster: Optional[str] = None) -> Target:
    """The jobs `ident` names, for `logs`, `status`, `cancel`, `report`. Raises JobNotFound."""
    found = find_jobs(store, ident, cluster)
    # a user's array (`-J`) is its own record, whose tasks may be recorded beside it: one job
    members = [m for m in group_members(store, ident, cluster) if m.extra.get("array") != found[0].job_id]
    group = (
        len(found) > 1 or (found[0].job_id != ident and bool(members)) or (found[0].extra or {}).get("sweep") == ident
    )
    return Target(found, group)
