"""Trainings longer than a walltime (issue 10), on the real testbed: a chain whose links stop
themselves before their walltime at a complete checkpoint and resume in the next link, compared
step by step with an unbroken run. (A Slurm job requeued under it, after a node died:
tests/e2e/test_bad_hosts_e2e.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli

pytestmark = [pytest.mark.scheduler, pytest.mark.chain]

# 10-40 s of training on the testbed (fewer steps would let a quiet machine's first link finish
# within the 10 s that --stop-before leaves it); each link gets ~55 % of it (see _unbroken): two
# links train, the others find the training complete and leave at once (4 links: room for links
# that train at half the reference run's speed)
STEPS = 600
LINKS = 4
WALLTIME_S = 60
TRAIN = (
    f"--model smallcnn --data synthetic --steps {STEPS} --micro-batch 8 --log-every 20 --checkpoint-every 100 --no-eval"
)
LOSS = re.compile(r"^\[hpc-train\] step=(\d+) .*?loss=([\d.]+)", re.M)


def _losses(text: str) -> dict:
    return {int(s): float(v) for s, v in LOSS.findall(text)}


def _unbroken(cli, cluster, workdir):
    """The reference run, and the --stop-before that gives a link about 55 % of its training:
    the testbed trains 15 to 50 steps/s by the machine's load, so a fixed window would let one
    link do everything on a quiet machine, or need more links than the chain has on a busy one."""
    r = cli(
        "submit",
        "--cluster",
        cluster,
        "--nodes",
        "2",
        "--name",
        "whole",
        *SIDE_QUEUE,
        "--walltime",
        "10m",
        "--follow",
        "--train-args",
        TRAIN + " --checkpoint-dir whole-ckpt",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    job = r.stdout.splitlines()[0].strip()
    log = workdir / f"whole.o{job.split('.')[0]}"
    text = log.read_text()
    began = float(re.search(r"^\[hpc-launch\] job .* t=([\d.]+)", text, re.M).group(1))
    first_step = float(re.search(r"first_step=([\d.]+)", text).group(1))
    op_build = float(
        re.search(r"DeepSpeed ready in ([\d.]+) s", text).group(1)
    )  # a cold op build: once per environment
    ended = Path(f"{log}.exitcode").stat().st_mtime
    start_up = first_step - began - op_build + 3.0
    window = start_up + 0.55 * (ended - first_step)
    stop_before = int(min(50, max(10, WALLTIME_S - window)))
    return _losses(text), stop_before


# On Slurm only: what a link does at its walltime is the job script's and the trainer's, the same
# under every scheduler; the PBS chain (its depend flags, links through the qsub wrapper, each
# running the submitted code) is the capsule test below, which costs 3 s instead of 130.
@pytest.mark.side
@pytest.mark.parametrize("cluster, path_first", [("tb-slurm", None)])
def test_a_chain_resumes_each_link_where_the_walltime_stopped_the_last(
    hpc_launch_bin, testbed, shared_workdir, cluster, path_first
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed[path_first] if path_first else None)
    whole, stop_before = _unbroken(cli, cluster, shared_workdir)
    assert max(whole) == STEPS
    # 1 minute of walltime, stopping early enough that each link trains under half the run
    r = cli(
        "submit",
        "--cluster",
        cluster,
        "--nodes",
        "2",
        "--name",
        "links",
        *SIDE_QUEUE,
        "--walltime",
        f"{WALLTIME_S}s",
        "--stop-before",
        f"{stop_before}s",
        "--chain",
        str(LINKS),
        "--follow",
        "--train-args",
        TRAIN,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ids = [
        j["job_id"]
        for j in sorted(
            (j for j in json.loads(cli("list", "--json", check=True).stdout) if j["name"] == "links"),
            key=lambda j: j["submit_time"],
        )
    ]
    assert len(ids) == LINKS
    for job in ids:  # the follow ends with the link that finished; the later ones end at once after it
        cli.wait_state(job, {"done", "timeout", "failed", "cancelled"}, timeout=300)
    links = [json.loads(cli("status", "--json", job, check=True).stdout)[0] for job in ids]
    logs = [(shared_workdir / f"links.o{j['job_id'].split('.')[0]}").read_text() for j in links]
    stopped = [int(m.group(1)) for text in logs for m in re.finditer(r"stopped for time at step (\d+)", text)]
    resumed = [int(m.group(1)) for text in logs for m in re.finditer(r"resumed from .* at step (\d+)", text)]
    assert stopped, "no link was stopped by its walltime: the test proved nothing"
    assert resumed[: len(stopped)] == stopped  # each link starts exactly where the last one stopped
    states = [j["state"] for j in links]
    first_done = states.index("done")
    assert all(s == "timeout" for s in states[:first_done]) and all(j["exit_code"] == 75 for j in links[:first_done])
    assert all(s == "done" for s in states[first_done:])  # later links find the training complete
    assert any("training already complete" in text for text in logs[first_done + 1 :]) or first_done == LINKS - 1
    chained = {}
    for text in logs:
        chained.update(_losses(text))
    assert max(chained) == STEPS
    # the same training as the unbroken run, step for step (no step recomputed or skipped)
    assert sorted(chained) == sorted(whole)
    for step, loss in whole.items():
        assert abs(chained[step] - loss) < 2e-4, (step, chained[step], loss)


@pytest.mark.parametrize(
    "cluster, path_first",
    [("tb-slurm", None), ("tb-pbs-mpi", "HPC_TESTBED_PBS_BIN"), pytest.param("tb-sge", None, marks=pytest.mark.beside)],
)
def test_every_link_of_a_chain_runs_the_submitted_code_however_the_files_change(
    hpc_launch_bin, testbed, shared_workdir, cluster, path_first
):
    """The job capsule: the script and its neighbour are edited once the chain is submitted (before
    its first link imports anything); both links still run what was submitted, and the second
    link's start finds what the first found (hpc-launch show)."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed[path_first] if path_first else None)
    code = shared_workdir / "code"
    code.mkdir()
    (code / "train.py").write_text(
        "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.1)\n"
        # one string, one write: both ranks print at once (they wake on the same file)
        "import helper\nprint(f'capsule says {helper.X} script v1', flush=True)\n"
    )
    (code / "helper.py").write_text("X = 'submitted'\n")
    r = cli(
        "submit",
        "--cluster",
        cluster,
        "--nodes",
        "1",
        "--name",
        "cap",
        "--walltime",
        "5m",
        "--chain",
        "2",
        "--script",
        "code/train.py",
        "--train-args",
        "",
        check=True,
    )
    first = r.stdout.strip().splitlines()[0]
    (code / "helper.py").write_text("X = 'edited'\n")
    (code / "train.py").write_text("print('the edited script ran')\n")
    (shared_workdir / "go").touch()
    ids = [
        j["job_id"]
        for j in sorted(
            (j for j in json.loads(cli("list", "--json", check=True).stdout) if j["name"] == "cap"),
            key=lambda j: j["submit_time"],
        )
    ]
    assert len(ids) == 2 and ids[0] == first
    for job in ids:
        assert cli.wait_state(job, {"done", "failed", "timeout", "cancelled"}, timeout=300) == "done"
    logs = [(shared_workdir / f"cap.o{job.split('.')[0]}").read_text() for job in ids]
    for text in logs:
        assert "capsule says submitted script v1" in text and "edited" not in text, text[-2000:]
    assert f"capsule: job {ids[1]} runs what job {ids[0]} ran" in logs[1], logs[1][-2000:]
    shown = json.loads(cli("show", ids[1], "--json", check=True).stdout)
    assert [run["job_id"] for run in shown["runs"]] == ids
    assert shown["manifest"]["chain"] == 2 and shown["manifest"]["profile"]["name"] == cluster
