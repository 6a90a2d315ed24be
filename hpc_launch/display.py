"""What a researcher sees while following a job, and the summary at its end.

The log file keeps every line; the terminal shows hpc-launch's own lines, the training lines,
the user's own output and every error, and leaves out the frameworks' routine chatter
(DeepSpeed's INFO/WARNING logger lines, torch's deprecation warnings, op-build progress),
which becomes a one-line progress note instead. `--all` shows everything.

Standard library only (re, datetime): runs on the laptop that follows the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List, Optional

from .metrics_line import parse_line
from .protocol import TRAINING_FINISHED


# DeepSpeed's logger: `[2026-11-23 00:03:48,077] [WARNING] [runner.py:214:fetch_hostfile] ...`
_DS_LOGGER = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[(DEBUG|INFO|WARNING)\] \[[\w.]+:\d+:\w+\]")
# A Python warning, `path.py:83: FutureWarning: ...`, is followed by the source line it quotes.
_PY_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: ")
# JIT op builds (torch.utils.cpp_extension and DeepSpeed's op builder)
_OP_BUILD = re.compile(
    r"^(Using \S+ as PyTorch extensions root|Emitting ninja build file|Building extension module|"
    r"Allowing ninja to set a default number of workers|\[\d+/\d+\] |"
    r"Creating extension directory|Detected CUDA files, patching ldflags)"
)
# an op that was built before is only loaded: hidden, but no "building" note
_OP_LOAD = re.compile(
    r"^(Loading extension module|ninja: no work to do|Time to load \w+ op:|DeepSpeed \S+ built successfully)"
)
NOISE_KINDS = (
    "DeepSpeed logger INFO/WARNING lines",
    "Python warnings and the source line they quote",
    "JIT op build progress",
    "the entrypoint's start-up time stamps (for bench/)",
)


@dataclass
class LogFilter:
    """Feed it the log as it grows; it returns the lines for the terminal."""

    show_all: bool = False
    note: Optional[str] = None  # a progress note for the status line (op builds, framework start)
    hidden: int = 0
    _partial: str = ""
    _skip_quoted_source: bool = False

    def feed(self, text: str) -> str:
        if self.show_all:
            return text
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()  # an incomplete last line waits for its end
        return "".join(line + "\n" for line in lines if self._keep(line))

    def flush(self) -> str:
        rest, self._partial = self._partial, ""
        return rest if rest and (self.show_all or self._keep(rest)) else ""

    def _keep(self, line: str) -> bool:
        if self._skip_quoted_source:
            self._skip_quoted_source = False
            if line.startswith((" ", "\t")):
                self.hidden += 1
                return False
        if _PY_WARNING.match(line):
            self._skip_quoted_source = True
            self.hidden += 1
            return False
        if _OP_BUILD.match(line):
            self.note = "DeepSpeed is building its ops (once per environment)"
            self.hidden += 1
            return False
        if _OP_LOAD.match(line):
            self.hidden += 1
            return False
        if _DS_LOGGER.match(line):
            if "launch.py" in line and "spawned" in line:
                self.note = "ranks started: importing torch and DeepSpeed"
            self.hidden += 1
            return False
        if line.startswith("[hpc-train] starting DeepSpeed"):
            self.note = (
                "starting DeepSpeed: process group, engine, ops (built once per environment: minutes the first time)"
            )
            return False  # the note says it
        if line.startswith("[hpc-train] start-up:"):  # epoch stamps for bench/bench_launch.py, not for people
            self.hidden += 1
            return False
        if line.startswith(("[hpc-train]", "training ")):
            self.note = None
        return True


# ---------------------------------------------------------------------------------------------
# the summary block

_JOB_START = re.compile(r"^\[hpc-launch\] job \S+ on \S+ at (\S+?),", re.M)
_FINISHED = re.compile(rf"^{re.escape(TRAINING_FINISHED)}steps=(\d+) wall_s=([\d.]+)(?: ended_at=([\d.]+))?", re.M)
_JOB_T = re.compile(r"^\[hpc-launch\] job \S+ on \S+ at \S+, .*?, t=([\d.]+),", re.M)  # the prologue's EPOCHREALTIME
_EVAL = re.compile(r"^\[hpc-eval\] top1=([\d.]+)(?:[^\n]*? time_s=([\d.]+))?", re.M)
# a language model's held-out perplexity (hpc_launch/train/lm.py perplexity_line)
_EVAL_LM = re.compile(r"^\[hpc-eval\] loss=\S+ perplexity=([-+\d.eEinfa]+)(?:[^\n]*? time_s=([\d.]+))?", re.M)


@dataclass
class Summary:
    state: str
    exit_code: Optional[int]
    log_path: str
    metrics: Dict[str, float] = field(default_factory=dict)
    peak_mem_gb: Optional[float] = None
    eval_top1: Optional[float] = None
    eval_perplexity: Optional[float] = None
    queued_s: Optional[float] = None
    startup_s: Optional[float] = None
    training_s: Optional[float] = None
    eval_s: Optional[float] = None
    end_s: Optional[float] = None  # ranks and launcher exiting, the script's end, and noticing it
    exiting_s: Optional[float] = None  # of end_s: from the eval's end to the script's end (the cluster's clock)
    total_s: Optional[float] = None
    cause: List[str] = field(default_factory=list)  # doctor's lines for a failed job


def summarise(
    log_text: str,
    *,
    state: str,
    exit_code: Optional[int],
    log_path: str,
    submit_time: Optional[float] = None,
    end_time: Optional[float] = None,
    script_end: Optional[float] = None,
) -> Summary:
    """`script_end`: when the job script ended, by the cluster's clock (its exit file)."""
    s = Summary(state=state, exit_code=exit_code, log_path=log_path)
    peak = None
    for line in log_text.splitlines():
        parsed = parse_line(line)
        if parsed:
            s.metrics.update(parsed)
            if "mem_peak_gb" in parsed:
                peak = max(peak or 0.0, float(parsed["mem_peak_gb"]))
    s.peak_mem_gb = peak
    m = _EVAL.search(log_text)
    s.eval_top1 = float(m.group(1)) if m else None
    if m is None:
        m = _EVAL_LM.search(log_text)
        s.eval_perplexity = float(m.group(1)) if m else None
    s.eval_s = float(m.group(2)) if m and m.group(2) else None
    started = _job_start(log_text)
    finished = list(_FINISHED.finditer(log_text))
    if finished:
        s.training_s = float(finished[-1].group(2))
        ended_at = float(finished[-1].group(3)) if finished[-1].group(3) else None
        if ended_at is not None and started is not None:
            s.startup_s = max(0.0, ended_at - s.training_s - started)
        if ended_at is not None and script_end is not None:
            s.exiting_s = max(0.0, script_end - ended_at - (s.eval_s or 0.0))
    if started is not None and submit_time is not None:
        s.queued_s = max(0.0, started - submit_time)
    if submit_time is not None and end_time is not None:
        s.total_s = max(0.0, end_time - submit_time)
    parts = (s.queued_s, s.startup_s, s.training_s)
    if s.total_s is not None and all(p is not None for p in parts):  # every second accounted: the rest is the end
        s.end_s = max(0.0, s.total_s - sum(p for p in parts if p is not None) - (s.eval_s or 0.0))
        if s.exiting_s is not None:
            s.exiting_s = min(s.exiting_s, s.end_s)
    return s


