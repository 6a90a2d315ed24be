"""One experiment across links (issue 29, item 6): a training cut into links and resumed keeps one
TensorBoard step axis (no restart at 0, no step twice, even after a SIGKILL past a checkpoint) and
one W&B run id, offline with no key and no network touched. (The same through a real
`submit --chain 3` on the testbed: tests/e2e/test_monitor_chain_e2e.py.)"""

import socket
import threading

import pytest

from ds_launch import launch, launch_and_kill, run_python
from monitor_files import tensorboard_scalars, wandb_run
from hpc_launch.train.monitor import RUN_ID_FILE

pytestmark = pytest.mark.train

# digits (1437 training samples), micro-batch 16 on 2 ranks: a global batch of 32 samples
GLOBAL = 32
ARGS = ["--model", "smallcnn", "--data", "digits", "--micro-batch", "16", "--no-eval", "--job-name", "exp"]
LOSS = "Train/Samples/train_loss"


class Listener:
    """A local port standing in for the W&B server and any proxy: counts who connects to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.done = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self.done.set()
        self.sock.close()


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """No key, W&B's own dirs under tmp_path, and every address it could reach pointing at a listener."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_ENTITY", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    listener = Listener()
    for name in ("WANDB_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, listener.url)
    yield listener
    listener.close()


def test_three_links_log_one_tensorboard_axis_and_one_wandb_run_offline(tmp_path, offline_wandb):
    # the stop request is there from the start: each link stops at its first --log-every step with
    # a checkpoint (exit 75) and the next one resumes, as a chain's links do at their walltime
    stop = tmp_path / "stop"
    stop.touch()
    args = [*ARGS, "--steps", "15", "--log-every", "5", "--checkpoint-dir", "ckpt", "--monitor", "tensorboard,wandb"]
    runs = [launch(args, cwd=tmp_path, extra_env={"HPC_LAUNCH_STOP": str(stop)}) for _ in range(3)]
    assert [r.rc for r in runs] == [75, 75, 0], runs[-1].out[-3000:]
    assert [[s["step"] for s in r.steps] for r in runs] == [[5], [10], [15]]
    for run in runs:
        assert "W&B run" in run.out and "offline: no WANDB_API_KEY in the environment" in run.out, run.out[-3000:]
    assert offline_wandb.connections == 0  # W&B (and anything else) never tried the network

    # TensorBoard: one run directory, one axis of samples seen, continuing across the links
    logged = tensorboard_scalars(tmp_path / "runs" / "exp", LOSS)
    assert [step for step, _ in logged] == [5 * GLOBAL, 10 * GLOBAL, 15 * GLOBAL]
    assert [v for _, v in logged] == pytest.approx([r.steps[0]["loss"] for r in runs], abs=1e-4)

    # W&B: three offline run dirs, one run id (the one kept beside the checkpoints), steps going on
    run_id = (tmp_path / "ckpt" / RUN_ID_FILE).read_text().strip()
    dirs = sorted((tmp_path / "runs" / "wandb").glob("offline-run-*"))
    assert len(dirs) == 3
    offline = [wandb_run(d) for d in dirs]
    assert {o["id"] for o in offline} == {run_id}
    assert [o["steps"] for o in offline] == [[5 * GLOBAL], [10 * GLOBAL], [15 * GLOBAL]]
    sync = f"wandb sync {tmp_path / 'runs' / 'wandb'}/offline-run-*-{run_id}"
    assert all(sync in r.out for r in runs), runs[0].out[-2000:]
    # the links that stopped for time: rank 0 said the sync line (its W&B run written out) before any rank
    # left; a rank leaving first (exit 75) makes the launcher end rank 0's tree, W&B's service with it
    for run in runs[:2]:
        killed = run.out.find("Killing subprocess")
        assert killed == -1 or run.out.index(sync) < killed, run.out[-2000:]


def test_a_requeue_after_sigkill_purges_the_steps_past_the_checkpoint(tmp_path):
    # killed after logging step 25 with its newest checkpoint at 20: the requeued run logs 25 again
    args = [*ARGS, "--steps", "40", "--log-every", "5", "--checkpoint-every", "10", "--checkpoint-dir", "ckpt"]
    args += ["--monitor", "tensorboard"]
    killed = launch_and_kill(args, cwd=tmp_path, kill_after_step=25)
    assert killed.rc != 0 and killed.steps[-1]["step"] >= 25, killed.out[-3000:]
    resumed = launch([*args, "--resume", "auto"], cwd=tmp_path)
    assert resumed.rc == 0, resumed.out[-3000:]
    resume_step = resumed.steps[0]["step"] - 5
    assert f"at step {resume_step}" in resumed.out and resume_step < killed.steps[-1]["step"]

    logged = tensorboard_scalars(tmp_path / "runs" / "exp", LOSS)
    steps = [step for step, _ in logged]
    assert steps == [s * GLOBAL for s in range(5, 45, 5)]  # strictly increasing: nothing twice, no restart
    mine = {s["step"] * GLOBAL: s["loss"] for s in resumed.steps}
    for step, value in logged:  # past the checkpoint, what TensorBoard shows is the requeued run's
        if step in mine:
            assert value == pytest.approx(mine[step], abs=1e-4), step


CLOSE_THEN_EXIT = """
import os
from hpc_launch.train import monitor
opened = monitor.open_monitors(("wandb-offline",), monitor_dir="runs", job_name="one", checkpoint_dir="ckpt",
                               samples=0, config={"zero_stage": 2}, say=print)
opened.write([("Train/Samples/train_loss", 1.5, 32)])
monitor.close_open()
alive = []  # W&B's service (a child of this process) still running
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        state, ppid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[:2]
    except OSError:
        continue
    if int(ppid) == os.getpid() and state not in "ZX":
        alive.append(pid)
print("children alive after close:", len(alive), flush=True)
os._exit(0)  # as entry() leaves: no atexit hooks
"""


def test_a_link_that_leaves_with_os_exit_keeps_its_whole_wandb_run(tmp_path, offline_wandb):
    """entry() leaves with os._exit, which skips the atexit hook where W&B waits for its service to
    write the run; under load a link's run file once held nothing but its header. Closing the
    monitors now waits for it: no service left running, and the file has the run and its step."""
    proc = run_python(["-c", CLOSE_THEN_EXIT], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "children alive after close: 0" in proc.stdout, proc.stdout[-2000:]
    (run_dir,) = (tmp_path / "runs" / "wandb").glob("offline-run-*")
    run = wandb_run(run_dir)
    assert run["id"] == (tmp_path / "ckpt" / RUN_ID_FILE).read_text().strip() and run["steps"] == [32], run
