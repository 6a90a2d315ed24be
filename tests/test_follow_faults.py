"""`logs -f` across faults: the SSH server going away and coming back (issue 8)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from hpc_launch.logs import follow
from hpc_launch.protocol import Backoff
from hpc_launch.states import JobState


@pytest.fixture
def own_server(tmp_path):
    from sshd import start_sshd

    handle = start_sshd(tmp_path / "sshd")
    yield handle
    handle.stop()


def test_follow_over_ssh_reconnects_after_sshd_drops_and_loses_no_line(own_server, tmp_path, monkeypatch):
    from hpc_launch.transport import SSHTransport

    path = tmp_path / "job.log"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                "with open(sys.argv[1], 'a') as f:\n"
                "    for i in range(60):\n"
                "        f.write(f'line {i}\\n'); f.flush(); time.sleep(0.1)\n"
            ),
            str(path),
        ]
    )
    t = SSHTransport(own_server.alias, ssh_config=str(own_server.ssh_config), retries=0)
    received, drops = [], []

    def cut():  # sshd and every connection it holds go away for a second, then it is back
        # once the follow is reading over its connection: under a loaded machine's CPU the first
        # connection took over a second, the cut came before it, and nothing was dropped (CI)
        deadline = time.monotonic() + 30
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        own_server.stop()
        time.sleep(1.0)
        own_server.start()

    cutter = threading.Thread(target=cut)
    cutter.start()
    try:
        final = follow(
            t,
            str(path),
            reconnect=Backoff(0.2, 2.0, 0.8),
            state=lambda: JobState.DONE if writer.poll() is not None else JobState.RUNNING,
            write=received.append,
            poll_interval=0.05,
            on_reconnect=lambda reason, delay: drops.append(reason),
        )
    finally:
        cutter.join()
        t.close()
    assert final is JobState.DONE
    assert drops, "the connection never dropped: the test did not test anything"
    assert "".join(received) == "".join(f"line {i}\n" for i in range(60))


def test_follow_gives_up_after_the_reconnect_budget(tmp_path, monkeypatch):
    from hpc_launch.errors import TransportError

    class Gone:
        host = "nowhere"

        def size(self, path):
            raise TransportError("cannot connect to nowhere")

    with pytest.raises(TransportError):
        follow(
            Gone(),
            str(tmp_path / "x"),
            state=lambda: JobState.RUNNING,
            write=lambda s: None,
            poll_interval=0.01,
            reconnect=Backoff(0.01, 1.0, 0.01),
            give_up_s=0.1,
        )
