"""A submit over SSH writes its files on the submit command's stdin (transport/send_files.py), in one
exec channel: against a real OpenSSH sshd on 127.0.0.1 (tests/sshd.py), with real faults: the
connection cut mid-transfer and mid-command, a directory that cannot be written, a full disk, a
submit command that fails, and the secrets file watched from the far side while it arrives."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hpc_launch.errors import SchedulerError, SpecError, TransportError
from hpc_launch.transport import SSHTransport, ssh
from hpc_launch.transport.send_files import MAX_BYTES, FileWriteError, OutgoingFile, run_with_files

STAMP = "20260101-000000-000"
SECRET = "s3cr3t-value"


def fresh(server) -> SSHTransport:
    return SSHTransport(server.alias, ssh_config=str(server.ssh_config))


def sessions_and_sftp(monkeypatch):
    """Counts the channels opened and the SFTP sessions started, from paramiko itself."""
    import paramiko

    seen = {"sessions": 0, "sftp": 0}
    real_open = paramiko.Transport.open_session
    real_sftp = paramiko.SFTPClient.from_transport

    def open_session(self, *a, **k):
        seen["sessions"] += 1
        return real_open(self, *a, **k)

    def from_transport(*a, **k):
        seen["sftp"] += 1
        return real_sftp(*a, **k)

    monkeypatch.setattr(paramiko.Transport, "open_session", open_session)
    monkeypatch.setattr(paramiko.SFTPClient, "from_transport", from_transport)
    return seen


def leftovers(directory: Path):
    return sorted(p.name for p in directory.rglob("*")) if directory.exists() else []


# ---- the files arrive, exactly, in one channel ------------------------------------------------


def test_files_and_command_share_one_channel_byte_exact(server, tmp_path, monkeypatch):
    t = fresh(server)
    t.run(["true"])  # connected: what follows is the submit alone
    seen = sessions_and_sftp(monkeypatch)
    d = tmp_path / 'it\'s a "dir" $(x)' / "sub"  # does not exist yet: the files' directory, then the cwd
    binary = bytes(range(256)) + b"\r\n\0\r" * 100
    files = [
        OutgoingFile(str(d / "job.sh"), b"#!/bin/sh\r\necho hi\0\n", 0o755),
        OutgoingFile(str(d / "blob"), binary, 0o644),
        OutgoingFile(str(d / "job.secrets"), b"A\tYg==\n", private=True),
        OutgoingFile(str(d / "empty"), b"", 0o640),
    ]
    r = t.run_with_files(
        files,
        ["sh", "-c", 'pwd; umask; cat; printf "%s" "$1"', "sh", "arg $HOME"],
        cwd=str(d),
        stdin="the command's own stdin\n",
    )
    assert r.rc == 0, r
    pwd, umask, rest = r.out.split("\n", 2)
    assert pwd == str(d)
    assert umask not in ("0077", "077"), "the submit command runs with the login's own umask, not 077"
    assert rest == "the command's own stdin\narg $HOME"
    assert (d / "job.sh").read_bytes() == files[0].data and (d / "blob").read_bytes() == binary
    assert (d / "empty").read_bytes() == b""
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in d.iterdir()}
    assert modes == {"job.sh": 0o755, "blob": 0o644, "job.secrets": 0o600, "empty": 0o640}
    assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~int(umask, 8), "directories are made with the login's umask"
    assert seen == {"sessions": 1, "sftp": 0}, seen
    t.close()


def test_a_file_already_there_or_a_symlink_is_replaced_not_written_through(server, tmp_path):
    t = fresh(server)
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    link = tmp_path / "x.secrets"
    link.symlink_to(target)
    old = tmp_path / "x.sh"
    old.write_text("old")
    r = t.run_with_files(
        [OutgoingFile(str(link), b"A\tYg==\n", private=True), OutgoingFile(str(old), b"new", 0o755)], ["true"]
    )
    assert r.rc == 0
    assert target.read_text() == "untouched"
    assert not link.is_symlink() and link.read_bytes() == b"A\tYg==\n"
    assert stat.S_IMODE(link.stat().st_mode) == 0o600 and old.read_text() == "new"
    t.close()


def test_too_much_is_refused_before_anything_is_sent(server, tmp_path, monkeypatch):
    t = fresh(server)
    seen = sessions_and_sftp(monkeypatch)
    with pytest.raises(TransportError, match="limit is 64 MiB"):
        t.run_with_files([OutgoingFile(str(tmp_path / "big"), b"x" * (MAX_BYTES + 1))], ["true"])
    assert seen["sessions"] == 0 and not (tmp_path / "big").exists()


# ---- faults: nothing left behind, the command not run ------------------------------------------


def test_a_directory_that_cannot_be_written_leaves_nothing_and_runs_nothing(server, tmp_path):
    t = fresh(server)
    marker = tmp_path / "ran"
    ok = tmp_path / "ok"
    files = [OutgoingFile(str(ok / "a.sh"), b"a"), OutgoingFile("/sys/hpc-launch-test/b.sh", b"b")]
    with pytest.raises(FileWriteError) as err:
        t.run_with_files(files, ["touch", str(marker)])
    assert err.value.filename == "/sys/hpc-launch-test/b.sh"
    assert err.value.strerror in ("Permission denied", "Operation not permitted"), err.value.strerror
    assert not marker.exists()
    assert leftovers(ok) == [], "the first file's temporary copy must go too"
    t.close()


def test_a_full_disk_midway_leaves_nothing_and_runs_nothing(server, tmp_path):
    # a real full disk: a 64 KiB tmpfs, mounted as root (the project runs its tests as root, as CI does)
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        t = fresh(server)
        marker = tmp_path / "ran"
        files = [OutgoingFile(str(full / "small"), b"s" * 100), OutgoingFile(str(full / "big"), b"b" * 200_000)]
        with pytest.raises(FileWriteError) as err:
            t.run_with_files(files, ["touch", str(marker)])
        assert (err.value.filename, err.value.strerror) == (str(full / "big"), "No space left on device")
        assert not marker.exists() and leftovers(full) == []
        assert t.run(["echo", "still connected"]).out == "still connected\n"  # the channel ended cleanly
        t.close()
    finally:
        subprocess.run(["umount", str(full)], check=True)


def slow_sender(monkeypatch, chunk=4096, pause=0.02, at_half=None):
    """A slow link: stdin goes out in small chunks; `at_half()` runs once half of it is sent."""
    state = {"sent": 0}

    def send_all(channel, data):
        half_done = False
        for i in range(0, len(data), chunk):
            channel.send(data[i : i + chunk])
            state["sent"] = i + chunk
            if at_half and not half_done and i >= len(data) // 2:
                half_done = True
                at_half()
            time.sleep(pause)

    monkeypatch.setattr(ssh, "_send_all", send_all)
    return state


def test_the_secrets_file_is_0600_on_the_far_side_all_through_its_transfer(server, tmp_path, monkeypatch):
    """Watched from the far side while a slow link sends it: every file that holds any of its bytes
    is mode 0600 from the moment it exists, and the final name appears only once it is whole."""
    t = fresh(server)
    d = tmp_path / "w"
    secret = b"TOKEN\t" + b"QUJD" * 20000 + b"\n"  # 80 KB: about 20 chunks, 0.4 s on the slow link
    seen_modes, dir_modes, stop = set(), set(), threading.Event()
    seen_final_partial = []

    def look() -> None:
        for p in d.rglob("*") if d.exists() else []:
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue
            (dir_modes if stat.S_ISDIR(st.st_mode) else seen_modes).add(stat.S_IMODE(st.st_mode))
            if p.parent == d and p.name == "job.secrets" and st.st_size != len(secret):
                seen_final_partial.append(st.st_size)

    def watch():
        while not stop.is_set():
            try:
                look()
            except FileNotFoundError:  # the receiver removed its directory while rglob walked it: look again
                pass
            time.sleep(0.002)

    def look_mid_transfer():  # one look for certain, whatever the watcher thread got of a loaded CPU
        deadline = time.monotonic() + 5
        while not dir_modes and time.monotonic() < deadline:
            try:
                look()
            except FileNotFoundError:
                pass
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    slow_sender(monkeypatch, at_half=look_mid_transfer)
    try:
        r = t.run_with_files([OutgoingFile(str(d / "job.secrets"), secret, private=True)], ["true"])
    finally:
        stop.set()
        watcher.join()
    assert r.rc == 0
    assert seen_modes == {0o600}, f"modes seen during the transfer: {sorted(map(oct, seen_modes))}"
    assert dir_modes == {0o700}, "it arrives in a directory only its owner can enter"
    assert not seen_final_partial, "the final name must appear only once the file is whole"
    assert (d / "job.secrets").read_bytes() == secret
    t.close()


def test_connection_cut_mid_transfer_leaves_nothing_and_runs_nothing(server, tmp_path, monkeypatch):
    t = fresh(server)
    before = set(server.session_pids())
    t.run(["true"])
    ours = set(server.session_pids()) - before
    assert len(ours) == 1
    d = tmp_path / "w"
    marker = tmp_path / "ran"
    slow_sender(monkeypatch, at_half=lambda: os.kill(ours.pop(), 15))
    files = [
        OutgoingFile(str(d / "job.sh"), b"#!/bin/sh\n" * 5000, 0o755),
        OutgoingFile(str(d / "s"), b"x", private=True),
    ]
    with pytest.raises(TransportError) as err:
        t.run_with_files(files, ["touch", str(marker)], timeout=60)
    assert err.value.maybe_ran is True  # the far side alone knows how far it got: never resent blindly
    deadline = time.monotonic() + 20
    while leftovers(d) and time.monotonic() < deadline:  # the far side sees EOF, then cleans up
        time.sleep(0.1)
    assert leftovers(d) == [] and not marker.exists()
    t.close()


def test_connection_cut_while_the_command_runs_keeps_the_files_and_runs_it_once(server, tmp_path):
    t = fresh(server)
    before = set(server.session_pids())
    t.run(["true"])
    ours = set(server.session_pids()) - before
    marker = tmp_path / "ran"
    outcome = {}

    def submit():
        try:
            t.run_with_files(
                [OutgoingFile(str(tmp_path / "job.sh"), b"x")], ["sh", "-c", f"echo once >> '{marker}'; sleep 30"]
            )
        except TransportError as exc:
            outcome["err"] = exc

    worker = threading.Thread(target=submit)
    worker.start()
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(ours.pop(), 15)
    worker.join(45)
    assert outcome["err"].maybe_ran is True
    assert marker.read_text() == "once\n" and (tmp_path / "job.sh").read_bytes() == b"x"
    t.close()


# ---- the submit path -------------------------------------------------------------------------


def _prepared(cluster, workdir, **kw):
    from hpc_launch.prepare import prepare
    from hpc_launch.spec import JobSpec

    spec = JobSpec(cluster=cluster, nodes=1, workdir=str(workdir), login="test-login", **kw)
    return prepare(spec, stamp=STAMP)


def test_submit_over_ssh_sends_every_file_with_one_command(server, tmp_path, monkeypatch):
    """`submit` of a local-dialect job over SSH: SFTP only resolves the work dir; the capsule, the
    script and the 0600 secrets file go on the submit command's stdin, and the job runs."""
    from hpc_launch.jobs import submit
    from hpc_launch.records import JobStore

    monkeypatch.setenv("MY_TOKEN", SECRET)
    workdir = tmp_path / "run"
    t = fresh(server)
    seen = sessions_and_sftp(monkeypatch)
    sftp_writes = []
    import paramiko

    monkeypatch.setattr(paramiko.SFTPClient, "open", lambda *a, **k: sftp_writes.append(a) or 1 / 0)
    commands = []
    real_exec = paramiko.Channel.exec_command
    monkeypatch.setattr(paramiko.Channel, "exec_command", lambda ch, c: commands.append(c) or real_exec(ch, c))
    rec = submit(_prepared("local", workdir, pass_env=["MY_TOKEN"]), transport=t, store=JobStore(tmp_path / "j.sqlite"))
    assert sftp_writes == [] and seen["sftp"] == 1  # the work dir's home, resolved once
    assert seen["sessions"] == 3, seen  # that SFTP session, the submit command with the files, the release
    assert Path(rec.script_path).exists() and stat.S_IMODE(Path(rec.script_path).stat().st_mode) == 0o755
    assert list((workdir / ".hpc-launch" / "capsules").glob("*/capsule.json"))
    assert SECRET not in Path(rec.script_path).read_text()
    # the submit command with the files, then the release once the job is recorded (dialects/none.py)
    assert len(commands) == 2 and SECRET not in commands[0], "the value travels on stdin, never in the command"
    assert "touch" in commands[1] and ".go" in commands[1]
    assert "base64" not in commands[0], "an ordinary submit needs no decoding on the login node"
    t.close()


