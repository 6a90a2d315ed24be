"""Files the launcher reads that are not regular files (issue 28): a FIFO where a capsule's
capsule.json or a job's exit-code file should be is refused at once, never waited on; a --script
that is a device or a FIFO is refused by a real submit exactly as by a dry-run. Real FIFOs, real
devices, the real local transport; each read runs in a thread so a hang fails the test instead of
holding it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from hpc_launch import capsule_read, logs
from hpc_launch.errors import SpecError
from hpc_launch.records import JobRecord
from hpc_launch.transport.local import LocalTransport


def _within(seconds: float, fn):
    """fn()'s result or exception, or a failure if it is still blocked after `seconds`."""
    got: dict = {}

    def run():
        try:
            got["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the read is waiting on the FIFO (it would hang `show`/`status` for ever)"
    if "error" in got:
        raise got["error"]
    return got.get("value")


@pytest.fixture
def unblock():
    """Opens each FIFO for writing at the end, so a read the old code left blocked can end."""
    fifos: list = []
    yield fifos.append
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_a_fifo_as_capsule_json_is_one_line_not_a_hang(tmp_path, unblock):
    cap = tmp_path / ".hpc-launch" / "capsules" / "t-1"
    cap.mkdir(parents=True)
    os.mkfifo(cap / "capsule.json")
    unblock(str(cap / "capsule.json"))
    rec = JobRecord("5", "local", "none", "localhost", "t", str(tmp_path), "", "", "", 0.0, extra={"capsule": str(cap)})
    with pytest.raises(SpecError) as err:
        _within(5, lambda: capsule_read.load(rec, LocalTransport()))
    assert "capsule.json" in str(err.value) and "not a regular file" in str(err.value)


def test_a_fifo_as_the_exit_code_file_reads_as_no_exit_code(tmp_path, unblock):
    fifo = tmp_path / "t.o5.exitcode"
    os.mkfifo(fifo)
    unblock(str(fifo))
    assert _within(5, lambda: logs.read_exit_code(LocalTransport(), str(fifo))) is None
    assert _within(5, lambda: logs.read_exit_time(LocalTransport(), str(fifo))) is None


def test_the_local_transport_reads_only_regular_files(tmp_path, unblock):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    unblock(str(fifo))
    from hpc_launch.paths import NotAUserFile

    with pytest.raises(NotAUserFile):
        _within(5, lambda: LocalTransport().read_from(str(fifo), 0))
    with pytest.raises(NotAUserFile):
        _within(5, lambda: LocalTransport().read_from("/dev/zero", 0))
    (tmp_path / "r").write_bytes(b"0123456789")
    assert LocalTransport().read_from(str(tmp_path / "r"), 3, 4) == b"3456"


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "link to /dev/zero"])
def test_a_script_that_is_not_a_regular_file_is_refused_by_submit_as_by_the_dry_run(kind, tmp_path, unblock):
    from hpc_launch.jobs import submit
    from hpc_launch.prepare import prepare
    from hpc_launch.spec import JobSpec

    script = tmp_path / "train.py"
    if kind == "fifo":
        os.mkfifo(script)
        unblock(str(script))
    elif kind == "/dev/zero":
        script = Path("/dev/zero")
    else:
        script.symlink_to("/dev/zero")
    (tmp_path / "w").mkdir()
    spec = JobSpec(cluster="local", script=str(script), workdir=str(tmp_path / "w"))
    for attempt in (lambda: prepare(spec), lambda: submit(prepare(spec))):  # the dry-run, the submit
        with pytest.raises(SpecError) as err:
            _within(10, attempt)
        assert f"--script {script}: is not a regular file" in str(err.value)
    assert list((tmp_path / "w").iterdir()) == []


def test_a_fifo_as_the_log_gives_no_cause_at_once_not_after_the_time_limit(tmp_path, unblock):
    import time

    from hpc_launch.notify import cause as notify_cause

    fifo = tmp_path / "t.o5"
    os.mkfifo(fifo)
    unblock(str(fifo))
    t0 = time.monotonic()
    assert notify_cause.cause_lines(str(fifo), 1) == []
    assert time.monotonic() - t0 < 5  # before: the child waited on the FIFO until its 15 s limit


def test_both_transports_refuse_a_fifo_and_a_device_and_read_a_file(transport, tmp_path, unblock):
    """Here and over a real sshd: the SFTP server's open() of a FIFO would hold the session."""
    from hpc_launch.paths import NotAUserFile

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    unblock(str(fifo))
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(NotAUserFile):
            _within(10, lambda: transport.read_from(path, 0))  # noqa: B023 - called at once
    (tmp_path / "r").write_bytes(b"0123456789")
    assert transport.read_from(str(tmp_path / "r"), 3, 4) == b"3456"
    assert logs.read_exit_code(transport, str(fifo)) is None
