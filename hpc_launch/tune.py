"""`hpc-launch tune`: inside ONE job, the largest micro-batch that fits for each ZeRO stage /
offload choice (bisection on out of memory; on CPU against a peak-memory cap), then the fastest
fitting configuration by measured samples/s (tokens/s for language models). This module is the
submit side: the job (templates/body/tune.sh.j2, hpc_launch/tune_trials.py decides each trial),
then the report (a row per trial, out-of-memory ones included), the winner's DeepSpeed config and
the `submit` line that uses it."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .errors import SpecError
from .protocol import SCRIPT_DIR

_SWEPT = ("--zero", "--offload", "--micro-batch")


def parse_range(text: str) -> Tuple[int, int]:
    """`1-1024` (or one number: that micro-batch only)."""
    lo, dash, hi = text.partition("-")
    if not lo.strip().isdigit() or (dash and not hi.strip().isdigit()):
        raise SpecError(
            f"--micro-batch {text!r}: give a range LOW-HIGH of whole numbers", hint="e.g. --micro-batch 1-512"
        )
    low, high = int(lo), int(hi or lo)
    if low < 1 or high < low:
        raise SpecError(f"--micro-batch {text}: need 1 <= LOW <= HIGH", hint="e.g. --micro-batch 1-512")
    return low, high


def without_swept(args: List[str]) -> List[str]:
    """The training arguments less the flags each trial sets."""
    out: List[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _SWEPT:
            skip = True
        elif not arg.startswith(tuple(f + "=" for f in _SWEPT)):
            out.append(arg)
    return out


@dataclass
class Tuning:
    """What the tune job script is rendered with (render.render(pack=...))."""

    tune_id: str
    base_args: List[str]
    choices: List[Dict[str, Any]]  # {"zero": 2, "offload": "none"}
    lo: int
    hi: int
    mem_limit_gb: Optional[float]
    walltime_s: int

    @property
    def spec(self) -> Dict[str, Any]:
        return {
            "base_args": self.base_args,
            "choices": self.choices,
            "lo": self.lo,
            "hi": self.hi,
            "mem_limit_gb": self.mem_limit_gb,
        }

    @property
    def journal_relpath(self) -> str:
        return f"{SCRIPT_DIR}/{self.tune_id}.tune-journal"

    @property
    def ds_config_relpath(self) -> str:
        return f"{SCRIPT_DIR}/{self.tune_id}.ds_config.json"

    def context(self) -> Dict[str, Any]:
        from .pack import MIN_POINT_S, end_margin_s
        from .render import q

        return dict(
            tune_spec=q(json.dumps(self.spec, separators=(",", ":"))),
            tune_journal=q(self.journal_relpath),
            tune_ds_config=q(self.ds_config_relpath),
            tune_id=q(self.tune_id),
            pack_seconds=max(1, self.walltime_s - end_margin_s(self.walltime_s)),
            pack_min_point_s=MIN_POINT_S,
        )


@dataclass
class TunePlan:
    tuning: Tuning
    prepared: Any
    notes: List[str] = field(default_factory=list)


def plan(
    spec,
    zero: List[int],
    offload: List[str],
    micro: Tuple[int, int],
    *,
    mem_limit_gb: Optional[float] = None,
    profile_file=None,
    resume: Optional[str] = None,
) -> TunePlan:
    """The tune job, checked as a sweep's points are (each choice at the low micro-batch: the
    entrypoint's parser, batch arithmetic, DeepSpeed's validator, the estimators); the high end is
    what the trials find out."""
    from . import sweep as sw
    from .prepare import Prepared
    from .render import render

    if mem_limit_gb is not None and not mem_limit_gb > 0:
        raise SpecError(f"--mem-limit {mem_limit_gb}: must be more than 0 GiB", hint="e.g. --mem-limit 2.5")
    notes: List[str] = []
    values = sw.expand({"zero": zero, "offload": offload}, note=notes.append)
    lo, hi = micro
    swept = sw.plan(spec, [{**v, "micro_batch": lo} for v in values], profile_file=profile_file, pack=True)
    first = swept.points[0].prepared
    tune_id = resume or swept.sweep_id
    tuning = Tuning(
        tune_id=tune_id,
        base_args=without_swept(list(first.job.train_args)),
        choices=[{"zero": v["zero"], "offload": v["offload"]} for v in values],
        lo=lo,
        hi=hi,
        mem_limit_gb=mem_limit_gb,
        walltime_s=first.job.walltime_s,
    )
    stamp = swept.sweep_id[len(spec.name) + 1 :]
    script = render(first.job, stamp=stamp, pack=tuning)
    return TunePlan(tuning, Prepared(script=script, host=first.host, uploads=first.uploads), notes)


def trial_records(job: Any, journal: List[Dict[str, Any]]) -> List[Any]:
    """One record per trial, so the report has a row each (out-of-memory trials with state `oom`)."""
    import os

    from msgspec.structs import replace

    base_dir = os.path.dirname(job.script_path)
    out = []
    for t in journal:
        point = {"zero": t["zero"], "offload": t["offload"], "micro_batch": t["micro"]}
        out.append(
            replace(
                job,
                job_id=f"{t['job_id']}.t{t['trial']}",
                log_path=t["log"],
                script_path=f"{base_dir}/{t['script']}",
                state=t["state"],
                exit_code=t["exit_code"],
                extra={**(job.extra or {}), "point": point},
            )
        )
    return out


def summary(tuning: Tuning, journal: List[Dict[str, Any]], submit_line: Optional[str]) -> List[str]:
    """tune.md: per choice its largest fitting micro-batch and trials; the winner; the submit line."""
    from .tune_trials import largest_fitting, most_trials, trials_of, winner

    cap = f", peak memory cap {tuning.mem_limit_gb} GiB per rank" if tuning.mem_limit_gb else ""
    lines = [
        f"# tune {tuning.tune_id}",
        "",
        f"micro-batch {tuning.lo}-{tuning.hi}{cap}; at most {most_trials(tuning.lo, tuning.hi)} trials per choice.",
        "",
        "| ZeRO | offload | largest micro-batch that fits | trials | samples/s at it | tokens/s at it |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for i, c in enumerate(tuning.choices):
        tried = trials_of(journal, i)
        best = largest_fitting(tried)
        at = next((t for t in journal if t["choice"] == i and t["micro"] == best), {})
        lines.append(
            f"| {c['zero']} | {c['offload']} | {best if best is not None else 'none'} | {len(tried)} | "
            f"{_fmt(at.get('samples_per_sec'))} | {_fmt(at.get('tokens_per_sec'))} |"
        )
    best_trial = winner(journal)
    lines.append("")
    if best_trial:
        lines.append(
            f"fastest: zero={best_trial['zero']} offload={best_trial['offload']} micro_batch={best_trial['micro']} "
            f"({_fmt(best_trial.get('tokens_per_sec') or best_trial.get('samples_per_sec'))} "
            f"{'tokens' if best_trial.get('tokens_per_sec') else 'samples'}/s, trial {best_trial['trial']})"
        )
    else:
        lines.append("no trial fitted")
    if submit_line:
        lines += ["", "run it:", "", "```", submit_line, "```"]
    return lines


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def submit_line(spec, job: Any, tuning: Tuning, journal: List[Dict[str, Any]]) -> Optional[str]:
    """`hpc-launch submit` with the winner's flags and its DeepSpeed config."""
    from .tune_trials import trial_args, winner

    best = winner(journal)
    if not best:
        return None
    args = trial_args(tuning.spec, best, best["micro"]) + ["--ds-config", tuning.ds_config_relpath]
    line = ["hpc-launch", "submit", "-c", job.cluster]
    if spec.nodes:
        line += ["--nodes", str(spec.nodes)]
    if spec.gpus_per_node:
        line += ["--gpus-per-node", str(spec.gpus_per_node)]
    if spec.queue:
        line += ["--queue", spec.queue]
    line += ["--workdir", job.workdir, "--train-args", shlex.join(args)]
    return shlex.join(line)