def test_a_submit_command_that_fails_leaves_nothing_behind(server, tmp_path, monkeypatch):
    """The login node has no sbatch: the files were written with the command, the command failed,
    and every file (the secrets first of all) and the capsule's directories are gone again."""
    from hpc_launch.jobs import submit
    from hpc_launch.records import JobStore

    monkeypatch.setenv("MY_TOKEN", SECRET)
    workdir = tmp_path / "run"
    workdir.mkdir()
    t = fresh(server)
    store = JobStore(tmp_path / "j.sqlite")
    with pytest.raises(SchedulerError, match="sbatch"):
        submit(
            _prepared("slurm", workdir, pass_env=["MY_TOKEN"], group="g1"),
            transport=t,
            store=store,
            sleep=lambda s: None,
        )
    assert [p for p in workdir.rglob("*") if not p.is_dir()] == []
    assert leftovers(workdir) in ([], [".hpc-launch"])  # the capsule's directories went too
    assert store.list() == []
    t.close()


def test_a_work_dir_that_cannot_be_written_is_one_line_naming_the_fix(server, tmp_path):
    from hpc_launch.jobs import submit
    from hpc_launch.records import JobStore

    t = fresh(server)
    with pytest.raises(SpecError) as err:
        submit(_prepared("local", "/sys/hpc-launch-test"), transport=t, store=JobStore(tmp_path / "j.sqlite"))
    line = err.value.one_line()
    assert line.startswith("cannot write /sys/hpc-launch-test/") and "on test-login" in line
    assert "pass --workdir with a directory you can write" in line and "\n" not in line
    t.close()


