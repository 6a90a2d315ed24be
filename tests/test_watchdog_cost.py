"""The watchdog's cost at scale (issue 28): one look of every rank reads O(ranks) progress entries
from rank 0's store in all, not every rank every rank's; and the rank that reads them still names
a stopped rank, whose own host's live ranks end it. The store is a stand-in that counts."""

from __future__ import annotations

import sys
import types

import pytest

from hpc_launch.joblayer import watchdog as wd_mod
from hpc_launch.joblayer.ranks import RankInfo


class CountingStore:
    """A rendezvous store in memory (one for all ranks, as rank 0's is) counting keys read."""

    def __init__(self):
        self.data: dict = {}
        self.keys_read = 0
        self.requests = 0

    def set(self, key, value):
        self.requests += 1
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        self.requests += 1
        self.keys_read += 1
        return self.data[key]

    def multi_get(self, keys):
        self.requests += 1
        self.keys_read += len(keys)
        return [self.data[k] for k in keys]

    def check(self, keys):
        self.requests += 1
        return all(k in self.data for k in keys)

    def compare_set(self, key, expected, desired):
        self.requests += 1
        current = self.data.get(key, b"")
        if current == expected.encode():
            self.data[key] = desired.encode()
        return self.data[key]


class _OneLook:
    """The watchdog thread's stop event: lets its loop run exactly once."""

    def __init__(self):
        self.looked = False

    def wait(self, _timeout):
        done, self.looked = self.looked, True
        return done


@pytest.fixture
def world(monkeypatch):
    store = CountingStore()
    fake_dist = types.ModuleType("torch.distributed")
    fake_dist.TCPStore = lambda *a, **kw: store  # type: ignore[attr-defined]
    fake_torch = types.ModuleType("torch")
    fake_torch.distributed = fake_dist  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_dist)
    clock = [1000.0]
    monkeypatch.setattr(wd_mod, "time", types.SimpleNamespace(time=lambda: clock[0], sleep=lambda _s: None))
    monkeypatch.setattr(wd_mod.Watchdog, "_end", lambda self, line, **kw: pytest.fail(f"rank {self.info.rank}: {line}"))
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "HPC_LAUNCH_HANG_S": "60"}

    def make(n: int, per_host: int = 4):
        ranks = []
        for r in range(n):
            w = wd_mod.Watchdog(RankInfo(r, n, r % per_host, per_host, "test"), wd_mod.Limits.from_env(env), env)
            w.host = f"node{r // per_host}"
            w.step, w.at = 20, 1000.0
            w._publish(1000.0, force=True)
            ranks.append(w)
        return store, ranks, clock

    return make


def _one_look_each(ranks) -> None:
    for w in ranks:
        w._stop = _OneLook()
        w._watch()


@pytest.mark.parametrize("n", [64, 512])
def test_one_look_of_every_rank_reads_a_number_of_entries_linear_in_the_ranks(world, n):
    store, ranks, _ = world(n)
    store.keys_read = store.requests = 0
    _one_look_each(ranks)
    # one rank reads all n; each other rank reads one (rank 0's heartbeat): about 2n, never n^2
    assert store.keys_read <= 2 * n, (n, store.keys_read)
    assert store.requests <= 4 * n, (n, store.requests)


def test_the_rank_that_reads_for_all_names_a_stopped_rank_and_its_hosts_ranks_end_it(world, monkeypatch):
    store, ranks, clock = world(8)
    now = clock[0] = 1000.0 + 200  # past the 60 s bound for the stopped rank, whose heartbeat stays
    stopped = ranks[5]  # node1, like a SIGSTOPped process: its heartbeat stays at 1000
    ended: list = []
    monkeypatch.setattr(wd_mod.Watchdog, "_end", lambda self, line, **kw: ended.append((self.info.rank, line, kw)))
    key = f"{stopped.prefix}/5"
    frozen = wd_mod.Progress.decode(5, store.data[key].decode())
    store.data[key] = frozen.__class__(**{**frozen.__dict__, "pid": 4242}).encode().encode()
    live = [w for w in ranks if w is not stopped]
    for w in live:  # the heartbeats of the live ranks, at `now`
        w._publish(now, force=True)
    _one_look_each(live)
    [(rank, line, kw)] = [e for e in ended if e[2].get("announce")]
    assert rank == 0 and line.startswith(f"rank 5 on node1 stopped: no heartbeat for {now - 1000.0:.0f} s"), line
    # every other live rank sees the verdict on its look; node1's live ranks learn the stopped pid
    assert store.data[f"{ranks[0].prefix}/frozen/node1"] == b"4242"
    assert {e[0] for e in ended if not e[2].get("announce")} == {w.info.rank for w in live} - {0}
