"""Transports against the real thing: subprocess locally, a real OpenSSH sshd on 127.0.0.1 remotely."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

from hpc_launch.errors import HostKeyError, TransportError
from hpc_launch.transport import LocalTransport, SSHTransport, close_all, open_transport, wrap_remote_command

try:
    from sshd import SshdHandle, free_port, prepare_sshd, start_sshd, write_ssh_config
except ImportError:  # tests/ imported as a package
    from tests.sshd import SshdHandle, free_port, prepare_sshd, start_sshd, write_ssh_config

HOSTILE = [
    'it\'s "quoted"',
    "$(touch /tmp/hpc-launch-pwned)",
    "`touch /tmp/hpc-launch-pwned`",
    "a; touch /tmp/hpc-launch-pwned",
    "line1\nline2\n",
    "back\\slash !bang $HOME * ?",
    "unicode héllo ✓",
    "",
]


# `server`, `shared_ssh` and `transport` (local and ssh) come from conftest.py.


def fresh(server: SshdHandle, **kw) -> SSHTransport:
    return SSHTransport(server.alias, ssh_config=str(server.ssh_config), **kw)


# ---------------------------------------------------------------- same behaviour on both transports


def test_run_returns_rc_stdout_and_stderr(transport):
    res = transport.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.out, res.err) == (3, "out\n", "err\n")


def test_missing_program_is_rc_127_not_an_exception(transport):
    assert transport.run(["hpc-launch-no-such-program"]).rc == 127


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_argv_env_and_stdin_arrive_verbatim(transport, value):
    if os.path.exists("/tmp/hpc-launch-pwned"):
        os.unlink("/tmp/hpc-launch-pwned")
    assert transport.run(["printf", "%s", value]).out == value
    assert transport.run(["sh", "-c", 'printf %s "$V"'], env={"V": value}).out == value
    assert transport.run(["cat"], stdin=value).out == value
    assert not os.path.exists("/tmp/hpc-launch-pwned")


def test_hostile_cwd_is_entered_verbatim(transport, tmp_path):
    odd = tmp_path / "dir with 'quote' $(x) `y`; z"
    odd.mkdir()
    res = transport.run(["pwd"], cwd=str(odd))
    assert (res.rc, res.out) == (0, f"{odd}\n")
    assert transport.run(["pwd"], cwd=str(tmp_path / "missing")).rc != 0


def test_invalid_env_name_is_refused_before_running(transport):
    with pytest.raises(ValueError):
        transport.run(["true"], env={"A;rm -rf /": "x"})


def test_stdin_is_closed_when_not_given(transport):
    res = transport.run(["cat"], timeout=10)  # would hang if stdin stayed open
    assert (res.rc, res.out) == (0, "")


def test_files_put_read_size_remove(transport, tmp_path):
    path = str(tmp_path / "a" / "b" / "job.sh")
    assert transport.size(path) is None
    with pytest.raises(FileNotFoundError):
        transport.read_from(path, 0)
    transport.put_text(path, "#!/bin/sh\necho héllo\n", mode=0o750)
    assert transport.size(path) == len("#!/bin/sh\necho héllo\n".encode())
    assert os.stat(path).st_mode & 0o777 == 0o750
    assert transport.read_from(path, 10) == "echo héllo\n".encode()
    assert transport.read_from(path, 10, limit=4) == b"echo"
    transport.put_text(path, "replaced\n")
    assert transport.read_from(path, 0) == b"replaced\n"
    assert os.listdir(tmp_path / "a" / "b") == ["job.sh"]  # no temp files left behind
    transport.remove(path)
    transport.remove(path)  # idempotent
    assert transport.size(path) is None


def test_resolve_path_expands_home_and_relative(transport):
    home = os.path.expanduser("~")  # the test sshd logs in as this same user
    assert transport.resolve_path("~/runs/x") == f"{home}/runs/x"
    assert transport.resolve_path("/abs/../abs/y") == "/abs/y"
    expected_rel = os.path.abspath("rel") if isinstance(transport, LocalTransport) else f"{home}/rel"
    assert transport.resolve_path("rel") == expected_rel


def test_timeout_raises_maybe_ran_and_never_reruns(transport, tmp_path):
    marker = tmp_path / "ran"
    start = time.monotonic()
    # 4 s: the command must have started before the timeout for "it ran once" to be the question
    # (a loaded machine took over a second to start it through sshd)
    with pytest.raises(TransportError) as info:
        transport.run(["sh", "-c", f"echo once >> '{marker}'; sleep 30"], timeout=4.0)
    assert time.monotonic() - start < 15
    assert info.value.maybe_ran is True
    assert marker.read_text() == "once\n"
    assert transport.run(["echo", "still usable"]).out == "still usable\n"


# ---------------------------------------------------------------- ssh specifics


def test_remote_command_uses_login_shell_and_quotes_portably():
    plain = wrap_remote_command(["qsub", "job.sh"], cwd="/scratch/run 1", env={"A": "b"})
    assert plain.startswith("bash -lc '") and "qsub job.sh" in plain
    odd = wrap_remote_command(["echo", "a\nb!"])
    assert odd.startswith("bash -lc 'eval ") and "\n" not in odd and "!" not in odd


def test_one_connection_serves_all_calls(server, tmp_path):
    before = server.accepted_logins()
    t = fresh(server)
    for i in range(10):
        assert t.run(["echo", str(i)]).out == f"{i}\n"
    t.put_text(str(tmp_path / "f"), "x")
    assert t.size(str(tmp_path / "f")) == 1
    assert t.read_from(str(tmp_path / "f"), 0) == b"x"
    assert t.connects == 1
    assert server.accepted_logins() - before == 1
    t.close()


def test_open_transport_caches_per_host(server):
    assert isinstance(open_transport(None), LocalTransport)
    assert isinstance(open_transport("localhost"), LocalTransport)
    a = open_transport(server.alias, ssh_config=str(server.ssh_config))
    b = open_transport(server.alias, ssh_config=str(server.ssh_config))
    assert a is b
    assert a.run(["true"]).rc == 0 and b.run(["true"]).rc == 0
    assert a.connects == 1
    close_all()


def test_unknown_host_key_is_refused_before_authenticating(server, tmp_path, monkeypatch):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    monkeypatch.setenv("HPC_LAUNCH_KNOWN_HOSTS", str(empty))
    before = server.accepted_logins()
    with pytest.raises(HostKeyError) as info:
        fresh(server).run(["true"])
    msg = str(info.value)
    assert "not in known_hosts" in msg and f"{server.alias}` once" in msg and "\n" not in msg
    assert server.accepted_logins() == before  # no credentials offered to an unverified host


def test_changed_host_key_is_refused_with_a_distinct_message(server, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(f"{server.known_hosts_name} {other}\n")
    with pytest.raises(HostKeyError) as info:
        fresh(server, known_hosts=str(known)).run(["true"])
    msg = str(info.value)
    assert "CHANGED" in msg and "man-in-the-middle" in msg and "ssh-keygen -R" in msg
    assert "not in known_hosts" not in msg


def test_host_key_alias_selects_the_known_hosts_entry(server, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"my-login-alias {server.host_key_pub}\n")
    cfg = write_ssh_config(
        tmp_path / "config", [server.block(HostKeyAlias="my-login-alias", UserKnownHostsFile=str(known))]
    )
    assert SSHTransport(server.alias, ssh_config=str(cfg)).run(["echo", "ok"]).out == "ok\n"
    # The [127.0.0.1]:port entry is not consulted once HostKeyAlias says otherwise.
    cfg2 = write_ssh_config(tmp_path / "config2", [server.block(HostKeyAlias="another-alias")])
    with pytest.raises(HostKeyError):
        SSHTransport(server.alias, ssh_config=str(cfg2)).run(["true"])


def test_proxyjump_single_and_multi_hop(server, tmp_path):
    jump = start_sshd(tmp_path / "jump", alias="test-jump")
    try:
        # The target's own block already names its known_hosts; jump's file is added via the block.
        cfg = write_ssh_config(
            tmp_path / "config",
            [
                jump.block(),
                server.block(alias="via-jump", ProxyJump="test-jump"),
                server.block(alias="via-two-jumps", ProxyJump="test-jump,test-jump"),
            ],
        )
        before = jump.accepted_logins()
        t = SSHTransport("via-jump", ssh_config=str(cfg))
        assert t.run(["echo", "through the jump"]).out == "through the jump\n"
        assert jump.accepted_logins() - before == 1
        t2 = SSHTransport("via-two-jumps", ssh_config=str(cfg))
        assert t2.run(["echo", "two hops"]).out == "two hops\n"
        assert jump.accepted_logins() - before == 3
        t.close()
        t2.close()
        jump.stop()
        # With the jump host gone the target is unreachable through it: the jump really was used.
        with pytest.raises(TransportError) as info:
            SSHTransport("via-jump", ssh_config=str(cfg), retries=0).run(["true"])
        assert info.value.maybe_ran is False
    finally:
        jump.stop()


def test_closed_port_fails_fast_after_bounded_retries(server, tmp_path):
    port = free_port()
    cfg = write_ssh_config(tmp_path / "config", [server.block(alias="closed", Port=str(port))])
    t = SSHTransport("closed", ssh_config=str(cfg), retries=2, backoff=0.05)
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        t.run(["true"])
    assert time.monotonic() - start < 2
    assert t.connect_attempts == 3
    assert info.value.maybe_ran is False
    assert "cannot connect" in str(info.value)


class _Silent:
    """A TCP listener on 127.0.0.1 that accepts every connection and never writes: not an SSH server."""

    def __init__(self, close_at_once: bool = False):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted: list = []
        self.close_at_once = close_at_once
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            if self.close_at_once:
                conn.close()
            self.accepted.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def test_silent_server_is_named_once_without_retrying(server, tmp_path):
    silent = _Silent()
    try:
        cfg = write_ssh_config(tmp_path / "config", [server.block(alias="silent", Port=str(silent.port))])
        t = SSHTransport("silent", ssh_config=str(cfg), connect_timeout=0.5, retries=3, backoff=0.1)
        start = time.monotonic()
        with pytest.raises(TransportError) as info:
            t.run(["true"])
        elapsed = time.monotonic() - start
    finally:
        silent.close()
    # another try would wait as long for the same silence
    assert t.connect_attempts == 1 and 0.4 < elapsed < 2
    text = str(info.value)
    assert f"127.0.0.1:{silent.port} (silent) accepted the connection but sent no SSH banner within 0.5 s" in text
    assert "is it an SSH server?" in text and f"check HostName and Port of silent in {cfg}" in text
    assert info.value.maybe_ran is False


def test_silent_server_is_one_line_on_stderr_for_status(tmp_path, hpc_launch_bin):
    """`status` against it: one line naming the banner, promptly (ssh_config ConnectTimeout), no paramiko traceback."""
    silent = _Silent()
    cfg = write_ssh_config(
        tmp_path / "config", [f"Host silent\n  HostName 127.0.0.1\n  Port {silent.port}\n  ConnectTimeout 2\n"]
    )
    env = {**os.environ, "HPC_LAUNCH_SSH_CONFIG": str(cfg)}
    try:
        adopted = subprocess.run(
            [hpc_launch_bin, "adopt", "123", "--cluster", "slurm", "--workdir", "/x", "--login", "silent"],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert adopted.returncode == 0, adopted.stderr
        start = time.monotonic()
        r = subprocess.run([hpc_launch_bin, "status"], capture_output=True, text=True, env=env, timeout=60)
        elapsed = time.monotonic() - start
    finally:
        silent.close()
    assert elapsed < 2 + 4  # one try of 2 s, and the CLI's start
    assert "Traceback" not in r.stderr and "No existing session" not in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert f"127.0.0.1:{silent.port} (silent) accepted the connection but sent no SSH banner within 2 s" in r.stderr


def test_connection_closed_before_the_banner_is_retried(server, tmp_path):
    """sshd's MaxStartups drops a connection before its banner: a retry can get in."""
    closing = _Silent(close_at_once=True)
    try:
        cfg = write_ssh_config(tmp_path / "config", [server.block(alias="closing", Port=str(closing.port))])
        t = SSHTransport("closing", ssh_config=str(cfg), retries=2, backoff=0.05)
        with pytest.raises(TransportError) as info:
            t.run(["true"])
    finally:
        closing.close()
    assert t.connect_attempts == 3
    assert "cannot connect to closing" in str(info.value)