def test_without_ssh_the_same_files_are_written_one_by_one(tmp_path):
    """Transports with no run_with_files (here, tests' fakes) get each file, then the command."""
    from hpc_launch.transport import LocalTransport

    d = tmp_path / "d"
    r = run_with_files(
        LocalTransport(),
        [OutgoingFile(str(d / "a"), b"A", 0o755), OutgoingFile(str(d / "s"), b"S", private=True)],
        ["cat", str(d / "a")],
    )
    assert r.out == "A" and stat.S_IMODE((d / "s").stat().st_mode) == 0o600
    assert stat.S_IMODE((d / "a").stat().st_mode) == 0o755
    with pytest.raises(FileWriteError) as err:
        run_with_files(LocalTransport(), [OutgoingFile("/sys/hpc-launch-test/x", b"x")], ["true"])
    assert err.value.filename == "/sys/hpc-launch-test/x"


def test_the_receiver_runs_in_the_login_shell_itself_quoted_portably():
    """No second shell and no base64 decoding for ordinary paths: each process costs on a busy login node."""
    from hpc_launch.transport.remote_command import wrap_remote_command
    from hpc_launch.transport.send_files import RECEIVER, receiver_args

    files = [OutgoingFile("/home/u/run/.hpc-launch/train-1.sh", b"x", 0o755)]
    command = wrap_remote_command(receiver_args(files, ["qsub", "train-1.sh"], "~/run"), runner=RECEIVER)
    assert command.startswith("bash -lc '") and "base64" not in command and "bash -c" not in command


