"""What the terminal shows while following, and the end-of-job summary (issue 9), on a real log
of the README's main job (tests/golden/display/) and lines as the frameworks print them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from hpc_launch.display import LogFilter, format_summary, summarise
from hpc_launch.metrics_line import parse_line

GOLDEN = Path(__file__).parent / "golden" / "display"
MAIN_JOB = (GOLDEN / "local-main-job.log").read_text()

# What must never reach the terminal (the log file keeps it): one pattern per kind of chatter.
NOISE = [
    re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[(INFO|WARNING)\]"),  # DeepSpeed's logger
    re.compile(r"Unable to find hostfile"),
    re.compile(r"Setting accelerator to CPU"),
    re.compile(r"CUDA_VISIBLE_DEVICES"),
    re.compile(r"FutureWarning|DeprecationWarning|UserWarning"),
    re.compile(r"^\s+return func\(\*args, \*\*kwargs\)$"),  # the source line a warning quotes
    re.compile(r"built successfully|Building extension module|Time to load \w+ op"),
    re.compile(r"^\[hpc-train\] start-up: "),  # time stamps for bench/, not for people
]


def _noise(line: str) -> bool:
    return any(p.search(line) for p in NOISE)


def test_the_main_jobs_log_is_shown_without_the_frameworks_chatter():
    f = LogFilter()
    shown = f.feed(MAIN_JOB) + f.flush()
    assert not [ln for ln in shown.splitlines() if _noise(ln)]
    # everything that matters is there, in order: ours, the training lines, the eval
    kept = [ln for ln in MAIN_JOB.splitlines() if not _noise(ln)]
    assert shown.splitlines() == kept
    assert sum(1 for ln in shown.splitlines() if parse_line(ln)) == 11
    assert any(ln.startswith("[hpc-eval]") for ln in shown.splitlines())
    assert f.hidden == len(MAIN_JOB.splitlines()) - len(kept) > 15


def test_lines_split_across_reads_are_judged_whole():
    f = LogFilter()
    out = "".join(f.feed(MAIN_JOB[i : i + 7]) for i in range(0, len(MAIN_JOB), 7)) + f.flush()
    g = LogFilter()
    assert out == g.feed(MAIN_JOB) + g.flush()


def test_show_all_shows_everything():
    f = LogFilter(show_all=True)
    assert f.feed(MAIN_JOB) + f.flush() == MAIN_JOB


def test_errors_and_tracebacks_are_never_hidden():
    text = (
        "[2026-11-23 00:03:48,077] [ERROR] [engine.py:12:step] something broke\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size 64 != 32 * 1 * 1\n"
        "my own print from the user's script\n"
    )
    f = LogFilter()
    assert f.feed(text) == text


def test_op_builds_become_a_progress_note():
    f = LogFilter()
    shown = f.feed(
        "Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...\n"
        "Emitting ninja build file /root/.cache/torch_extensions/py311_cpu/cpu_adam/build.ninja...\n"
        "Building extension module cpu_adam...\n"
        "[1/3] c++ -MMD -MF cpu_adam.o.d -DTORCH_EXTENSION_NAME=cpu_adam -c cpu_adam.cpp -o cpu_adam.o\n"
        "Loading extension module cpu_adam...\n"
        "Time to load cpu_adam op: 31.4 seconds\n"
    )
    assert shown == "" and f.note and "building its ops" in f.note
    f.feed("[hpc-train] step=10 loss=1.0\n")
    assert f.note is None
    assert f.feed("[hpc-train] starting DeepSpeed: process group, engine and ops (built once per environment)\n") == ""
    assert "starting DeepSpeed" in f.note


def test_summary_figures_are_the_logs_own():
    metric_lines = [parse_line(ln) for ln in MAIN_JOB.splitlines() if ln.startswith("[hpc-train]")]
    s = summarise(MAIN_JOB, state="done", exit_code=0, log_path="/w/train.o1", submit_time=None, end_time=None)
    assert s.metrics["step"] == metric_lines[-1]["step"] == 110
    assert s.metrics["loss"] == metric_lines[-1]["loss"]
    assert s.metrics["avg_samples_per_sec"] == metric_lines[-1]["avg_samples_per_sec"]
    assert s.peak_mem_gb == max(m["mem_peak_gb"] for m in metric_lines)
    top1 = float(re.search(r"^\[hpc-eval\] top1=([\d.]+)", MAIN_JOB, re.M).group(1))
    assert s.eval_top1 == top1
    wall = float(re.search(r"wall_s=([\d.]+)", MAIN_JOB).group(1))
    assert s.training_s == wall
    block = format_summary(s, "1")
    assert f"final loss {metric_lines[-1]['loss']:.4f}" in block and "110 steps" in block
    assert f"eval top-1 {top1:.3f}" in block and "log       /w/train.o1" in block


def test_summary_accounts_for_every_second_eval_and_the_end_included():
    log = (
        "[hpc-launch] job 7 on n1 at 2026-11-23T00:00:10+0000, 1 node(s) x 2 rank(s), script t.sh\n"
        "training finished: steps=5 wall_s=30.0 ended_at=1795392070\n"
        "[hpc-eval] top1=0.9750 top5=1.0000 samples=360 split=val step=5 time_s=2.5\n"
    )
    s = summarise(log, state="done", exit_code=0, log_path="l", submit_time=1795392000.0, end_time=1795392076.0)
    assert (s.queued_s, s.startup_s, s.training_s, s.eval_s, s.end_s, s.total_s) == (10.0, 30.0, 30.0, 2.5, 3.5, 76.0)
    assert s.queued_s + s.startup_s + s.training_s + s.eval_s + s.end_s == s.total_s
    block = format_summary(s, "7")
    assert "training 30.0 s, eval 2.5 s, the end 3.5 s (ranks exiting, the script's end, noticing it)" in block
    assert s.eval_top1 == 0.975


def test_the_end_splits_into_exiting_and_noticing_by_the_scripts_own_end_time():
    """The exit file's time (the cluster's clock) splits the end: ranks and launcher exiting
    (DeepSpeed's launcher polls its ranks every second) and the follower noticing it; the
    prologue's t= and ended_at's milliseconds make the split finer than the log's 1-s dates."""
    log = (
        "[hpc-launch] job 7 on n1 at 2026-11-23T00:00:10+0000, 1 node(s) x 2 rank(s), t=1795392010.400000, "
        "script t.sh\n"
        "training finished: steps=5 wall_s=30.0 ended_at=1795392070.600\n"
        "[hpc-eval] top1=0.9750 top5=1.0000 samples=360 split=val step=5 time_s=0.5\n"
    )
    s = summarise(
        log,
        state="done",
        exit_code=0,
        log_path="l",
        submit_time=1795392000.0,
        end_time=1795392073.5,
        script_end=1795392073.1,
    )
    assert round(s.startup_s, 3) == 30.2 and round(s.end_s, 3) == 2.4 and round(s.exiting_s, 3) == 2.0
    assert "the end 2.4 s (ranks and launcher exiting 2.0 s, noticing it 0.4 s)" in format_summary(s, "7")
    older = summarise(log, state="done", exit_code=0, log_path="l", submit_time=1795392000.0, end_time=1795392073.5)
    assert older.exiting_s is None and "(ranks exiting, the script's end, noticing it)" in format_summary(older, "7")


def test_summary_splits_the_time_into_queue_start_up_and_training():
    log = (
        "[hpc-launch] job 7 on n1 at 2026-11-23T00:00:10+0000, 1 node(s) x 2 rank(s), script t.sh\n"
        "[hpc-train] step=5 loss=1.0 avg_samples_per_sec=10.0 mem_peak_gb=1.5\n"
        "training finished: steps=5 wall_s=30.0 ended_at=1795392070\n"
    )
    # job start 00:00:10 UTC = 1795392010; training ended 60 s later after 30 s of training
    s = summarise(log, state="done", exit_code=0, log_path="l", submit_time=1795392000.0, end_time=1795392075.0)
    assert s.queued_s == 10.0 and s.startup_s == 30.0 and s.training_s == 30.0 and s.total_s == 75.0
    assert "queued 10.0 s, start-up 30.0 s (launcher, framework init, op builds), training 30.0 s" in format_summary(
        s, "7"
    )


@pytest.mark.train
def test_the_main_job_shows_a_clean_terminal_and_a_summary_while_the_log_keeps_everything(hpc_launch_bin, tmp_path):
    """The README's main job for real: what the terminal got vs. what the log file holds."""
    env = dict(os.environ, HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"))
    r = subprocess.run(
        [hpc_launch_bin, "submit", "--cluster", "local", "--nodes", "1", "--follow"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    job_id = r.stdout.splitlines()[0].strip()
    log = (tmp_path / f"train.o{job_id}").read_text()
    terminal = r.stdout + r.stderr
    assert not [ln for ln in terminal.splitlines() if _noise(ln)], terminal
    assert [ln for ln in log.splitlines() if _noise(ln)], "the log lost the frameworks' lines"
    shown_metrics = [ln for ln in r.stdout.splitlines() if parse_line(ln)]
    assert shown_metrics == [ln for ln in log.splitlines() if parse_line(ln)]
    last = parse_line(shown_metrics[-1])
    assert f"{int(last['step'])} steps, final loss {last['loss']:.4f}" in r.stderr
    assert f"job {job_id}: done, exit code 0" in r.stderr and "start-up" in r.stderr
    summary = subprocess.run(
        [hpc_launch_bin, "logs", job_id, "--summary"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert f"final loss {last['loss']:.4f}" in summary.stdout


def test_the_entrypoints_start_up_stamps_stay_in_the_log():
    # as the entrypoint prints them (README's main job, 2026-11-23); bench/bench_launch.py reads them from the log
    stamps = (
        "[hpc-train] start-up: process=1795434486.610 imported=1795434490.778 process_group=1795434543.482 "
        "deepspeed=1795434546.988 first_step=1795434547.015\n"
    )
    node = "[hpc-train] node vm: rank 0 of 2, pid 9147\n"
    f = LogFilter()
    assert f.feed(node + stamps) == node and f.hidden == 1