def _job_start(log_text: str) -> Optional[float]:
    t = _JOB_T.search(log_text)
    if t:  # to the microsecond where bash has EPOCHREALTIME
        return float(t.group(1))
    m = _JOB_START.search(log_text)
    if not m:
        return None
    try:
        return datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def mfu_text(value: Optional[float]) -> str:
    """MFU as a percentage; `unknown` where the device has no known peak (read as nan)."""
    if value is None:
        return "-"
    return "unknown" if value != value else f"{value:.1%}"


def _secs(value: Optional[float]) -> str:
    if value is None:
        return "?"
    if value < 120:
        return f"{value:.1f} s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def _the_end(s: Summary) -> str:
    if s.end_s is None or s.exiting_s is None:
        return f"the end {_secs(s.end_s)} (ranks exiting, the script's end, noticing it)"
    return (
        f"the end {_secs(s.end_s)} (ranks and launcher exiting {_secs(s.exiting_s)}, "
        f"noticing it {_secs(s.end_s - s.exiting_s)})"
    )


def format_summary(s: Summary, job_id: str) -> str:
    code = f", exit code {s.exit_code}" if s.exit_code is not None else ""
    lines = [f"── job {job_id}: {s.state}{code} " + "─" * 20]
    if s.total_s is not None or s.training_s is not None:
        times = [
            f"{_secs(s.total_s)} in all" if s.total_s is not None else None,
            f"queued {_secs(s.queued_s)}" if s.queued_s is not None else None,
            f"start-up {_secs(s.startup_s)} (launcher, framework init, op builds)" if s.startup_s is not None else None,
            f"training {_secs(s.training_s)}" if s.training_s is not None else None,
            f"eval {_secs(s.eval_s)}" if s.eval_s is not None else None,
            _the_end(s) if s.end_s is not None else None,
        ]
        lines.append("  time      " + ", ".join(t for t in times if t))
    m = s.metrics
    if m:
        parts: List[str] = []
        if "step" in m:
            parts.append(f"{int(m['step'])} steps")
        if "loss" in m:
            parts.append(f"final loss {m['loss']:.4f}")
        if "avg_samples_per_sec" in m:
            parts.append(f"{m['avg_samples_per_sec']:.1f} samples/s (mean)")
        if "steps_per_sec" in m:
            parts.append(f"{m['steps_per_sec']:.2f} steps/s")
        if "avg_tokens_per_sec" in m:
            parts.append(f"{m['avg_tokens_per_sec']:,.0f} tokens/s (mean)")
        if "mfu" in m:
            parts.append(f"MFU {mfu_text(m['mfu'])}")
        if s.peak_mem_gb is not None:
            parts.append(f"peak memory {s.peak_mem_gb:.2f} GB per rank")
        if s.eval_top1 is not None:
            parts.append(f"eval top-1 {s.eval_top1:.3f}")
        if s.eval_perplexity is not None:
            parts.append(f"held-out perplexity {s.eval_perplexity:.2f}")
        lines.append("  training  " + ", ".join(parts))
    else:
        lines.append("  training  no training lines in the log")
    for cause in s.cause:
        lines.append(f"  {cause}")
    lines.append(f"  log       {s.log_path}")
    return "\n".join(lines)
