"""`sweep --pack` (issue 32): every point of a sweep inside ONE job, one after another, each with
its own log, time limit and journal line; a failing or hanging point does not stop the others; a
cut packed sweep resumed runs only the points that did not finish.

These run the real packed job script on the local cluster (no scheduler: the job is a background
bash) with the launch line replaced by a fake trainer (a user template override, as a site would
replace one): it prints the entrypoint's lines from its arguments, fails for --micro-batch 13 and
hangs for --micro-batch 17. Real trainings: tests/test_pack_train.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpc_launch import render
from hpc_launch import sweep as sw
from hpc_launch.spec import JobSpec

pytestmark = pytest.mark.sweep

# the entrypoint's lines (hpc_launch/train/trainer.py) as the report reads them, from the point's arguments
FAKE_LAUNCH = r"""bash -c '
zero=? micro=?
while [ $# -gt 0 ]; do case $1 in --zero) zero=$2; shift ;; --micro-batch) micro=$2; shift ;; esac; shift; done
echo "start $micro" >>"$PWD/ran"
case $micro in 13) echo "RuntimeError: fake trainer failed" >&2; exit 1 ;; 17) exec sleep 600 ;; esac
sleep "${FAKE_SECONDS:-0}"
echo "training smallcnn on digits: world=2 (deepspeed) zero=$zero offload=none precision=fp32 micro=$micro" \
  "accum=1 global=$((micro * 2)) steps=2"
echo "[hpc-train] step=2 epoch=0 loss=2.$micro lr=0.001 samples_per_sec=$micro.0 avg_samples_per_sec=$micro.0" \
  "mem_alloc_gb=0.1 mem_peak_gb=0.2 world_size=2"
