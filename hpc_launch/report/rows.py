"""One row per ended job: what it ran and what its log says it measured.

Every figure comes from the job's own log lines, read by the one parser (metrics_line, through
display.summarise); a job that did not end well carries doctor's cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..metrics_line import parse_line

# the entrypoint's line when training starts (hpc_launch/train/trainer.py)
_TRAINING = re.compile(
    r"^training \S+ on \S+: world=(\d+) .*?zero=(\d+)(?: offload=(\S+))? precision=(\S+) micro=(\d+)", re.M
)
_GLOBAL = re.compile(r"^training \S+ on \S+: .*? global=(\d+)", re.M)
# the steps one epoch of the training set takes at this world size (drop_last: whole global batches)
_STEPS_PER_EPOCH = re.compile(r"^training \S+ on \S+: .*? steps/epoch=(\d+)", re.M)
# the job script's first line (templates/body/prologue.sh.j2)
_SHAPE = re.compile(r"^\[hpc-launch\] job .* (\d+) node\(s\) x (\d+) rank\(s\)", re.M)
_FINISHED = re.compile(r"^training finished: steps=(\d+) wall_s=([\d.]+)", re.M)

COLUMNS = (
    "job_id",
    "configuration",
    "nodes",
    "ranks",
    "samples_per_sec",
    "tokens_per_sec",
    "mfu",
    "perplexity",
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
    steps_per_epoch: Optional[int] = None  # the training line's steps/epoch=
    startup_s: Optional[float] = None  # job start to the first step: the prologue's time stamp to training
    cluster: str = ""
    # language models (hpc_launch/train/lm.py): the running mean of tokens/s, MFU (nan: the device's peak is
    # unknown), the held-out perplexity
    tokens_per_sec: Optional[float] = None
    mfu: Optional[float] = None
    perplexity: Optional[float] = None


def configuration(log_text: str, point: Optional[dict]) -> str:
    """`zero=3 offload=optimizer precision=fp32 micro_batch=8`: what the job ran (its training
    line), else what the sweep asked for."""
    m = _TRAINING.search(log_text)
    if m:
        return f"zero={m.group(2)} offload={m.group(3) or '?'} precision={m.group(4)} micro_batch={m.group(5)}"
    if point:
        from ..plan import label

        return label({k: v for k, v in point.items() if k != "nodes"})
    return "?"


def _int(pattern: "re.Pattern[str]", text: str) -> Optional[int]:
    m = pattern.search(text)
    return int(m.group(1)) if m else None


def row_for(record, log_text: str) -> Row:
    from ..display import summarise
    from ..doctor import diagnose, report_lines

    s = summarise(log_text, state=record.state, exit_code=record.exit_code, log_path=record.log_path)
    m = s.metrics
    series: List[Dict[str, float]] = []
    for line in log_text.splitlines():
        parsed = parse_line(line)
        if parsed and "step" in parsed and ("loss" in parsed or "samples_per_sec" in parsed):
            series.append({k: float(parsed[k]) for k in ("step", "loss", "samples_per_sec") if k in parsed})
    finished = _FINISHED.findall(log_text)
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
        steps=int(m["step"]) if "step" in m else None,
        state=record.state,
        exit_code=record.exit_code,
        cause=cause,
        log=record.log_path,
        series=series,
        global_batch=_int(_GLOBAL, log_text),
        steps_per_epoch=_int(_STEPS_PER_EPOCH, log_text),
        startup_s=s.startup_s,
        cluster=record.cluster,
        tokens_per_sec=m.get("avg_tokens_per_sec"),
        mfu=m.get("mfu"),
        perplexity=s.eval_perplexity,
    )


def rows_for(records, read_log) -> List[Row]:
    """A row per record; `read_log(record)` gives its log text ('' when there is none)."""
    return [row_for(r, read_log(r)) for r in records]