def read_journal_of(job: Any, tuning: Tuning) -> List[Dict[str, Any]]:
    return read_journal_at(job, tuning.journal_relpath)


def read_journal_at(job: Any, relpath: str) -> List[Dict[str, Any]]:
    """The tune job's journal, wherever it ran, as its trials ([] before the first ended)."""
    from .jobs.connect import transport_for

    path = f"{job.workdir.rstrip('/')}/{relpath}"
    try:
        text = transport_for(job.host).read_from(path, 0, 1 << 22).decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def run(tp: TunePlan, spec, ui: Any, *, out: Optional[str] = None, dry_run: bool = False) -> int:
    """Submit the one job, wait for it, write the report, tune.md, the winner's ds_config.json."""
    from . import report as rp
    from .jobs import submit
    from .jobs.connect import transport_for
    from .records import JobStore
    from .sweep import watch

    for note in tp.notes:
        ui.say(note)
    if dry_run:
        ui.show_script(tp.prepared.script.text)
        ui.line(tp.prepared.submit_display())
        return 0
    store = JobStore()
    ui.announce_id(tp.tuning.tune_id)

    def tag(record) -> None:
        # "sweep": `status`, `cancel`, `report` take the tune's id; the journal: `report` reads the trials
        record.extra = {
            **(record.extra or {}),
            "tune": tp.tuning.tune_id,
            "sweep": tp.tuning.tune_id,
            "tune_journal": tp.tuning.journal_relpath,
        }
        store.update(record.cluster, record.job_id, extra=record.extra)
        ui.line(f"submitted tune {tp.tuning.tune_id} as job {record.job_id}; log: {record.log_path}")

    try:
        (job,) = watch(store, [submit(tp.prepared, store=store, on_recorded=tag)])
    except KeyboardInterrupt:
        ui.say(f"interrupted: the tune job keeps running. Stop: hpc-launch cancel {tp.tuning.tune_id}")
        raise
    journal = read_journal_of(job, tp.tuning)
    folder = Path(out or tp.tuning.tune_id)
    written, notes = rp.write_for(trial_records(job, journal) or [job], str(folder), f"tune {tp.tuning.tune_id}")
    line = submit_line(spec, job, tp.tuning, journal) if job.state == "done" else None
    if line:
        try:
            cfg = transport_for(job.host).read_from(f"{job.workdir.rstrip('/')}/{tp.tuning.ds_config_relpath}", 0)
            (folder / "ds_config.json").write_bytes(cfg)
            written.append(str(folder / "ds_config.json"))
        except FileNotFoundError:
            line = None
    (folder / "tune.md").write_text("\n".join(summary(tp.tuning, journal, line)) + "\n")
    written.append(str(folder / "tune.md"))
    for note in notes:
        ui.say(note)
    if job.state != "done":
        ui.say(f"the tune job ended {job.state}: run the same command with --resume {tp.tuning.tune_id} to go on")
    if line:
        ui.say("run the winner: " + line)
    ui.say("report: " + ", ".join(written))
    return 0 if line else 1