def test_connect_retries_until_the_server_comes_up(tmp_path):
    late = prepare_sshd(tmp_path / "late", alias="late-login")
    timer = threading.Timer(0.7, late.start)
    timer.start()
    try:
        t = SSHTransport(late.alias, ssh_config=str(late.ssh_config), retries=5, backoff=0.25)
        assert t.run(["echo", "up"]).out == "up\n"
        assert t.connect_attempts > 1 and t.connects == 1
        t.close()
    finally:
        timer.join()
        late.stop()


def test_connection_lost_mid_command_reports_maybe_ran_and_does_not_resend(server, tmp_path):
    marker = tmp_path / "ran"
    sessions_before = set(server.session_pids())
    t = fresh(server)
    t.run(["true"])
    ours = set(server.session_pids()) - sessions_before
    assert len(ours) == 1
    outcome = {}

    def submit():
        try:
            t.run(["sh", "-c", f"echo once >> '{marker}'; sleep 30"], timeout=60)
        except TransportError as exc:
            outcome["err"] = exc

    worker = threading.Thread(target=submit)
    worker.start()
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    os.kill(ours.pop(), 15)  # cut only this transport's connection
    # sshd's monitor hands the signal to its session process, which closes the connection: seconds on
    # a loaded machine (seen > 15 s in CI). Had the cut not happened, the command's 30 s would end
    # first and the worker return without an error, which the next line refuses.
    worker.join(45)
    assert not worker.is_alive()
    assert outcome["err"].maybe_ran is True, "the connection was not cut: the command ran to its end"
    assert marker.read_text() == "once\n"
    assert t.run(["echo", "reconnected"]).out == "reconnected\n"
    assert t.connects == 2
    t.close()


def test_login_script_noise_is_cut_from_output(tmp_path):
    noise = tmp_path / "noise.sh"
    sourced = tmp_path / "sourced"
    noise.write_text(f"echo 'Welcome to the cluster'; echo 'module: loaded' >&2; echo x >> '{sourced}'\n")
    noisy = start_sshd(tmp_path / "noisy", alias="noisy-login", extra_config=[f"SetEnv BASH_ENV={noise}"])
    try:
        t = SSHTransport(noisy.alias, ssh_config=str(noisy.ssh_config))
        res = t.run(["sh", "-c", "echo 1234.pbs; echo warn >&2"])
        assert (res.out, res.err) == ("1234.pbs\n", "warn\n")
        assert sourced.exists()  # the noise really was printed, and cut
        t.close()
    finally:
        noisy.stop()
