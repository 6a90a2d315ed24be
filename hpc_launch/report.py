"""The report of finished jobs (a sweep's, or any): a table in Markdown and CSV, PNG charts of
throughput and memory per configuration, and for one job its loss and samples/s over steps.
Where one configuration ran at several node counts, a scaling table (speedup, parallel efficiency,
and for a planned training its wall time and node-hours) with a proposed node count and its chart.

Every figure comes from the jobs' own log lines, read by the one parser (metrics_line, through
display.summarise); a job that did not end well carries doctor's cause. matplotlib (the
`report` extra) is imported only here, inside the chart writer, with the Agg backend.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .metrics_line import parse_line

MATPLOTLIB_MISSING = "charts not drawn: matplotlib is not installed (pip install 'hpc-launch[report]')"
# the entrypoint's line when training starts (train/trainer.py)
_TRAINING = re.compile(
    r"^training \S+ on \S+: world=(\d+) .*?zero=(\d+)(?: offload=(\S+))? precision=(\S+) micro=(\d+)", re.M
)
# the job script's first line (templates/body/prologue.sh.j2)
_GLOBAL = re.compile(r"^training \S+ on \S+: .*? global=(\d+)", re.M)
_SHAPE = re.compile(r"^\[hpc-launch\] job .* (\d+) node\(s\) x (\d+) rank\(s\)", re.M)

COLUMNS = (
    "job_id",
    "configuration",
    "nodes",
    "ranks",
    "samples_per_sec",
    "peak_mem_gb_per_gpu",
    "step_time_s",
    "final_loss",
    "steps",
    "state",
    "exit_code",
    "cause",
    "log",
)


@dataclass
class Row:
    job_id: str
    configuration: str
    nodes: Optional[int]
    ranks: Optional[int]
    samples_per_sec: Optional[float]  # the running mean of the last step line (warm-up steps left out)
    peak_mem_gb_per_gpu: Optional[float]  # the highest mem_peak_gb of any step line (rank 0's; RSS on CPU)
    step_time_s: Optional[float]  # training wall time / steps, from `training finished`
    final_loss: Optional[float]
    steps: Optional[int]
    state: str
    exit_code: Optional[int]
    cause: str  # doctor's cause for a job that did not end done
    log: str
    series: List[Dict[str, float]] = field(default_factory=list)  # every step line: step, loss, samples_per_sec
    global_batch: Optional[int] = None  # the training line's global=


def configuration(log_text: str, point: Optional[dict]) -> str:
    """`zero=3 offload=optimizer precision=fp32 micro_batch=8`: what the job ran (its training
    line), else what the sweep asked for."""
    m = _TRAINING.search(log_text)
    if m:
        return f"zero={m.group(2)} offload={m.group(3) or '?'} precision={m.group(4)} micro_batch={m.group(5)}"
    if point:
        from .plan import label

        return label({k: v for k, v in point.items() if k != "nodes"})
    return "?"


def row_for(record, log_text: str) -> Row:
    from .display import summarise
    from .doctor import diagnose, report_lines

    s = summarise(log_text, state=record.state, exit_code=record.exit_code, log_path=record.log_path)
    m = s.metrics
    series: List[Dict[str, float]] = []
    for line in log_text.splitlines():
        parsed = parse_line(line)
        if parsed and "step" in parsed and ("loss" in parsed or "samples_per_sec" in parsed):
            series.append({k: float(parsed[k]) for k in ("step", "loss", "samples_per_sec") if k in parsed})
    steps = int(m["step"]) if "step" in m else None
    finished = re.findall(r"^training finished: steps=(\d+) wall_s=([\d.]+)", log_text, re.M)
    step_time = float(finished[-1][1]) / int(finished[-1][0]) if finished and int(finished[-1][0]) else None
    shape = _SHAPE.search(log_text)
    extra = record.extra or {}
    nodes = int(shape.group(1)) if shape else extra.get("nodes")
    ranks = (
        int(m["world_size"]) if "world_size" in m else (int(shape.group(1)) * int(shape.group(2)) if shape else None)
    )
    cause = ""
    if record.state != "done":
        d = diagnose(log_text, exit_code=record.exit_code, comment=record.comment, state=record.state)
        cause = d.top.text if d.top else (report_lines(d)[0].removeprefix("cause: ") if not d.succeeded else "")
    return Row(
        job_id=record.job_id,
        configuration=configuration(log_text, extra.get("point")),
        nodes=nodes,
        ranks=ranks,
        samples_per_sec=m.get("avg_samples_per_sec"),
        peak_mem_gb_per_gpu=s.peak_mem_gb,
        step_time_s=step_time,
        final_loss=m.get("loss"),
        steps=steps,
        state=record.state,
        exit_code=record.exit_code,
        cause=cause,
        log=record.log_path,
        series=series,
        global_batch=int(g.group(1)) if (g := _GLOBAL.search(log_text)) else None,
    )


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(rows: Sequence[Row], title: str) -> str:
    out = [
        f"# {title}",
        "",
        "| configuration | nodes | ranks | samples/s | peak memory per GPU (GB) | time per step (s) | final loss | "
        "steps | exit state | cause | job |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        state = r.state + (f" ({r.exit_code})" if r.exit_code not in (None, 0) else "")
        cause = r.cause.replace("|", "\\|")
        out.append(
            f"| {r.configuration} | {_fmt(r.nodes, 'd')} | {_fmt(r.ranks, 'd')} | {_fmt(r.samples_per_sec, '.1f')} | "
            f"{_fmt(r.peak_mem_gb_per_gpu, '.3f')} | {_fmt(r.step_time_s, '.3f')} | {_fmt(r.final_loss, '.4f')} | "
            f"{_fmt(r.steps, 'd')} | {state} | {cause} | {r.job_id} |"
        )
    out += [
        "",
        "samples/s: the running mean of the last step line (warm-up steps left out); peak memory: the highest "
        "`mem_peak_gb` of rank 0 (device memory on GPUs, the process's peak RSS on CPU); time per step: training "
        "wall time / steps (`training finished`). A job that did not end done carries doctor's cause.",
        "",
    ]
    return "\n".join(out)


def csv_text(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow(["" if getattr(r, c) is None else getattr(r, c) for c in COLUMNS])
    return buf.getvalue()


# ---- scaling: one configuration at several node counts -------------------------------------------

SCALING_COLUMNS = (
    "configuration",
    "nodes",
    "jobs",
    "samples_per_sec",
    "speedup",
    "ideal_speedup",
    "efficiency",
    "global_batch",
    "planned_samples",
    "wall_h",
    "node_hours",
    "proposed",
)


@dataclass(frozen=True)
class Plan:
    """A planned training (`report --plan-samples N` or `--plan-steps N`) and the efficiency floor."""

    samples: Optional[int] = None
    steps: Optional[int] = None  # times each node count's measured global batch
    min_efficiency: float = 0.7


@dataclass
class ScalePoint:
    nodes: int
    jobs: int  # done jobs at this node count; samples_per_sec is their median
    samples_per_sec: float
    speedup: float  # samples_per_sec / the smallest node count's
    ideal_speedup: float  # nodes / the smallest node count
    efficiency: float  # speedup / ideal_speedup
    global_batch: Optional[int]  # None when the jobs' training lines disagree or lack it
    planned_samples: Optional[int]
    wall_h: Optional[float]  # planned_samples / samples_per_sec, in hours
    node_hours: Optional[float]  # wall_h x nodes
    proposed: bool = False


@dataclass
class ScaleGroup:
    configuration: str
    points: List[ScalePoint]
    excluded: List[Row]  # jobs of this configuration without a figure (failed, or no step line)
    proposal: str = ""


def _point_plan(plan: Optional[Plan], global_batch: Optional[int]) -> Optional[int]:
    if plan is None:
        return None
    if plan.samples is not None:
        return plan.samples
    return plan.steps * global_batch if plan.steps is not None and global_batch else None


def _propose(group: ScaleGroup, plan: Optional[Plan]) -> None:
    """The most nodes still at the efficiency floor: the fastest allocation that wastes at most
    (1 - floor) of its node-hours. For a fixed number of samples node-hours fall with efficiency
    alone, so the cheapest is always the most efficient; the line gives the premium over it."""
    floor = plan.min_efficiency if plan else Plan().min_efficiency
    points = group.points
    base = points[0]
    within = [p for p in points if p.efficiency >= floor]  # the base (efficiency 1) always is
    pick = max(within, key=lambda p: p.nodes)
    pick.proposed = True
    line = (
        f"propose {pick.nodes} node(s): the most nodes measured at >= {floor:.0%} parallel efficiency "
        f"({pick.efficiency:.0%}, {pick.speedup:.2f}x the samples/s of {base.nodes} node(s))"
    )
    priced = [p for p in within if p.node_hours is not None]
    if pick.node_hours is not None and pick.wall_h is not None and priced:
        cheap = min(priced, key=lambda p: (p.node_hours, p.nodes))
        line += f"; {pick.wall_h:.2f} h wall, {pick.node_hours:.1f} node-hours"
        if cheap is pick:
            line += " (also the cheapest)"
        else:
            premium = pick.node_hours / cheap.node_hours - 1  # type: ignore[operator]
            line += f" ({premium:+.0%} over the cheapest, {cheap.nodes} node(s): {cheap.node_hours:.1f} node-hours)"
    above = [p for p in points if p.nodes > pick.nodes]
    if above:
        line += f"; {above[0].nodes} node(s) fall to {above[0].efficiency:.0%}"
    group.proposal = line


def scaling(rows: Sequence[Row], plan: Optional[Plan] = None) -> Tuple[List[ScaleGroup], str]:
    """A scaling table per configuration measured at two or more node counts, and, when there is
    none, the one line that says why."""
    by_conf: Dict[str, List[Row]] = {}
    for r in rows:
        by_conf.setdefault(r.configuration, []).append(r)
    groups: List[ScaleGroup] = []
    measured_counts: Dict[str, List[int]] = {}
    for conf, members in by_conf.items():
        good = [r for r in members if r.state == "done" and (r.samples_per_sec or 0) > 0 and r.nodes]
        excluded = [r for r in members if r not in good]
        counts = sorted({int(r.nodes or 0) for r in good})
        measured_counts[conf] = counts
        if len(counts) < 2:
            continue
        points: List[ScalePoint] = []
        for n in counts:
            at = [r for r in good if r.nodes == n]
            sps = float(statistics.median(float(r.samples_per_sec or 0.0) for r in at))
            base = points[0].samples_per_sec if points else sps
            batches = {r.global_batch for r in at}
            gb = batches.pop() if len(batches) == 1 else None
            planned = _point_plan(plan, gb)
            wall_h = planned / sps / 3600 if planned is not None else None
            points.append(
                ScalePoint(
                    nodes=n,
                    jobs=len(at),
                    samples_per_sec=sps,
                    speedup=sps / base,
                    ideal_speedup=n / counts[0],
                    efficiency=(sps / base) / (n / counts[0]),
                    global_batch=gb,
                    planned_samples=planned,
                    wall_h=wall_h,
                    node_hours=wall_h * n if wall_h is not None else None,
                )
            )
        group = ScaleGroup(conf, points, excluded)
        _propose(group, plan)
        groups.append(group)
    if groups:
        return groups, ""
    hint = "report jobs of one configuration run at several node counts (hpc-launch sweep --nodes 1,2,4,8)"
    measured = {c: n for c, n in measured_counts.items() if n}
    if not measured:
        return [], f"no scaling table: no job ended done with a samples/s figure ({hint})"
    if len(measured) == 1:
        (counts,) = measured.values()
        return [], f"no scaling table: every measured job ran on {counts[0]} node(s) ({hint})"
    return [], f"no scaling table: no configuration was measured at more than one node count ({hint})"


def scaling_markdown(groups: Sequence[ScaleGroup], plan: Optional[Plan]) -> str:
    out = ["## Scaling", ""]
    for g in groups:
        out += [
            f"### {g.configuration}",
            "",
            "| nodes | jobs | samples/s (median) | speedup | ideal | efficiency | global batch | planned samples | "
            "wall time (h) | node-hours |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in g.points:
            mark = " **(proposed)**" if p.proposed else ""
            out.append(
                f"| {p.nodes}{mark} | {p.jobs} | {p.samples_per_sec:.1f} | {p.speedup:.2f} | {p.ideal_speedup:.2f} | "
                f"{p.efficiency:.0%} | {_fmt(p.global_batch, 'd')} | {_fmt(p.planned_samples, 'd')} | "
                f"{_fmt(p.wall_h, '.2f')} | {_fmt(p.node_hours, '.1f')} |"
            )
        out += ["", g.proposal + "."]
        for r in g.excluded:
            why = r.cause or ("no samples/s figure" if r.state == "done" else r.state)
            out.append(f"- excluded: job {r.job_id} ({_fmt(r.nodes, 'd')} node(s), {r.state}): {why}")
        out.append("")
    floor = plan.min_efficiency if plan else Plan().min_efficiency
    out.append(
        "speedup = samples/s / the smallest node count's; ideal = nodes / the smallest node count; efficiency = "
        f"speedup / ideal (floor {floor:.0%}, `--min-efficiency`); several jobs at one node count: their median. "
        + (
            "wall time = planned samples / samples/s; node-hours = wall time x nodes."
            if plan and (plan.samples is not None or plan.steps is not None)
            else "`--plan-samples N` or `--plan-steps N` adds wall time and node-hours for a planned training."
        )
    )
    out.append("")
    return "\n".join(out)


def scaling_csv(groups: Sequence[ScaleGroup]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(SCALING_COLUMNS)
    for g in groups:
        for p in g.points:
            values = [g.configuration] + [getattr(p, c) for c in SCALING_COLUMNS[1:]]
            writer.writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bar_png(rows: Sequence[Row], attr: str, ylabel: str, title: str) -> bytes:
    plt = _pyplot()
    names = [f"{r.configuration.replace(' ', chr(10))}\n{r.nodes or '?'} node(s)" for r in rows]
    values = [getattr(r, attr) for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows)), 4.8))
    bars = ax.bar(
        range(len(rows)),
        [v or 0.0 for v in values],
        color=["tab:blue" if r.state == "done" else "tab:red" for r in rows],
    )
    for bar, value in zip(bars, values):
        ax.annotate(
            "n/a" if value is None else f"{value:.4g}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    # the plotted numbers ride along in the PNG's text chunk, so they can be checked against the logs
    data = {r.job_id: getattr(r, attr) for r in rows}
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Description": json.dumps({"values": data})})
    plt.close(fig)
    return buf.getvalue()


def _steps_png(row: Row) -> bytes:
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    losses = [(p["step"], p["loss"]) for p in row.series if "loss" in p]
    speeds = [(p["step"], p["samples_per_sec"]) for p in row.series if "samples_per_sec" in p]
    if losses:
        top.plot(*zip(*losses), marker=".")
    if speeds:
        bottom.plot(*zip(*speeds), marker=".", color="tab:green")
    top.set_ylabel("loss")
    bottom.set_ylabel("samples/s")
    bottom.set_xlabel("step")
    top.set_title(f"job {row.job_id}: {row.configuration}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(
        buf, format="png", dpi=100, metadata={"Description": json.dumps({"loss": losses, "samples_per_sec": speeds})}
    )
    plt.close(fig)
    return buf.getvalue()


def _scaling_png(groups: Sequence[ScaleGroup]) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8))
    data: Dict[str, Dict[str, list]] = {}
    for i, g in enumerate(groups):
        nodes = [p.nodes for p in g.points]
        speedup = [p.speedup for p in g.points]
        ideal = [p.ideal_speedup for p in g.points]
        color = f"C{i % 10}"
        ax.plot(nodes, speedup, marker="o", color=color, label=g.configuration)
        ax.plot(nodes, ideal, linestyle="--", color=color, alpha=0.5, label="ideal" if i == 0 else None)
        for p in g.points:
            ax.annotate(
                f"{p.efficiency:.0%}", (p.nodes, p.speedup), textcoords="offset points", xytext=(4, -10), fontsize=8
            )
        data[g.configuration] = {"speedup": list(zip(nodes, speedup)), "ideal": list(zip(nodes, ideal))}
    ax.set_xticks(sorted({p.nodes for g in groups for p in g.points}))
    ax.set_xlabel("nodes")
    ax.set_ylabel("speedup (samples/s over the fewest nodes)")
    ax.set_title("scaling: speedup vs nodes (labels: parallel efficiency)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Description": json.dumps(data)})
    plt.close(fig)
    return buf.getvalue()


def write(rows: Sequence[Row], out_dir: str, title: str, plan: Optional[Plan] = None) -> List[str]:
    """report.md, report.csv, throughput.png, memory.png (and steps.png for one job) in `out_dir`;
    with a scaling table also scaling.csv and scaling.png. Returns the paths written; without
    matplotlib the charts are left out and the Markdown says how to get them."""
    os.makedirs(out_dir, exist_ok=True)
    groups, _ = scaling(rows, plan)
    files: Dict[str, bytes] = {}
    charts: Dict[str, bytes] = {}
    note = ""
    try:
        charts["throughput.png"] = _bar_png(rows, "samples_per_sec", "samples/s", "throughput per configuration")
        charts["memory.png"] = _bar_png(
            rows, "peak_mem_gb_per_gpu", "peak memory per GPU (GB)", "peak memory per configuration"
        )
        if len(rows) == 1:
            charts["steps.png"] = _steps_png(rows[0])
        if groups:
            charts["scaling.png"] = _scaling_png(groups)
    except ImportError:
        charts, note = {}, MATPLOTLIB_MISSING
    md = markdown(rows, title)
    if groups:
        md += "\n" + scaling_markdown(groups, plan)
    if charts:
        md += "\n" + "\n".join(f"![{name[:-4]}]({name})" for name in charts) + "\n"
    else:
        md += f"\n{note}\n"
    files["report.md"] = md.encode()
    files["report.csv"] = csv_text(rows).encode()
    if groups:
        files["scaling.csv"] = scaling_csv(groups).encode()
    files.update(charts)
    written = []
    for name, data in files.items():
        path = os.path.join(out_dir, name)
        _write_atomic(path, data)
        written.append(path)
    return written


def rows_for(records, read_log) -> List[Row]:
    """A row per record; `read_log(record)` gives its log text ('' when there is none)."""
    return [row_for(r, read_log(r)) for r in records]


def write_for(records, out_dir: str, title: str, plan: Optional[Plan] = None) -> Tuple[List[str], List[str]]:
    """The report of ended jobs: (files written, notes for the user)."""
    from .jobs import log_text_or_empty

    rows = rows_for(records, log_text_or_empty)
    written = write(rows, out_dir, title, plan)
    notes = [] if any(p.endswith(".png") for p in written) else [MATPLOTLIB_MISSING]
    _, why_not = scaling(rows, plan)
    if why_not and (len(rows) > 1 or plan is not None):
        notes.append(why_not)
    return written, notes


def report_jobs(
    idents: Sequence[str], out: Optional[str] = None, cluster: Optional[str] = None, plan: Optional[Plan] = None
) -> Tuple[List[str], List[str]]:
    """`hpc-launch report ID...`: jobs, arrays or sweeps, every one of them ended."""
    from .errors import HpcLaunchError
    from .jobs import find_jobs, refresh
    from .records import JobStore
    from .states import JobState

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
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in idents[0])
    return write_for(records, out or f"report-{safe}", f"report of {', '.join(idents)}", plan)
