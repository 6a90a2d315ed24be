"""The watchdog's store traffic in one look of every rank, on real TCPStore connections (issue 28).

Run on the testbed's pods, one process per pod, each holding RANKS watchdogs (one store connection
each, as ranks have), against a TCPStore served on the first pod like rank 0's:

    ip netns exec pod1 python bench/bench_watchdog_store.py serve PORT WORLD &
    ip netns exec podK python bench/bench_watchdog_store.py look ADDR PORT K-1 RANKS PODS

Each `look` process prints, for its ranks, the store requests and progress entries read in one
look, and the wall time of that look, for the watchdog as it is and for every rank reading every
rank's progress (what it did before).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta


class Counting:
    """A store connection that counts requests and keys read."""

    def __init__(self, store):
        self.store, self.requests, self.keys = store, 0, 0

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def counted(*args):
            self.requests += 1
            if name in ("get", "multi_get"):
                self.keys += len(args[0]) if name == "multi_get" else 1
            return method(*args)

        return counted


def serve(port: int, world: int) -> None:
    import torch.distributed as tdist

    store = tdist.TCPStore("0.0.0.0", port, world, is_master=True, wait_for_workers=False)
    store.set("bench/ready", "1")
    time.sleep(600)


def look(addr: str, port: int, pod: int, ranks: int, pods: int) -> None:
    import torch.distributed as tdist

    from hpc_launch.joblayer import watchdog as wd
    from hpc_launch.joblayer.ranks import RankInfo

    world = ranks * pods
    env = {"MASTER_ADDR": addr, "MASTER_PORT": str(port), "HPC_LAUNCH_HANG_S": "300"}
    dogs = []
    for i in range(ranks):
        r = pod * ranks + i
        w = wd.Watchdog(RankInfo(r, world, i, ranks, "bench"), wd.Limits.from_env(env), env)
        w.store = Counting(w.store)
        w._publish(time.time(), force=True)
        dogs.append(w)
    control = tdist.TCPStore(addr, port, world, is_master=False, timeout=timedelta(seconds=120))
    control.add("bench/published", ranks)
    while int(control.add("bench/published", 0)) < world:  # every rank's entry is there
        time.sleep(0.05)

    class OneLook:
        def __init__(self):
            self.done = False

        def wait(self, _t):
            done, self.done = self.done, True
            return done

    def measure(one) -> dict:
        for w in dogs:
            w.store.requests = w.store.keys = 0
        t0 = time.perf_counter()
        for w in dogs:
            one(w)
        wall = time.perf_counter() - t0
        return {
            "requests": sum(w.store.requests for w in dogs),
            "entries_read": sum(w.store.keys for w in dogs),
            "wall_ms": round(wall * 1000, 1),
        }

    def now_look(w):
        w._stop = OneLook()
        w._watch()

    def all_read_all(w):  # the look before: heartbeat, every rank's progress, the verdict key
        w._publish(time.time())
        w._read()
        w.store.check([f"{w.prefix}/hang"])

    now, before = measure(now_look), measure(all_read_all)
    print(json.dumps({"pod": pod, "ranks": ranks, "world": world, "now": now, "before": before}))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        look(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
