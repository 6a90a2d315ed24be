"""Jobs that belong together: the links of a chain, the tasks of a job array, a sweep's points.
Which jobs an id names (one job, or a group) is decided here, for every command alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Optional

from .. import dialects, secrets
from ..dialects import Dialect
from ..errors import JobNotFound, SchedulerError, SpecError
from ..records import JobRecord, JobStore
from ..transport.base import Transport
from .placing import NotRecorded, add_or_explain, discard, opened, placed, record_for, run_submit, signals_held, write

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
) -> str:
    """Link `link` of a chain: the same script under its own name, held until `previous` ends.
    It resumes from the newest complete checkpoint (or exits at once if training is done)."""
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

    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    if job.pass_env:
        raise SpecError(
            "--pass-env cannot reach an array's tasks (each would read the one secrets file)",
            hint="export the value in the job's environment another way, or submit the points one by one",
        )
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
                try:
                    tasks = dialect.array_task_ids(parent, len(extras))
                except SchedulerError as exc:  # a qsub that took the job but made no array of it
                    written.clear()  # the job exists: its script stays, and so does its record
                    record = record_for(
                        profile,
                        dialect,
                        job_id=parent,
                        host=prepared.host,
                        name=job.name,
                        workdir=workdir,
                        script_path=script_path,
                        submit_argv=prepared.script.submit_argv,
                    )
                    record.extra = {**record.extra, "sweep": extras[0].get("sweep"), "array_refused": exc.message}
                    add_or_explain(store, record, prepared)
                    raise SchedulerError(
                        f"job {parent} was submitted but is not a job array ({exc.message})",
                        hint=f"`hpc-launch cancel {parent}` (it is recorded), then run the sweep with --separate",
                    ) from None
                records = []
                for i, task in enumerate(tasks):
                    record = record_for(
                        profile,
                        dialect,
                        job_id=task,
                        host=prepared.host,
                        name=job.name,
                        workdir=workdir,
                        script_path=script_path,
                        submit_argv=prepared.script.submit_argv,
                    )
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
        raise


@dataclass(frozen=True)
class Target:
    """What an id given to a command names: one job, or a sweep's or an array's jobs."""

    records: List[JobRecord]
    group: bool  # the id names a sweep or a job array (even one of a single job)


def lookup(store: JobStore, ident: str, cluster: Optional[str] = None) -> Target:
    """The jobs `ident` names, for `logs`, `status`, `cancel`, `report`. Raises JobNotFound."""
    found = find_jobs(store, ident, cluster)
    group = (
        len(found) > 1
        or (found[0].job_id != ident and bool(group_members(store, ident, cluster)))
        or (found[0].extra or {}).get("sweep") == ident
    )
    return Target(found, group)
