"""Options tried as a new user would (issue 17): a remote directory as --script, a sweep point
given twice, a sweep point whose batch is more than its data set. One line, nothing submitted."""

from __future__ import annotations

import os

import pytest
from inproc import run_cli

from fakes import FakeTransport
from hpc_launch.errors import SpecError
from hpc_launch.transport import CommandResult


@pytest.mark.parametrize("is_file, refused", [(False, True), (True, False)])
def test_a_directory_as_script_on_the_login_node_is_refused_before_anything_is_written(is_file, refused):
    from hpc_launch.jobs import placing
    from hpc_launch.prepare import prepare
    from hpc_launch.spec import JobSpec

    # only the cluster has /home/u/code: the inputs check asks there (sftp's size of a directory is no answer)
    spec = JobSpec(cluster="slurm", login="login1", script="/home/u/code", venv="/home/u/venv")
    prepared = prepare(spec)
    assert prepared.host == "login1" and prepared.remote_code[0] == "/home/u/code"
    fake = FakeTransport(
        lambda argv: CommandResult(0 if is_file or argv[:2] != ["test", "-f"] else 1, "", ""),
        host="login1",
        every_file_exists=True,
    )
    if refused:
        with pytest.raises(SpecError, match=r"--script /home/u/code: is a directory .* on login1"):
            placing.check_inputs(fake, prepared, "/home/u/w")
    else:
        placing.check_inputs(fake, prepared, "/home/u/w")
    assert ["test", "-f", "/home/u/code"] in fake.ran
    assert not [c for c in fake.calls if c[0] != "run"]  # nothing written


def test_a_value_or_point_given_twice_is_refused_naming_it():
    from hpc_launch import sweep as sw

    with pytest.raises(SpecError, match=r"--zero: 1 is given twice"):
        sw.axis_values("zero", "1,2,1", "--zero")
    # a listed point the grid has already: was merged silently, the file's author never told
    with pytest.raises(SpecError, match=r"sweep point 1 \(zero=2\) is already in the sweep"):
        sw.expand({"zero": [1, 2]}, [{"zero": 2}])
    with pytest.raises(SpecError, match=r"sweep point 2 \(zero=3 offload=optimizer\) is already"):
        sw.expand({}, [{"zero": 3, "offload": "optimizer"}, {"zero": 3, "offload": "optimizer"}])


def test_a_point_whose_batch_is_more_than_the_data_set_refuses_the_sweep(tmp_path, hpc_launch_bin):
    """digits trains on 1,437 samples: 2 ranks x 1000 per micro-batch cannot make one step (the
    job would refuse at start, after its queue wait)."""
    from hpc_launch.train.data import train_samples

    assert train_samples("digits", 0) == 1437 and train_samples("synthetic", 512) == 512
    assert train_samples(str(tmp_path), 0) is None  # an image folder: only reading it tells
    env = dict(os.environ, HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"))
    r = run_cli(
        [
            "sweep",
            "--cluster",
            "local",
            "--gpus-per-node",
            "2",
            "--zero",
            "1",
            "--micro-batch",
            "8,1000",
            "--train-args",
            "--model smallcnn --data digits",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == ""
    assert "sweep point 2 (zero=1 micro_batch=1000, 2 rank(s))" in lines[0]
    assert "2000 samples but --data digits has 1437" in lines[0] and "lower --micro-batch" in lines[0]
    assert not (tmp_path / ".hpc-launch").exists() and not (tmp_path / "state").exists()
