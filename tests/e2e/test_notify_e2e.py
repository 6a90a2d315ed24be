"""--notify on the real testbed (issue 19, part 3): a 2-link Slurm chain whose links run on the
pods (network namespaces with their own addresses) and a real HTTP server in this process.

- direct: the server listens on the bridge address the pods reach (10.200.0.1), so each link
  posts its own start and end;
- relay: the server listens on 127.0.0.1 only, which a pod cannot reach (its loopback is its
  own): each link's tries fail, the messages wait in the outbox, and `hpc-launch status` on this
  machine (the side with the network) sends them.
Either way the server receives each link's start and end, the chain's end, exactly once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli
from hpc_launch.notify import outbox as notify_outbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_notify import Hook  # noqa: E402

pytestmark = [pytest.mark.scheduler, pytest.mark.chain, pytest.mark.side]

ENDED = {"done", "failed", "timeout", "cancelled"}


def _chain(cli, workdir: Path, name: str, hook_url: str, *where: str):
    code = workdir / "code"
    code.mkdir(exist_ok=True)
    (code / "hello.py").write_text("import socket\nprint('hello from', socket.gethostname(), flush=True)\n")
    cli.env["E2E_HOOK"] = hook_url
    r = cli(
        "submit", "--cluster", "tb-slurm", *SIDE_QUEUE, "--nodes", "1", "--name", name, "--walltime", "5m",
        "--chain", "2", "--script", "code/hello.py", "--train-args", "", "--notify", "E2E_HOOK", *where,
        # a link's 3 tries at a webhook it cannot reach, without 7 s of pauses per message (28 s a chain)
        "--env", "HPC_LAUNCH_NOTIFY_PAUSES=0.2,0.3", check=True,
    )  # fmt: skip
    first = r.stdout.strip().splitlines()[0]
    ids = [
        j["job_id"]
        for j in sorted(
            (j for j in json.loads(cli("list", "--json", check=True).stdout) if j["name"] == name),
            key=lambda j: j["submit_time"],
        )
    ]
    assert len(ids) == 2 and ids[0] == first
    return ids


def _expected(ids, name):
    return sorted(
        [
            f"{name} (job {ids[0]}, tb-slurm, HOST): link 1 of 2 started",
            f"{name} (job {ids[0]}, tb-slurm, HOST): link 1 of 2 done",
            f"{name} (job {ids[1]}, tb-slurm, HOST): link 2 of 2 started",
            f"{name} (job {ids[1]}, tb-slurm, HOST): link 2 of 2 done (the chain's end)",
        ]
    )


def _received(hook) -> list:
    out = []
    for text in hook.texts():
        head = text.split("\n")[0].removeprefix("[hpc-launch] ")
        who, what = head.split("): ", 1)
        job, host = who.rsplit(", ", 1)
        assert host.startswith("pod"), text  # sent about a link that ran on a pod
        out.append(f"{job}, HOST): {what.split(', after ')[0]}")
    return sorted(out)


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what()
        time.sleep(0.5)


def test_each_link_posts_its_start_and_end_directly_from_the_pod(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    hook = Hook("/hook/e2e-T0k3n", host=testbed["HPC_TESTBED_BRIDGE_IP"])
    ids = _chain(cli, shared_workdir, "nd", hook.url)
    for job in ids:
        assert cli.wait_state(job, ENDED, timeout=300) == "done"
    _wait(lambda: len(hook.bodies) >= 4, 60, lambda: f"only {hook.texts()}")
    for _ in range(2):  # a refresh (the relay) finds nothing left to send, and sends nothing again
        cli("status", *ids, "--json", check=True)
    assert _received(hook) == _expected(ids, "nd")
    got = json.loads(cli("status", "--json", *ids, check=True).stdout)
    assert [j["notify"] for j in got] == [{"sent": 2, "pending": 0, "failed": 0, "why": "", "done": True}] * 2
    for job in ids:
        assert "notify" not in (shared_workdir / f"nd.o{job}").read_text()  # no failure line
    assert not any(b"e2e-T0k3n" in p.read_bytes() for p in shared_workdir.rglob("*") if p.is_file())


@pytest.mark.parametrize("login", [None, "HPC_TESTBED_LOGIN_HOST"])
def test_a_pod_without_a_route_to_the_webhook_leaves_it_to_the_relay(hpc_launch_bin, testbed, shared_workdir, login):
    """Submitted here, or from a "laptop" through the login host over SSH: then the relay's reads,
    lock and sent-marker go over SSH too, and the laptop posts."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    hook = Hook("/hook/e2e-T0k3n")  # 127.0.0.1: a pod's loopback is its own, so no pod reaches it
    where = ["--login", testbed[login], "--workdir", str(shared_workdir)] if login else []
    ids = _chain(cli, shared_workdir, "nr", hook.url, *where)
    for job in ids:
        assert cli.wait_state(job, ENDED, timeout=300) == "done"
    outboxes = [shared_workdir / f"nr.o{job}.notify" for job in ids]

    def all_kept():
        return all(p.exists() and p.read_text().count("\n") == 2 for p in outboxes)

    _wait(all_kept, 120, lambda: "the links' outboxes: " + repr([p.exists() for p in outboxes]))
    for path in outboxes:  # no link could post: every message was left to the relay
        for entry in notify_outbox.parse(path.read_bytes()):
            assert not entry.sent and entry.relay and entry.why.startswith("ConnectionRefusedError"), entry
    for job in ids:
        log = (shared_workdir / f"nr.o{job}").read_text()
        assert log.count("left in the outbox for `hpc-launch status` to send") == 2, log[-2000:]
    # the relay: this machine's `status` (here also each `status` of wait_state above) sends them;
    # more refreshes send nothing again
    for _ in range(3):
        cli("status", "--json", check=True)
    assert _received(hook) == _expected(ids, "nr")
    got = json.loads(cli("status", "--json", *ids, check=True).stdout)
    assert [j["notify"] for j in got] == [{"sent": 2, "pending": 0, "failed": 0, "why": "", "done": True}] * 2
    assert not any(b"e2e-T0k3n" in p.read_bytes() for p in shared_workdir.rglob("*") if p.is_file())