def test_paths_no_login_shell_reads_literally_still_arrive(server, tmp_path):
    """`!`, backslashes and non-ASCII send the whole command base64-encoded (remote_command.py)."""
    t = fresh(server)
    d = tmp_path / "héllo ✓ !bang \\ back"
    r = t.run_with_files([OutgoingFile(str(d / "x!.sh"), b"ok\n", 0o700)], ["cat", "x!.sh"], cwd=str(d))
    assert (r.rc, r.out) == (0, "ok\n") and stat.S_IMODE((d / "x!.sh").stat().st_mode) == 0o700
    t.close()


# ---- hpc-launch's own share: paramiko without invoke -------------------------------------------


def test_connecting_does_not_import_invoke(server):
    """paramiko.config imports invoke (and asyncio, unittest.mock, yaml) only for `Match exec`."""
    code = (
        "import sys; from hpc_launch.transport import SSHTransport; "
        f"t = SSHTransport({server.alias!r}, ssh_config={str(server.ssh_config)!r}); "
        "r = t.run(['echo', 'ok']); t.close(); "
        "print(r.out.strip(), 'invoke' in sys.modules, 'asyncio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["ok", "False", "False"], out.stderr


def test_match_exec_in_ssh_config_still_works(server, tmp_path):
    config = tmp_path / "config"
    config.write_text(
        'Match host nowhere-alias exec "test 1 = 1"\n  HostName 127.0.0.1\n\n'
        + server.block(alias="nowhere-alias", HostName="203.0.113.1").replace("Host nowhere-alias\n", "Host *\n")
    )
    code = (
        "import sys; from hpc_launch.transport import SSHTransport; "
        f"t = SSHTransport('nowhere-alias', ssh_config={str(config)!r}, connect_timeout=5); "
        "print(t.run(['echo', 'ok']).out.strip()); t.close()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
