"""`hpc-launch tune` (issue 32): bisection on out of memory per ZeRO stage / offload choice inside
ONE job, every trial a report row (out-of-memory ones `oom`), a journal a cut run resumes from,
the winner as a DeepSpeed config and a `submit` line.

The job runs for real on the local cluster with the launch line replaced by a fake trainer (a user
template override): its rank's peak memory is micro-batch x 10 MB plus 100 MB per ZeRO stage below
3, its samples/s grows with the micro-batch up to 24 and falls after. Real trainings:
tests/test_tune_train.py."""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import pytest

from hpc_launch import render
from hpc_launch import sweep as sw
from hpc_launch import tune as tn
from hpc_launch import tune_trials as tt
from hpc_launch.spec import JobSpec

pytestmark = pytest.mark.sweep


@pytest.mark.parametrize("lo,hi", [(1, 64), (1, 1000), (3, 5), (7, 7), (1, 2)])
def test_bisection_finds_the_largest_fitting_micro_batch_in_at_most_log2_range_plus_2_trials(lo, hi):
    for limit in range(lo - 1, hi + 2):  # nothing fits .. everything fits
        tried: dict = {}
        while (m := tt.next_micro(tried, lo, hi)) is not None:
            tried[m] = "done" if m <= limit else "oom"
        expected = None if limit < lo else min(limit, hi)
        assert tt.largest_fitting(tried) == expected, (limit, tried)
        assert len(tried) <= (1 if hi == lo else math.ceil(math.log2(hi - lo)) + 2)


