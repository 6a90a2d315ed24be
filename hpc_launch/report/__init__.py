"""The report of finished jobs (a sweep's, or any): a table in Markdown and CSV, PNG charts of
throughput and memory per configuration, and for one job its loss and samples/s over steps.
Where one configuration ran at several node counts, a scaling table (speedup, parallel efficiency,
and for a planned training its wall time, node-hours, the chain it needs on the jobs' cluster and
its charge in the site's unit) with a proposed node count and its chart.

The parts: rows (one per job, from its log), scaling (the arithmetic), allocation (the plan on
the site: chain and charge), tables (Markdown, CSV), charts (PNG). Here: writing them.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..site.profiles import Profile
from .allocation import SitePlan, site_plan
from .charts import MATPLOTLIB_MISSING
from .rows import COLUMNS, Row, configuration, row_for, rows_for
from .scaling import Plan, ScaleGroup, ScalePoint, scaling
from .tables import SCALING_COLUMNS, csv_text, markdown, scaling_csv, scaling_markdown

__all__ = [
    "COLUMNS",
    "MATPLOTLIB_MISSING",
    "SCALING_COLUMNS",
    "Plan",
    "Row",
    "ScaleGroup",
    "ScalePoint",
    "configuration",
    "csv_text",
    "markdown",
    "report_jobs",
    "row_for",
    "rows_for",
    "scaling",
    "scaling_csv",
    "scaling_markdown",
    "write",
    "write_for",
]

ProfileFor = Callable[[str], Optional[Profile]]  # cluster name -> its profile, None when it cannot be had


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _sites(groups: Sequence[ScaleGroup], plan: Optional[Plan], profile_for: Optional[ProfileFor]):
    sites: Dict[str, Optional[SitePlan]] = {}
    for g in groups:
        profile = profile_for(g.cluster) if profile_for and g.cluster else None
        sites[g.configuration] = site_plan(g, plan, profile)
    return sites


def write(
    rows: Sequence[Row],
    out_dir: str,
    title: str,
    plan: Optional[Plan] = None,
    profile_for: Optional[ProfileFor] = None,
) -> List[str]:
    """report.md, report.csv, throughput.png, memory.png (and steps.png for one job) in `out_dir`;
    with a scaling table also scaling.csv and scaling.png. Returns the paths written; without
    matplotlib the charts are left out and the Markdown says how to get them. A plan the jobs
    cannot answer is an error before anything is written."""
    from . import charts as ch

    groups, _ = scaling(rows, plan)
    sites = _sites(groups, plan, profile_for)
    os.makedirs(out_dir, exist_ok=True)
    files: Dict[str, bytes] = {}
    drawn: Dict[str, bytes] = {}
    note = ""
    try:
        drawn["throughput.png"] = ch.bar_png(rows, "samples_per_sec", "samples/s", "throughput per configuration")
        drawn["memory.png"] = ch.bar_png(
            rows, "peak_mem_gb_per_gpu", "peak memory per GPU (GB)", "peak memory per configuration"
        )
        if len(rows) == 1:
            drawn["steps.png"] = ch.steps_png(rows[0])
        if groups:
            drawn["scaling.png"] = ch.scaling_png(groups)
    except ImportError:
        drawn, note = {}, MATPLOTLIB_MISSING
    md = markdown(rows, title)
    if groups:
        md += "\n" + scaling_markdown(groups, plan, sites)
    if drawn:
        md += "\n" + "\n".join(f"![{name[:-4]}]({name})" for name in drawn) + "\n"
    else:
        md += f"\n{note}\n"
    files["report.md"] = md.encode()
    files["report.csv"] = csv_text(rows).encode()
    if groups:
        files["scaling.csv"] = scaling_csv(groups, sites).encode()
    files.update(drawn)
    written = []
    for name, data in files.items():
        path = os.path.join(out_dir, name)
        _write_atomic(path, data)
        written.append(path)
    return written


def _profiles(notes: List[str]) -> ProfileFor:
    """Each cluster's profile, loaded once; one that cannot be loaded is a note, not an error."""
    from ..errors import HpcLaunchError
    from ..site.profiles import load

    cache: Dict[str, Optional[Profile]] = {}

    def profile_for(cluster: str) -> Optional[Profile]:
        if cluster not in cache:
            try:
                cache[cluster] = load(cluster)
            except HpcLaunchError as exc:
                cache[cluster] = None
                notes.append(f"no chain or charge for {cluster}: {exc.one_line()}")
        return cache[cluster]

    return profile_for


def write_for(records, out_dir: str, title: str, plan: Optional[Plan] = None) -> Tuple[List[str], List[str]]:
    """The report of ended jobs: (files written, notes for the user)."""
    from ..jobs import log_text_or_empty

    rows = rows_for(records, log_text_or_empty)
    notes: List[str] = []
    written = write(rows, out_dir, title, plan, _profiles(notes))
    if not any(p.endswith(".png") for p in written):
        notes.append(MATPLOTLIB_MISSING)
    groups, why_not = scaling(rows, plan)
    if why_not and (len(rows) > 1 or plan is not None):
        notes.append(why_not)
    if plan is not None and plan.planned and any(not g.cluster for g in groups):
        notes.append("no chain or charge for a configuration whose jobs ran on several clusters: report each apart")
    return written, notes


def report_jobs(
    idents: Sequence[str], out: Optional[str] = None, cluster: Optional[str] = None, plan: Optional[Plan] = None
) -> Tuple[List[str], List[str]]:
    """`hpc-launch report ID...`: jobs, arrays or sweeps, every one of them ended."""
    from ..errors import HpcLaunchError
    from ..jobs import find_jobs, refresh
    from ..records import JobStore
    from ..states import JobState

    store = JobStore()
    records: list = []
    for ident in idents:
        for r in find_jobs(store, ident, cluster):
            if r not in records:
                records.append(r)
    records = refresh(store, records)
    running = [r.job_id for r in records if not JobState(r.state).terminal]
    if running:
        raise HpcLaunchError(
            f"{len(running)} of the jobs have not ended yet ({', '.join(running[:5])})",
            hint=f"wait for them (`hpc-launch logs -f {idents[0]}`), then report",
        )
    from ..pack import expand

    records = expand(records)  # a packed sweep's job as its points (sweep --pack)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in idents[0])
    return write_for(records, out or f"report-{safe}", f"report of {', '.join(idents)}", plan)
