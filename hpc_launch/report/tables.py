"""The report's text: the jobs table and the scaling tables, in Markdown and CSV."""

from __future__ import annotations

import csv
import io
from typing import Dict, List, Optional, Sequence

from ..walltime import hms
from .allocation import SitePlan
from .rows import COLUMNS, Row
from .scaling import Plan, ScaleGroup

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
    "startup_s",
    "links",
    "link_walltime",
    "used_node_hours",
    "charge",
    "charge_unit",
    "refused",
    "tokens_per_sec",
    "mfu",
)

Sites = Dict[str, Optional[SitePlan]]  # configuration -> its plan on the site


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mfu(value: Optional[float]) -> str:
    return "-" if value is None else ("unknown" if value != value else f"{value:.1%}")


def _token_cells(r: Row) -> str:
    return f"{fmt(r.tokens_per_sec, ',.0f')} | {_mfu(r.mfu)} | {fmt(r.perplexity, '.2f')} | "


def markdown(rows: Sequence[Row], title: str) -> str:
    tokens = any(r.tokens_per_sec is not None for r in rows)  # language models: tokens/s, MFU, perplexity
    out = [
        f"# {title}",
        "",
        "| configuration | nodes | ranks | samples/s | "
        + ("tokens/s | MFU | perplexity | " if tokens else "")
        + "peak memory per GPU (GB) | time per step (s) | final loss | steps | exit state | cause | job |",
        "|---|---:|---:|---:|" + ("---:|---:|---:|" if tokens else "") + "---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        state = r.state + (f" ({r.exit_code})" if r.exit_code not in (None, 0) else "")
        cause = r.cause.replace("|", "\\|")
        out.append(
            f"| {r.configuration} | {fmt(r.nodes, 'd')} | {fmt(r.ranks, 'd')} | {fmt(r.samples_per_sec, '.1f')} | "
            + (_token_cells(r) if tokens else "")
            + f"{fmt(r.peak_mem_gb_per_gpu, '.3f')} | {fmt(r.step_time_s, '.3f')} | {fmt(r.final_loss, '.4f')} | "
            f"{fmt(r.steps, 'd')} | {state} | {cause} | {r.job_id} |"
        )
    out += [
        "",
        "samples/s: the running mean of the last step line (warm-up steps left out); peak memory: the highest "
        "`mem_peak_gb` of rank 0 (device memory on GPUs, the process's peak RSS on CPU); time per step: training "
        "wall time / steps (`training finished`). A job that did not end done carries doctor's cause."
        + (
            " tokens/s: samples/s x --seq-len; MFU: model FLOPs/s per device (6N + 12LdT per token, "
            "hpc_launch/train/lm.py) over the device's dense peak (hpc_launch/train/peak_flops.py), "
            "unknown where the table has no peak; perplexity: exp of the held-out mean token loss."
            if tokens
            else ""
        ),
        "",
    ]
    return "\n".join(out)


def _csv_cell(value):
    if value is None:
        return ""
    return "unknown" if value != value else value  # nan: MFU on a device without a known peak


def csv_text(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([_csv_cell(getattr(r, c)) for c in COLUMNS])
    return buf.getvalue()


def _chain_cells(site: SitePlan, nodes: int, priced: bool) -> List[str]:
    c = site.chains.get(nodes)
    if c is None or (c.links is None and not c.refused):
        return ["-", "-"] if priced else ["-"]
    links = "refused" if c.refused else f"{c.links} x {hms(c.link_walltime_s or 0)}"
    charge = f"{c.charge:,.1f}" if c.charge is not None and not c.refused else "-"
    return [links, charge] if priced else [links]


def scaling_markdown(groups: Sequence[ScaleGroup], plan: Optional[Plan], sites: Optional[Sites] = None) -> str:
    out = ["## Scaling", ""]
    for g in groups:
        site = (sites or {}).get(g.configuration)
        chained = site is not None and bool(site.chains)
        priced = site is not None and chained and site.rate is not None  # a charge column only with a rate
        unit = site.unit if site is not None else ""
        tokens = any(p.tokens_per_sec is not None for p in g.points)  # a language model's
        extra_head = (" chain (links x walltime) |" if chained else "") + (f" charge ({unit}) |" if priced else "")
        extra_head += " tokens/s (median) | MFU |" if tokens else ""
        out += [
            f"### {g.configuration}",
            "",
            "| nodes | jobs | samples/s (median) | speedup | ideal | efficiency | global batch | planned samples | "
            "wall time (h) | node-hours |" + extra_head,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * (int(chained) + int(priced) + 2 * tokens),
        ]
        for p in g.points:
            mark = " **(proposed)**" if p.proposed else ""
            tail = " " + " | ".join(_chain_cells(site, p.nodes, priced)) + " |" if site and chained else ""
            if tokens:
                tail += f" {fmt(p.tokens_per_sec, ',.0f')} | {_mfu(p.mfu)} |"
            out.append(
                f"| {p.nodes}{mark} | {p.jobs} | {p.samples_per_sec:.1f} | {p.speedup:.2f} | {p.ideal_speedup:.2f} | "
                f"{p.efficiency:.0%} | {fmt(p.global_batch, 'd')} | {fmt(p.planned_samples, 'd')} | "
                f"{fmt(p.wall_h, '.2f')} | {fmt(p.node_hours, '.1f')} |{tail}"
            )
        out += ["", g.proposal + "."]
        if site:
            out += [""] + [line if line.startswith("- ") else line + "." for line in site.lines]
        for r in g.excluded:
            why = r.cause or ("no samples/s figure" if r.state == "done" else r.state)
            out.append(f"- excluded: job {r.job_id} ({fmt(r.nodes, 'd')} node(s), {r.state}): {why}")
        out.append("")
    floor = plan.min_efficiency if plan else Plan().min_efficiency
    out.append(
        "speedup = samples/s / the smallest node count's; ideal = nodes / the smallest node count; efficiency = "
        f"speedup / ideal (floor {floor:.0%}, `--min-efficiency`); several jobs at one node count: their median. "
        + (
            "wall time = planned samples / samples/s (an epoch: the entrypoint's steps/epoch x global batch at "
            "that node count); node-hours = wall time x nodes. chain: links = ceil(wall time / (link walltime - "
            "stop margin - the longest measured start-up)); node-hours used = nodes x (wall time + links x "
            "start-up); charge = node-hours used x the profile's rate."
            if plan and plan.planned
            else "`--plan-samples N`, `--plan-steps N` or `--plan-epochs N` adds wall time and node-hours for a "
            "planned training, and the chain it needs on the jobs' cluster."
        )
    )
    out.append("")
    return "\n".join(out)


def scaling_csv(groups: Sequence[ScaleGroup], sites: Optional[Sites] = None) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(SCALING_COLUMNS)
    for g in groups:
        site = (sites or {}).get(g.configuration)
        for p in g.points:
            c = site.chains.get(p.nodes) if site else None
            values = [g.configuration] + [getattr(p, col) for col in SCALING_COLUMNS[1:13]]
            values += [
                c.links if c else None,
                hms(c.link_walltime_s) if c and c.link_walltime_s else None,
                c.used_node_hours if c else None,
                c.charge if c else None,
                site.unit if site and c and c.charge is not None else None,
                c.refused if c else None,
                p.tokens_per_sec,
                p.mfu,
            ]
            writer.writerow([_csv_cell(v) for v in values])
    return buf.getvalue()
