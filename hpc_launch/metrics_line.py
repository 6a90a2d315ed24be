"""The one place that defines the training log line format.

`hpc_launch/train/` writes these lines (format_step_line) and `hpc-launch logs --summary` reads them
(parse_line). A user's own script gets a summary as well: DeepSpeed's own timer lines
(RunningAvgSamplesPerSec=..., MemAllocated=..GB) and the Hugging Face Trainer's log dicts
(`{'loss': ..., 'train_samples_per_second': ...}`) are understood too, and the lines the job layer
prints for a Lightning fit (format_lightning_line: Lightning itself prints only a progress bar).

Pure standard library: imported by the launcher, which must stay light.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, Optional, Union

PREFIX = "[hpc-train]"

# Fields in the order they are printed; all optional except step.
FIELDS = (
    "step",
    "epoch",
    "loss",
    "lr",
    "samples_per_sec",
    "avg_samples_per_sec",
    "mem_alloc_gb",
    "mem_peak_gb",
    "world_size",
    # language models (hpc_launch/train/lm.py): tokens/s and model FLOPs utilisation (a fraction of the
    # device's peak; `mfu=unknown` where hpc_launch/train/peak_flops.py has no peak for the device)
    "tokens_per_sec",
    "avg_tokens_per_sec",
    "mfu",
    # a Hugging Face Trainer's train_steps_per_second (its end-of-training log dict)
    "steps_per_sec",
)
_INT_FIELDS = {"step", "epoch", "world_size"}

Number = Union[int, float]

_KV = re.compile(r"(\w+)=([-+0-9.eE]+|nan|inf|unknown)")
UNKNOWN = "unknown"  # a figure that cannot be known here (MFU on a device without a peak): read as nan
# DeepSpeed ThroughputTimer / see_memory_usage style fields (seed 002).
_DS_FIELDS = {
    "RunningAvgSamplesPerSec": "avg_samples_per_sec",
    "CurrSamplesPerSec": "samples_per_sec",
    "MemAllocated": "mem_alloc_gb",
    "MaxMemAllocated": "mem_peak_gb",
    "global_step": "step",
}
_DS_KV = re.compile(
    r"(RunningAvgSamplesPerSec|CurrSamplesPerSec|MemAllocated|MaxMemAllocated|global_step)=([0-9.eE+-]+)(?:GB)?"
)


# The HF Trainer's log dicts, as its ProgressCallback / PrinterCallback print them (`str(logs)`:
# transformers 5 formats every float as a string, '2.195'; 4.x printed the floats), often after
# a tqdm bar on the same line. Recorded: tests/golden/user_logs/hf-trainer-callbacks.log.
_HF_DICT = re.compile(r"\{'(?:loss|train_runtime|train_loss|learning_rate)'[^{}\n\r]{0,2000}\}")
_HF_FIELDS = {
    "loss": "loss",
    "learning_rate": "lr",
    "epoch": "epoch",
    "train_samples_per_second": "avg_samples_per_sec",
    "train_steps_per_second": "steps_per_sec",
    "train_tokens_per_second": "avg_tokens_per_sec",
}


def _hf_dict(line: str) -> Optional[Dict[str, Number]]:
    out: Dict[str, Number] = {}
    for text in _HF_DICT.findall(line):
        try:
            logs = ast.literal_eval(text)  # literals only: never evaluates code
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if not isinstance(logs, dict):
            continue
        for key, name in _HF_FIELDS.items():
            try:
                value = float(logs[key])
            except (KeyError, TypeError, ValueError):
                continue
            out[name] = int(value) if name in _INT_FIELDS else value
    return out or None


def format_step_line(**fields: Number) -> str:
    """`[hpc-train] step=12 loss=2.3012 samples_per_sec=123.4 ...` (unknown keys rejected)."""
    return " ".join([PREFIX, *_field_parts(fields)])


# A Lightning fit's numbers, printed by hpc_launch/joblayer/lightning.py on rank 0:
# `[hpc-launch] lightning step=50 loss=0.4512 ... | train_acc=0.91 val/loss=0.5`, and at the fit's end
# `[hpc-launch] lightning end step=57 ... runtime_s=12.3`. Our fields come before ` | `; what the
# script self.log()s follows under its own names, for the reader (the parser takes our fields only).
LIGHTNING = "[hpc-launch] lightning "
_LOGGED_SEP = " | "


def format_lightning_line(
    fields: Dict[str, Number], logged: Dict[str, float], *, runtime_s: Optional[float] = None
) -> str:
    """A line every log_every_n_steps; with runtime_s, the fit's last (its totals, as the HF Trainer's)."""
    head = LIGHTNING + ("end " if runtime_s is not None else "") + " ".join(_field_parts(fields))
    if runtime_s is not None:
        head += f" runtime_s={runtime_s:.3f}"
    names = {re.sub(r"[\s=|]+", "_", str(k)): v for k, v in logged.items()}
    tail = " ".join(f"{k}={float(v):.6g}" for k, v in names.items())
    return head + (_LOGGED_SEP + tail if tail else "")


def _field_parts(fields: Dict[str, Number]) -> List[str]:
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown metric fields: {sorted(unknown)}")
    parts = []
    for key in FIELDS:
        if key not in fields or fields[key] is None:
            continue
        value = fields[key]
        if value != value:  # nan
            parts.append(f"{key}={UNKNOWN if key == 'mfu' else 'nan'}")
        elif key in _INT_FIELDS:
            parts.append(f"{key}={int(value)}")
        elif key == "lr":
            parts.append(f"{key}={float(value):.6g}")
        else:
            parts.append(f"{key}={float(value):.4f}")
    return parts


def parse_line(line: str) -> Optional[Dict[str, Number]]:
    """Metrics from one log line (ours or DeepSpeed's), or None if it carries none."""
    if PREFIX in line:
        return _read_fields(line.split(PREFIX, 1)[1])
    if LIGHTNING in line:
        ours = line.split(LIGHTNING, 1)[1].split(_LOGGED_SEP, 1)[0]
        return _read_fields(ours)
    if "SamplesPerSec=" in line or "MemAllocated=" in line:
        out: Dict[str, Number] = {}
        for key, raw in _DS_KV.findall(line):
            name = _DS_FIELDS[key]
            out[name] = int(float(raw)) if name in _INT_FIELDS else float(raw)
        return out or None
    if "{'" in line:
        return _hf_dict(line)
    return None


def _read_fields(text: str) -> Optional[Dict[str, Number]]:
    out: Dict[str, Number] = {}
    for key, raw in _KV.findall(text):
        if key in FIELDS:
            value = float("nan") if raw == UNKNOWN else float(raw)
            out[key] = int(value) if key in _INT_FIELDS and value == value else value
    return out or None


def summarise(lines) -> Dict[str, Number]:
    """The last value seen of each metric over an iterable of lines."""
    last: Dict[str, Number] = {}
    for line in lines:
        parsed = parse_line(line)
        if parsed:
            last.update(parsed)
    return last
