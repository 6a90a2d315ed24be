"""TensorBoard and W&B for one training across chain links, requeues and `--resume`.

DeepSpeed's own TensorBoard and W&B monitors open their writer when the engine is built, before
the checkpoint is loaded: a resumed link cannot tell them where it resumes, so TensorBoard would
keep the steps a killed link logged after its checkpoint twice, and W&B would start a new run per
link. Here rank 0 opens them after the resume, from the step the checkpoint restored
(`engine.global_samples`, the axis DeepSpeed's monitors use), with TensorBoard's purge of the
steps after it and one W&B run id kept beside the checkpoints. The CSV monitor stays DeepSpeed's.

W&B runs offline (no key, no network) with `--monitor wandb-offline`, `WANDB_MODE=offline`, no
`WANDB_API_KEY`, or when its server cannot be reached; `wandb sync` uploads the runs later from a
machine with internet, the line printed at the end says how. The key is read from the
environment by wandb itself, never from a flag or a file of ours.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import string
import threading
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from .errors import TrainError

MONITORS = ("none", "csv", "tensorboard", "wandb", "wandb-offline")
RUN_ID_FILE = "wandb-run-id"  # in the checkpoint dir: every link and requeue of a training logs to this run
_RUN_ID = re.compile(r"^[a-z0-9]{1,64}$")
PROBE_TIMEOUT_S = 3.0


def parse_monitors(text: str) -> tuple:
    """`--monitor`: one monitor or several joined by commas (`tensorboard,wandb`); () for none."""
    names = tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    unknown = [n for n in names if n not in MONITORS]
    if unknown or not names:
        raise TrainError(
            f"--monitor {text}: unknown monitor {', '.join(unknown) or '(empty)'}",
            hint=f"one of {', '.join(MONITORS)}, or several joined by commas",
        )
    if "none" in names and len(names) > 1:
        raise TrainError(f"--monitor {text}: none cannot be combined with a monitor")
    if "wandb" in names and "wandb-offline" in names:
        raise TrainError(f"--monitor {text}: choose wandb or wandb-offline")
    return tuple(n for n in names if n != "none")


def wants_wandb(monitors) -> bool:
    return "wandb" in monitors or "wandb-offline" in monitors


def check(monitors, env=os.environ) -> None:
    """The packages (and, for W&B online on request, the key) before any process starts."""
    if "tensorboard" in monitors:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise TrainError(
                "--monitor tensorboard needs the tensorboard package",
                hint="pip install tensorboard (or hpc-launch[monitor]), or use --monitor csv",
            ) from None
    if wants_wandb(monitors):
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise TrainError(
                "--monitor wandb needs the wandb package", hint="pip install wandb (or hpc-launch[monitor])"
            ) from None
        if env.get("WANDB_MODE", "").lower() == "online" and not env.get("WANDB_API_KEY"):
            raise TrainError(
                "WANDB_MODE=online needs WANDB_API_KEY in the environment",
                hint="pass it with hpc-launch submit --pass-env WANDB_API_KEY (never a flag or a file), "
                "or log offline: --monitor wandb-offline",
            )


def server_reachable(base_url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """A TCP connection to the W&B server within `timeout` (name lookup included: compute nodes
    without internet often fail it slowly, so it runs in a thread we stop waiting for)."""
    parts = urlsplit(base_url)
    host, port = parts.hostname, parts.port or (80 if parts.scheme == "http" else 443)
    if not host:
        return False
    result: list = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            pass

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    return bool(result)


def wandb_mode(monitors, env=os.environ, reachable: Callable[[str], bool] = server_reachable):
    """("online" | "offline" | "disabled", why): offline unless a key is given and the server answers."""
    asked = env.get("WANDB_MODE", "").lower()
    if asked in ("offline", "dryrun"):
        return "offline", f"WANDB_MODE={asked}"
    if asked == "disabled":
        return "disabled", "WANDB_MODE=disabled"
    if "wandb-offline" in monitors:
        return "offline", "--monitor wandb-offline"
    if not env.get("WANDB_API_KEY"):
        return "offline", "no WANDB_API_KEY in the environment"
    base = env.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not reachable(base):
        return "offline", f"{base} cannot be reached from this node"
    return "online", "WANDB_API_KEY"


def run_id(checkpoint_dir: Optional[str]) -> str:
    """The training's W&B run id: the one in CHECKPOINT_DIR/wandb-run-id, written there by the
    first link that logs (rank 0 only). Without a checkpoint dir nothing resumes: a new id."""
    new = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    if not checkpoint_dir:
        return new
    path = os.path.join(checkpoint_dir, RUN_ID_FILE)
    try:
        with open(path) as fh:
            kept = fh.read().strip()
    except FileNotFoundError:
        os.makedirs(checkpoint_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(new + "\n")
        os.replace(tmp, path)
        return new
    if not _RUN_ID.match(kept):
        raise TrainError(
            f"{path} does not hold a W&B run id (lower-case letters and digits)",
            hint="delete it to start a new W&B run for this training",
        )
    return kept


class Monitors:
    """Rank 0's TensorBoard writer and W&B run; `write` takes DeepSpeed's (tag, value, step) events."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.tensorboard: Any = None  # torch's SummaryWriter
        self.wandb_run: Any = None
        self.sync_hint = ""

    def write(self, events) -> None:
        if self.tensorboard is not None:
            for tag, value, step in events:
                self.tensorboard.add_scalar(tag, value, step)
            self.tensorboard.flush()  # a link killed later keeps what it logged up to here
        if self.wandb_run is not None:
            step = events[0][2]
            self.wandb_run.log({tag: value for tag, value, _ in events}, step=step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.finish()
            # and wait for W&B's service to write it all: its own atexit hook does that, and entry()
            # leaves with os._exit (a link's run file was found holding nothing but its header)
            wandb.teardown()
            self.wandb_run = None
            if self.sync_hint:
                self.say(self.sync_hint)


_OPEN: list = []


def open_monitors(
    monitors, *, monitor_dir: str, job_name: str, checkpoint_dir: Optional[str], samples: int, config: dict, say
) -> Optional[Monitors]:
    """Rank 0's monitors, opened at `samples` (the step axis where this run starts: 0, or the
    checkpoint's). Closed by `close_open` however the run ends (entry() skips interpreter teardown)."""
    if "tensorboard" not in monitors and not wants_wandb(monitors):
        return None
    opened = Monitors(say)
    _OPEN.append(opened)
    if "tensorboard" in monitors:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = os.path.join(monitor_dir, job_name)
        # steps after the checkpoint were logged by a link that died before its next checkpoint:
        # this run logs them again, TensorBoard hides the old ones (events at >= purge_step)
        opened.tensorboard = SummaryWriter(log_dir=log_dir, purge_step=samples + 1 if samples else None)
        say(f"[hpc-train] TensorBoard: {os.path.abspath(log_dir)} (step = samples seen, from {samples})")
    if wants_wandb(monitors):
        opened.wandb_run = _open_wandb(monitors, monitor_dir, job_name, checkpoint_dir, config, opened, say)
    return opened


def _open_wandb(monitors, monitor_dir, job_name, checkpoint_dir, config, opened, say):
    import wandb

    mode, why = wandb_mode(monitors)
    ident = run_id(checkpoint_dir)
    os.makedirs(monitor_dir, exist_ok=True)
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "hpc-launch"),
        entity=os.environ.get("WANDB_ENTITY") or None,
        group=job_name,
        name=job_name,
        id=ident,
        resume="allow",  # the same run for every link; a new one the first time
        mode=mode,
        dir=monitor_dir,
        config=config,
        # the job log stays the trainer's own lines (the follower and doctor read it)
        settings=wandb.Settings(console="off", silent=True),
    )
    where = os.path.abspath(os.path.join(monitor_dir, "wandb"))
    say(f"[hpc-train] W&B run {ident} ({mode}: {why})")
    if mode == "offline":
        opened.sync_hint = (
            f"[hpc-train] W&B run {ident} logged offline; upload every link of it from a machine with internet "
            f"(WANDB_API_KEY set): wandb sync {where}/offline-run-*-{ident}"
        )
    return run


def close_open() -> None:
    while _OPEN:
        _OPEN.pop().close()