echo "training finished: steps=2 wall_s=0.4"
echo "end $micro" >>"$PWD/ran"
' fake {{ train_args }}
"""


@pytest.fixture
def fake_trainer(monkeypatch):
    import os

    override = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body" / "launch"
    override.mkdir(parents=True)
    (override / "deepspeed.sh.j2").write_text(FAKE_LAUNCH)
    monkeypatch.setattr(render, "_ENV", None)  # the environment finds the override
    monkeypatch.setattr(sw, "check_points", lambda points: None)  # no torch: the fake trains nothing
    yield
    render._ENV = None


class Said:
    def __init__(self):
        self.lines: list = []
        self.ids: list = []

    def ui(self) -> sw.Run:
        return sw.Run(say=self.lines.append, line=self.lines.append, announce_id=self.ids.append)


def _spec(tmp_path, walltime: str, **more) -> JobSpec:
    return JobSpec(
        cluster="local",
        name="pk",
        workdir=str(tmp_path),
        walltime=walltime,
        train_args=["--model", "smallcnn", "--data", "digits", "--steps", "2", "--zero", "2"],
        **more,
    )


def _csv(path: Path) -> list:
    import csv

    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_a_packed_sweep_is_one_job_and_a_failing_or_hanging_point_does_not_stop_the_others(tmp_path, fake_trainer):
    from hpc_launch.records import JobStore

    said = Said()
    points = sw.expand({"micro_batch": [17, 13, 8]})
    # 29 s walltime less a 10 s margin: the hanging point first, stopped at its 19 / 3 = 6 s; then
    # the failing one gets (19 - spent) / 2 and the last one the rest (each more than MIN_POINT_S)
    code = sw.run(_spec(tmp_path, "0:00:29"), points, said.ui(), pack=True, out=str(tmp_path / "rep"))
    assert code == 1  # not every point done
    sweep_id = said.ids[0]
    jobs = [r for r in JobStore().list() if (r.extra or {}).get("sweep") == sweep_id]
    assert len(jobs) == 1 and jobs[0].extra["pack"]["points"][2]["args"][-2:] == ["--micro-batch", "8"]
    rows = _csv(tmp_path / "rep" / "report.csv")
    assert [r["state"] for r in rows] == ["timeout", "failed", "done"]
    assert [r["job_id"] for r in rows] == [f"{jobs[0].job_id}.p{i}" for i in (1, 2, 3)]
    assert rows[1]["exit_code"] == "1" and "fake trainer failed" in Path(rows[1]["log"]).read_text()
    assert "outlived its limit" in Path(rows[0]["log"]).read_text()
    assert rows[2]["configuration"] == "zero=2 offload=none precision=fp32 micro_batch=8"
    assert (rows[2]["samples_per_sec"], rows[2]["ranks"], rows[2]["steps"]) == ("8.0", "2", "2")
    assert (tmp_path / "ran").read_text().split("\n")[:3] == ["start 17", "start 13", "start 8"]
    from test_faults import _processes_in

    # nothing of the hanging point is left (in its work dir: the machine's other `sleep 600`s are not its)
    assert not [args for _, args in _processes_in(tmp_path) if "sleep 600" in args]


def test_a_cut_packed_sweep_resumed_runs_only_the_points_that_did_not_finish(tmp_path, fake_trainer, monkeypatch):
    from hpc_launch.jobs import cancel_ident
    from hpc_launch.pack import journal_relpath
    from hpc_launch.records import JobStore

    said = Said()
    points = sw.expand({"micro_batch": [4, 5, 6, 7]})
    spec = _spec(tmp_path, "0:10:00", env={"FAKE_SECONDS": "2"})
    assert sw.run(spec, points, said.ui(), pack=True, no_wait=True) == 0
    sweep_id = said.ids[0]
    journal = tmp_path / journal_relpath(sweep_id)
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    cancel_ident(JobStore(), sweep_id)  # cut while the second point runs: the walltime's kill, sooner
    time.sleep(1)
    assert journal.read_text().count("\n") == 1
    first_job = [r for r in JobStore().list() if (r.extra or {}).get("sweep") == sweep_id][0]
    # as an earlier job would have left them: point 3 failed (a result: not run again), point 4
    # stopped at its limit (143: time, not a result: it gets another try)
    args = {p.index: " ".join(p.train_args) for p in sw.plan(spec, points, pack=True).points}
    (tmp_path / "old.p3").write_text("RuntimeError: boom\n")
    with journal.open("a") as fh:
        fh.write(f"point\t2\t1\told\tx.sh\t{tmp_path / 'old.p3'}\t{args[2]}\n")
        fh.write(f"point\t3\t143\told\tx.sh\t{tmp_path / 'old.p4'}\t{args[3]}\n")

    again = Said()
    code = sw.run(
        _spec(tmp_path, "0:10:00", env={"FAKE_SECONDS": "0"}),
        points,
        again.ui(),
        pack=True,
        resume=sweep_id,
        out=str(tmp_path / "rep"),
    )
    assert code == 1 and again.ids == [sweep_id]  # point 3 stays failed
    ran = (tmp_path / "ran").read_text().splitlines()
    assert ran.count("start 4") == 1 and ran.count("end 4") == 1  # the finished point is not run again
    assert "start 6" not in ran  # nor the failed one
    assert ran.count("end 5") == 1 and ran.count("end 7") == 1
    rows = _csv(tmp_path / "rep" / "report.csv")
    assert [r["state"] for r in rows] == ["done", "done", "failed", "done"]
    assert rows[0]["job_id"] == f"{first_job.job_id}.p1"  # its row is the first job's run
    assert rows[1]["job_id"] != f"{first_job.job_id}.p2" and rows[2]["job_id"] == "old.p3"
    assert len(journal.read_text().splitlines()) == 5


def test_a_packed_sweep_is_refused_when_its_points_ask_for_different_nodes(tmp_path):
    from hpc_launch.errors import SpecError

    with pytest.raises(SpecError, match="--pack: the points ask for different resources"):
        sw.plan(JobSpec(cluster="slurm", login="local", name="pk"), sw.expand({"nodes": [1, 2]}), pack=True)
    with pytest.raises(SpecError, match="--resume continues a packed sweep"):
        sw.plan(_spec(tmp_path, "0:10:00"), sw.expand({"zero": [1]}), resume="pk-1")


def test_a_packed_slurm_sweep_is_one_job_with_no_array_flag(tmp_path, fake_trainer):
    plan = sw.plan(
        JobSpec(cluster="slurm", login="local", name="pk", walltime="1:00:00"),
        sw.expand({"zero": [1, 2, 3]}),
        pack=True,
    )
    (sub,) = plan.submissions
    assert sub.packed and not sub.array and len(sub.points) == 3
    assert not any(a.startswith("--array") for a in sub.prepared.script.submit_argv)
    text = sub.prepared.script.text
    assert "HPC_LAUNCH_PACK_END=$(( $(date +%s) + 3480 ))" in text  # 1 h less a 120 s margin
    assert "one packed job of 3 points" in sw.describe(plan)
