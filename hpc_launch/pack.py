"""`sweep --pack`: every point of a sweep inside ONE scheduler job (one allocation, one queue wait),
one after another. This module is the submit side: what the packed script is given
(templates/body/pack.sh.j2 runs the points), and the points read back from the job's journal as
one record each, so the report has the same rows as the array form's.

The journal (`.hpc-launch/SWEEP_ID.pack-journal` in the work dir) has a line per point that ended:
`point<TAB>index<TAB>exit code<TAB>job id<TAB>script<TAB>log<TAB>arguments`. A point is finished
when its arguments are there; `sweep --pack --resume SWEEP_ID` submits a job that runs the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from .protocol import EXIT_RESUMABLE, SCRIPT_DIR

JOURNAL_SUFFIX = ".pack-journal"
MIN_POINT_S = 5  # a point given less than this is not started: the job stops for time, resumable
_KILLED = (124, 137, 143)  # the point's own limit stopped it (TERM, then KILL)


def journal_relpath(sweep_id: str) -> str:
    return f"{SCRIPT_DIR}/{sweep_id}{JOURNAL_SUFFIX}"


def end_margin_s(walltime_s: int) -> int:
    """Kept back from the walltime for the job's last lines and its exit-code file."""
    return min(120, max(10, walltime_s // 20))


@dataclass
class Packed:
    """What the packed job script is rendered with (render.render(pack=...))."""

    sweep_id: str
    points: List[List[str]]  # each point's training arguments
    walltime_s: int

    def context(self) -> Dict[str, Any]:
        from .render import q, qjoin

        return dict(
            pack_points=[qjoin(args) for args in self.points],
            pack_journal=q(journal_relpath(self.sweep_id)),
            pack_seconds=max(1, self.walltime_s - end_margin_s(self.walltime_s)),
            pack_min_point_s=MIN_POINT_S,
            pack_sweep=q(self.sweep_id),
        )


@dataclass
class Ended:
    """A journal line: one point that ended."""

    index: int
    exit_code: int
    job_id: str
    script: str
    log: str
    args: str


def read_journal(text: str) -> List[Ended]:
    out: List[Ended] = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 7 or parts[0] != "point" or not parts[1].isdigit():
            continue  # a line cut by the walltime's kill
        try:
            code = int(parts[2])
        except ValueError:
            continue
        out.append(Ended(int(parts[1]), code, parts[3], parts[4], parts[5], parts[6]))
    return out


def point_key(args: Sequence[str]) -> str:
    """A point as the journal names it: bash's "${ARGS[*]}"."""
    return " ".join(args)


def point_state(ended: Ended, log_text: str) -> str:
    if ended.exit_code == 0:
        return "done"
    if ended.exit_code == EXIT_RESUMABLE or (ended.exit_code in _KILLED and "outlived its limit" in log_text[-2000:]):
        return "timeout"
    return "failed"


def point_records(job: Any, points: Sequence[Dict[str, Any]], journal_text: str, read_log=None) -> List[Any]:
    """One record per point (`{"index", "values", "args"}`, as `extra_for` keeps them), from the
    journal: a point that ended is its own job (its log, its exit code); one not in the journal was
    cut by the job's end and carries the job's state. `job` is the sweep's latest packed job;
    points an earlier job ran keep that job's id."""
    from msgspec.structs import replace

    from .jobs import log_text_or_empty

    read_log = read_log or log_text_or_empty
    last: Dict[str, Ended] = {e.args: e for e in read_journal(journal_text)}
    base_dir = os.path.dirname(job.script_path)
    rest = {k: v for k, v in (job.extra or {}).items() if k != "pack"}
    out: List[Any] = []
    for p in points:
        n = p["index"] + 1
        extra = {**rest, "point_index": p["index"], "point": dict(p["values"]), "packed_job": job.job_id}
        ended = last.get(point_key(p["args"]))
        if ended is None:
            state = job.state if job.state not in ("done", "running", "queued") else "cancelled"
            out.append(
                replace(
                    job,
                    job_id=f"{job.job_id}.p{n}",
                    log_path=f"{job.log_path}.p{n}",
                    state=state,
                    exit_code=None,
                    extra=extra,
                )
            )
            continue
        record = replace(
            job,
            job_id=f"{ended.job_id}.p{n}",
            log_path=ended.log,
            script_path=f"{base_dir}/{ended.script}",
            exit_code=ended.exit_code,
            extra=extra,
        )
        out.append(replace(record, state=point_state(ended, read_log(record))))
    return out


def extra_for(sweep_id: str, points: Sequence[Any]) -> Dict[str, Any]:
    """What the packed job's record keeps, so its points can be read back (`expand`) by `report`."""
    return {
        "pack": {
            "sweep": sweep_id,
            "points": [{"index": p.index, "values": dict(p.values), "args": list(p.train_args)} for p in points],
        }
    }


def expand(records: Sequence[Any], read_journal_text=None) -> List[Any]:
    """Records with each packed sweep's jobs replaced by its points' records (read from the journal
    through its latest job, which may be a --resume), a tune job by its trials'; others as they are."""
    read_journal_text = read_journal_text or read_journal_of
    latest: Dict[str, Any] = {}
    for r in records:
        pack = (r.extra or {}).get("pack")
        if pack and (pack["sweep"] not in latest or r.submit_time >= latest[pack["sweep"]].submit_time):
            latest[pack["sweep"]] = r
    out: List[Any] = []
    done: set = set()
    for r in records:
        pack = (r.extra or {}).get("pack")
        if (r.extra or {}).get("tune_journal"):  # a tune job: a row per trial (tune.py)
            from .tune import read_journal_at, trial_records

            out += trial_records(r, read_journal_at(r, r.extra["tune_journal"])) or [r]
        elif not pack:
            out.append(r)
        elif pack["sweep"] not in done:
            done.add(pack["sweep"])
            job = latest[pack["sweep"]]
            out += point_records(job, job.extra["pack"]["points"], read_journal_text(job, pack["sweep"]))
    return out


def read_journal_of(job: Any, sweep_id: str) -> str:
    """The journal's text, wherever the job ran ('' when no point has ended)."""
    from .jobs.connect import transport_for

    path = f"{job.workdir.rstrip('/')}/{journal_relpath(sweep_id)}"
    try:
        return transport_for(job.host).read_from(path, 0, 1 << 22).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def check_packable(points: Sequence[Any]) -> Optional[str]:
    """Why these points cannot share one job, or None."""
    shapes = {p.shape for p in points}
    if len(shapes) > 1:
        return "the points ask for different resources (nodes): one packed job runs them all on the same nodes"
    return None
