"""A Slurm job preempted in a PreemptMode=REQUEUE partition whose script ends inside the GraceTime
(its ranks saved on the SIGTERM) asks for its requeue itself: Slurm 22.05 would end it COMPLETED
(tests/e2e/test_preempt_e2e.py shows both on the testbed). Here: the job script's function against
a stand-in `scontrol` printing what the testbed's printed, and the summary's requeue line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hpc_launch.dialects.slurm import Slurm
from hpc_launch.follow import requeue_lines
from hpc_launch.states import JobState

# `scontrol -o show job 813` on the testbed, after a job of `urgent` preempted it (cut after
# PreemptTime; the state as it read while the grace ran)
SHOW_JOB = (
    "JobId=813 JobName=victim UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294900992 Nice=0 "
    "Account=root QOS=normal JobState={state} Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "Reboot=0 ExitCode=0:0 RunTime=00:00:07 TimeLimit=00:10:00 TimeMin=N/A SubmitTime=2026-11-27T11:03:03 "
    "EligibleTime=2026-11-27T11:03:03 AccrueTime=2026-11-27T11:03:03 StartTime=2026-11-27T11:03:04 "
    "EndTime=2026-11-27T11:03:30 Deadline=N/A PreemptEligibleTime=2026-11-27T11:03:04 PreemptTime={preempt} "
    "SuspendTime=None SecsPreSuspend=0 Partition=preempt"
)


def _run(tmp_path: Path, state: str, preempt: str, requeue_rc: int = 0) -> subprocess.CompletedProcess:
    fake = tmp_path / "scontrol"
    fake.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = requeue ]; then echo "$*" >> {tmp_path}/requeued; exit {requeue_rc}; fi\n'
        f"echo '{SHOW_JOB.format(state=state, preempt=preempt)}'\n"
    )
    fake.chmod(0o755)
    script = f"{Slurm.preempted_shell}\nSLURM_JOB_ID=813\nhpc_launch_requeue_if_preempted\n"
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}
    )


def test_a_run_preempted_while_still_running_asks_slurm_for_its_requeue(tmp_path):
    r = _run(tmp_path, "RUNNING", "2026-11-27T11:03:10")
    assert r.returncode == 0
    assert (tmp_path / "requeued").read_text() == "requeue 813\n"
    assert r.stdout == (
        "[hpc-launch] preempted at 2026-11-27T11:03:10: Slurm requeues job 813 "
        "(its next run resumes from what this one saved)\n"
    )


@pytest.mark.parametrize(
    "state, preempt",
    [
        ("RUNNING", "None"),  # never preempted: its end is its own
        ("CANCELLED", "None"),  # scancel / hpc-launch cancel: never requeued
        ("CANCELLED", "2026-11-27T11:03:10"),  # cancelled while in its grace: still a cancel
        ("COMPLETING", "2026-11-27T11:03:10"),  # the grace ran out: Slurm requeues it itself
    ],
)
def test_a_run_not_preempted_or_already_ended_by_slurm_is_left_alone(tmp_path, state, preempt):
    r = _run(tmp_path, state, preempt)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    assert not (tmp_path / "requeued").exists()


def test_a_job_slurm_will_not_requeue_says_so(tmp_path):
    r = _run(tmp_path, "RUNNING", "2026-11-27T11:03:10", requeue_rc=1)
    assert r.returncode == 0 and r.stdout == ""
    assert "preempted at 2026-11-27T11:03:10, and Slurm would not requeue job 813" in r.stderr


def test_every_slurm_job_script_calls_it_as_it_exits():
    golden = (Path(__file__).parent / "golden" / "scripts" / "slurm.sh").read_text()
    exit_fn = golden[golden.index("hpc_launch_exit() {") : golden.index("trap 'hpc_launch_exit")]
    assert "hpc_launch_requeue_if_preempted || true" in exit_fn
    assert "hpc_launch_requeue_if_preempted() {" in golden


LOG = (
    "[hpc-launch] job 800 on pod1 at 2026-11-27T11:01:42+0000, 2 node(s) x 1 rank(s)\n"
    "[hpc-launch] preempted at 2026-11-27T11:01:48: Slurm requeues job 800 "
    "(its next run resumes from what this one saved)\n"
    "[hpc-launch] job 800 on pod1 at 2026-11-27T11:02:14+0000, 2 node(s) x 1 rank(s)\n"
    "[hpc-launch] run 2 of job 800: Slurm requeued it\n"
)


def test_the_summary_counts_the_requeues_and_names_the_preemption():
    assert requeue_lines(LOG, JobState.DONE) == [
        "  requeued  1 time: preempted at 2026-11-27T11:01:48 (Slurm), run 2 ran to the end"
    ]
    waiting = LOG.split("[hpc-launch] job 800 on pod1 at 2026-11-27T11:02")[0]
    assert requeue_lines(waiting, JobState.QUEUED) == [
        "  requeued  preempted at 2026-11-27T11:01:48 (Slurm): waiting to run again"
    ]
    node_lost = "[hpc-launch] run 3 of job 9: Slurm requeued it\n"
    assert requeue_lines(node_lost, JobState.FAILED) == ["  requeued  2 times: by the scheduler, run 3 ended failed"]
    assert requeue_lines("[hpc-launch] job 800 on pod1\n", JobState.DONE) == []
