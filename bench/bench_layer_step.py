"""The watchdog's cost per step in a user's own loop: torch's global optimizer hook that the job layer
installs (hpc_launch/joblayer/steps.py), reporting every step to a running watchdog, on vs off.

    python bench/bench_layer_step.py            # ~30 s on 2 cores
    python bench/bench_layer_step.py --blocks 20

One process, set up as the layer sets up rank 0 of 2 (its rendezvous store, the watchdog started
by the first step); blocks of steps with the hook and without it, interleaved, in CPU seconds of
the process (the watchdog's thread included; what other processes take of a shared machine is
not, which made wall-clock runs on a busy 2-core machine swing by +-25 %). Two figures:
  - the hook alone: opt.step() of a one-parameter optimizer, with and without it;
  - a short real step: a small MLP's forward, backward and step (one thread), for the share.
(On/off blocks of the MLP step itself differ by more than the hook, either way, from noise.)
Prints the medians and the hook's share of the step (target: under 1 %). Never fails.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def per_step_us(step: Callable[[], None], n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        step()
    return (time.process_time() - t0) / n * 1e6


def on_off(step: Callable[[], None], n: int, blocks: int, hooks: Dict, table: Dict) -> List[float]:
    """Median us/step with the hook and without it, blocks interleaved."""
    on: List[float] = []
    off: List[float] = []
    for _ in range(blocks):
        on.append(per_step_us(step, n))
        table.clear()
        off.append(per_step_us(step, n))
        table.update(hooks)
    return [statistics.median(on), statistics.median(off)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=10)
    blocks = ap.parse_args().blocks
    port = free_port()
    os.environ.update(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), HPC_LAUNCH_HANG_S="600")  # fmt: skip
    import torch
    import torch.optim.optimizer as optim_module

    from hpc_launch.joblayer import steps
    from hpc_launch.joblayer.ranks import discover

    torch.set_num_threads(1)
    store = torch.distributed.TCPStore("127.0.0.1", port, 2, is_master=True, wait_for_workers=False)  # noqa: F841
    steps.configure(discover())
    steps.install_optimizer_hook(optim_module)  # what the layer does once the user's code imports torch
    table = optim_module._global_optimizer_post_hooks
    hooks = dict(table)

    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    tiny = torch.optim.SGD([p], lr=0.1)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))

    def mlp_step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(300):
        mlp_step()  # warm-up; the first step also started the watchdog
    assert steps._STEPS.watchdog is not None, "the watchdog did not start"
    hook_on, hook_off = on_off(tiny.step, 20000, blocks, hooks, table)
    step = statistics.median(per_step_us(mlp_step, 500) for _ in range(blocks))
    hook = hook_on - hook_off
    print(f"opt.step() alone     {hook_on:7.2f} us CPU with the hook, {hook_off:7.2f} without: the hook {hook:.2f} us")
    print(f"a small MLP step     {step:7.1f} us CPU (median of {blocks} blocks of 500)")
    print(f"the watchdog's cost per step: {hook:.2f} us = {hook / step * 100:.2f} % of the small step (target < 1 %)")
    steps._STEPS.watchdog.stop()


if __name__ == "__main__":
    main()
