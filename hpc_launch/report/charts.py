"""The report's PNG charts. matplotlib (the `report` extra) is imported only here, when a chart
is drawn, with the Agg backend; the plotted numbers ride along in each PNG's text chunk, so they
can be checked against the logs."""

from __future__ import annotations

import io
import json
from typing import Dict, Sequence

from .rows import Row
from .scaling import ScaleGroup

MATPLOTLIB_MISSING = "charts not drawn: matplotlib is not installed (pip install 'hpc-launch[report]')"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_png(rows: Sequence[Row], attr: str, ylabel: str, title: str) -> bytes:
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


def steps_png(row: Row) -> bytes:
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


def scaling_png(groups: Sequence[ScaleGroup]) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.8))
    data: Dict[str, Dict[str, object]] = {}
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
        pick = next(p for p in g.points if p.proposed)
        ax.plot([pick.nodes], [pick.speedup], marker="*", markersize=16, color=color, linestyle="none")
        ax.annotate("proposed", (pick.nodes, pick.speedup), textcoords="offset points", xytext=(-20, 10), fontsize=8)
        data[g.configuration] = {
            "speedup": list(zip(nodes, speedup)),
            "ideal": list(zip(nodes, ideal)),
            "proposed": pick.nodes,
        }
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
