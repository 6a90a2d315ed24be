"""The monitor choices without a training: `--monitor` lists, when W&B runs offline, the run id kept
beside the checkpoints, and the one-line refusals (hpc_launch/train/monitor.py)."""

import socket

import pytest

from ds_launch import SMALL, run_python
from hpc_launch.train.__main__ import parse_args
from hpc_launch.train.ds_config import build_config, resolve_batch
from hpc_launch.train.errors import TrainError
from hpc_launch.train.monitor import RUN_ID_FILE, check, parse_monitors, run_id, server_reachable, wandb_mode

pytestmark = pytest.mark.train


def test_monitors_are_one_or_several_names():
    assert parse_monitors("none") == ()
    assert parse_monitors("tensorboard,wandb-offline") == ("tensorboard", "wandb-offline")
    assert parse_monitors("csv, tensorboard,csv") == ("csv", "tensorboard")
    for bad, why in (
        ("tensorbord", "unknown monitor tensorbord"),
        ("none,csv", "none cannot be combined"),
        ("wandb,wandb-offline", "choose wandb or wandb-offline"),
        (",", "unknown monitor (empty)"),
    ):
        with pytest.raises(TrainError, match=why.replace("(", r"\(").replace(")", r"\)")):
            parse_monitors(bad)
    assert parse_args(["--monitor", "csv,tensorboard"]).monitor == ("csv", "tensorboard")


def test_only_csv_stays_in_deepspeeds_config():
    # TensorBoard and W&B are opened after the resume (hpc_launch/train/monitor.py), not by DeepSpeed's engine
    cfg = build_config(batch=resolve_batch(1, 8, 1), monitor=("csv", "tensorboard", "wandb"), monitor_dir="m")
    assert cfg["csv_monitor"] == {"enabled": True, "output_path": "m", "job_name": "hpc-train"}
    assert "tensorboard" not in cfg and "wandb" not in cfg


def never(url):
    raise AssertionError(f"probed {url}: the network must not be touched")


@pytest.mark.parametrize(
    "monitors, env, reachable, mode",
    [
        (("wandb",), {}, never, "offline"),  # no key: offline, no probe
        (("wandb",), {"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, never, "offline"),
        (("wandb-offline",), {"WANDB_API_KEY": "k"}, never, "offline"),
        (("wandb",), {"WANDB_API_KEY": "k", "WANDB_MODE": "disabled"}, never, "disabled"),
        (("wandb",), {"WANDB_API_KEY": "k"}, lambda url: False, "offline"),  # a node without internet
        (("wandb",), {"WANDB_API_KEY": "k"}, lambda url: True, "online"),
    ],
)
def test_wandb_runs_offline_unless_a_key_and_the_server_are_there(monitors, env, reachable, mode):
    assert wandb_mode(monitors, env, reachable)[0] == mode


def test_the_server_probe_is_a_real_connection_bounded_in_time():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        assert server_reachable(f"http://127.0.0.1:{listening.getsockname()[1]}", timeout=2)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: refused
    assert not server_reachable(f"https://127.0.0.1:{port}", timeout=2)
    assert not server_reachable("not a url")


def test_one_run_id_per_checkpoint_dir(tmp_path):
    first = run_id(str(tmp_path / "ckpt"))
    assert (tmp_path / "ckpt" / RUN_ID_FILE).read_text().strip() == first
    assert run_id(str(tmp_path / "ckpt")) == first  # every later link and requeue
    assert run_id(None) != run_id(None)  # nothing to resume from: a run of its own
    (tmp_path / "ckpt" / RUN_ID_FILE).write_text("../../etc\n")
    with pytest.raises(TrainError, match="does not hold a W&B run id"):
        run_id(str(tmp_path / "ckpt"))


def test_online_on_request_needs_the_key_from_the_environment(tmp_path, monkeypatch):
    with pytest.raises(TrainError, match="WANDB_MODE=online needs WANDB_API_KEY"):
        check(("wandb",), {"WANDB_MODE": "online"})
    check(("wandb",), {"WANDB_MODE": "online", "WANDB_API_KEY": "k"})
    check(("tensorboard", "wandb-offline"), {})
    # through the entrypoint: one line, exit 2, before any process group starts
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    proc = run_python(["-m", "hpc_launch.train", *SMALL, "--steps", "2", "--monitor", "wandb"], cwd=tmp_path)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "WANDB_MODE=online" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