def test_a_trial_is_oom_when_it_says_so_or_goes_above_the_cap():
    step = (
        "[hpc-train] step=2 epoch=0 loss=2.3 samples_per_sec=9.0 avg_samples_per_sec=8.0 mem_peak_gb={} world_size=2\n"
    )
    assert tt.classify(0, step.format("0.5"), 1.0)[0] == "done"
    assert tt.classify(0, step.format("1.5"), 1.0) == (
        "oom",
        {"samples_per_sec": 8.0, "tokens_per_sec": None, "peak_gb": 1.5},
    )
    assert tt.classify(1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", None)[0] == "oom"
    assert tt.classify(1, "RuntimeError: something else", None)[0] == "failed"
    assert (
        tt.classify(143, "[hpc-launch] error: this training outlived its limit of 9 s: stopped", None)[0] == "timeout"
    )


FAKE_LAUNCH = r"""bash -c '
zero=? micro=? off=?
while [ $# -gt 0 ]; do
  case $1 in --zero) zero=$2; shift ;; --micro-batch) micro=$2; shift ;; --offload) off=$2; shift ;; esac; shift
done
echo "trial $zero $micro" >>"$PWD/ran"
sleep "${FAKE_SECONDS:-0}"
peak=$(( micro * 10 + (3 - zero) * 100 ))
speed=$(( micro <= 24 ? micro * 10 : 480 - micro * 10 ))
gb=$((peak / 1000)).$(printf %03d $((peak % 1000)))
echo "training smallcnn on synthetic: world=2 (deepspeed) zero=$zero offload=$off precision=fp32 micro=$micro" \
  "accum=1 global=$((micro * 2)) steps=2"
echo "[hpc-train] step=2 epoch=0 loss=2.0 lr=0.001 samples_per_sec=$speed.0 avg_samples_per_sec=$speed.0" \
  "mem_alloc_gb=0.1 mem_peak_gb=$gb world_size=2"
echo "training finished: steps=2 wall_s=0.4"
' fake {{ train_args }}
"""


@pytest.fixture
def fake_trainer(monkeypatch):
    import os

    override = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body" / "launch"
    override.mkdir(parents=True)
    (override / "deepspeed.sh.j2").write_text(FAKE_LAUNCH)
    monkeypatch.setattr(render, "_ENV", None)
    monkeypatch.setattr(sw, "check_points", lambda points: None)  # no torch before submitting
    yield
    render._ENV = None


def _spec(tmp_path, **more) -> JobSpec:
    return JobSpec(
        cluster="local",
        name="tn",
        workdir=str(tmp_path),
        walltime="0:10:00",
        train_args=["--model", "smallcnn", "--data", "synthetic", "--steps", "2", "--micro-batch", "99"],
        **more,
    )


class Said:
    def __init__(self):
        self.lines: list = []
        self.ids: list = []

    def ui(self) -> sw.Run:
        return sw.Run(say=self.lines.append, line=self.lines.append, announce_id=self.ids.append)


def _rows(path: Path) -> list:
    with open(path) as fh:
        return list(csv.DictReader(fh))


@pytest.mark.train  # the winner's DeepSpeed config comes from the real entrypoint (imports DeepSpeed once)
def test_tune_bisects_each_stage_in_one_job_and_writes_the_winner(tmp_path, fake_trainer):
    from hpc_launch.records import JobStore

    said = Said()
    # cap 0.5 GiB: ZeRO-1 fits up to micro 30 (300 MB + 200), ZeRO-2 up to 40; the fastest is micro 24
    tp = tn.plan(_spec(tmp_path), [1, 2], ["none"], (1, 64), mem_limit_gb=0.5)
    code = tn.run(tp, _spec(tmp_path), said.ui(), out=str(tmp_path / "rep"))
    assert code == 0, said.lines
    jobs = JobStore().list()
    assert len(jobs) == 1  # every trial in one job
    rows = _rows(tmp_path / "rep" / "report.csv")
    ran = (tmp_path / "ran").read_text().splitlines()
    assert len(rows) == len(ran)
    for zero, largest in ((1, 30), (2, 40)):
        mine = [r for r in rows if r["configuration"].startswith(f"zero={zero} ")]
        assert 0 < len(mine) <= math.ceil(math.log2(63)) + 2
        fits = [int(r["configuration"].rsplit("=", 1)[1]) for r in mine if r["state"] == "done"]
        assert max(fits) == largest
        assert any(r["state"] == "oom" for r in mine)  # an out-of-memory trial is a row, not a failure
    tune_md = (tmp_path / "rep" / "tune.md").read_text()
    assert "| 1 | none | 30 |" in tune_md and "| 2 | none | 40 |" in tune_md
    assert "fastest: zero=" in tune_md and "micro_batch=24" in tune_md
    import json

    cfg = json.loads((tmp_path / "rep" / "ds_config.json").read_text())
    assert cfg["train_micro_batch_size_per_gpu"] == 24
    line = next(s for s in said.lines if s.startswith("run the winner: "))
    assert "--micro-batch 24" in line and "--ds-config .hpc-launch/" in line and "--micro-batch 99" not in line
    # `hpc-launch report TUNE_ID` later: the same row per trial
    from hpc_launch.report import report_jobs

    report_jobs([said.ids[0]], out=str(tmp_path / "again"))
    assert _rows(tmp_path / "again" / "report.csv") == rows


@pytest.mark.train  # the job's last step, the winner's DeepSpeed config, imports DeepSpeed
def test_a_cut_tune_resumed_does_not_run_a_trial_again(tmp_path, fake_trainer, monkeypatch):
    import threading

    from hpc_launch.jobs import cancel_ident
    from hpc_launch.records import JobStore

    spec = _spec(tmp_path, env={"FAKE_SECONDS": "1"})
    tp = tn.plan(spec, [3], ["none"], (1, 16), mem_limit_gb=0.1)  # ZeRO-3: fits up to micro 10
    journal = tmp_path / tp.tuning.journal_relpath

    def cut() -> None:
        deadline = time.monotonic() + 60
        while not (journal.exists() and journal.read_text().count("\n") >= 2) and time.monotonic() < deadline:
            time.sleep(0.2)
        cancel_ident(JobStore(), str(JobStore().list()[0].job_id))

    threading.Thread(target=cut, daemon=True).start()
    tn.run(tp, spec, Said().ui(), out=str(tmp_path / "first"))
    done_before = journal.read_text().count("\n")
    assert 2 <= done_before < 6

    again = tn.plan(_spec(tmp_path), [3], ["none"], (1, 16), mem_limit_gb=0.1, resume=tp.tuning.tune_id)
    monkeypatch.setattr(tn, "submit_line", lambda *a: None)  # no DeepSpeed here: the config step is the test above
    tn.run(again, _spec(tmp_path), Said().ui(), out=str(tmp_path / "rep"))
    trials = [t["micro"] for t in tt.read_journal(str(journal))]
    assert (
        len(trials) == len(set(trials)) and tt.largest_fitting({m: "done" if m <= 10 else "oom" for m in trials}) == 10
    )
    ran = (tmp_path / "ran").read_text().splitlines()
    finished_first = ran[:done_before]
    assert all(ran.count(line) == 1 for line in finished_first)  # a finished trial is not run again
    assert len(_rows(tmp_path / "rep" / "report.csv")) == len(trials)


def test_bad_tune_options_are_one_line_errors():
    from hpc_launch.errors import SpecError

    for bad in ("64-1", "x", "0-4", "1-"):
        with pytest.raises(SpecError):
            tn.parse_range(bad)
    assert tn.parse_range("8") == (8, 8)
    assert tn.without_swept(["--model", "m", "--zero", "2", "--micro-batch=4", "--offload", "none"]) == ["--model", "m"]
