"""--pass-env (hpc_launch/secrets.py): the values reach the job in a 0600 file the job's first
lines read and delete; never in argv, the script, the record, or the submit command's
environment (where sbatch's --export=ALL or `qsub -v` would hand them to the scheduler)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from hpc_launch import secrets
from hpc_launch.site import profiles
from hpc_launch.errors import SchedulerError
from hpc_launch.jobs import submit
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve
from hpc_launch.prepare import prepare
from hpc_launch.transport import CommandResult, LocalTransport, wrap_remote_command

from fakes import FakeTransport

SECRET = "s3cr3t-\u00e9-'\"$(touch pwned)`id`\\n"
STAMP = "20260101-000000-000"

# Values a shell mangles easily: every byte but NUL must arrive exactly.
VALUES = {
    "PLAIN": b"abc123",
    "EMPTY": b"",
    "NEWLINES": b"line1\nline2\n\n",
    "TABS_SPACES": b"\t a b \t",
    "SHELL": b"'\"$(touch pwned)`touch pwned2`\\ ; rm -rf / #",
    "NOT_UTF8": b"\xff\xfe\x80 latin1 \xe9",
    "DASHES": b"-n -e --",
    "EQUALS": b"=a=b=",
    "LONG": bytes(range(1, 256)) * 200,
}


def _job(tmp_path, names, cluster="local", **kw):
    spec = JobSpec(cluster=cluster, nodes=1, pass_env=list(names), workdir=str(tmp_path), venv="/opt/venv", **kw)
    return resolve(spec, profiles.load(cluster), cwd=str(tmp_path))


def _secrets_block(text: str) -> str:
    """The rendered lines that read the secrets file (from the prologue)."""
    m = re.search(r"^HPC_LAUNCH_SECRETS=.*?^unset HPC_LAUNCH_NAME HPC_LAUNCH_VALUE\n", text, re.DOTALL | re.MULTILINE)
    assert m, "the script has no secrets block"
    return m.group(0)


def _run_block(tmp_path, names, file_bytes: Optional[bytes], also=()):
    """Run the rendered block as the job would, then dump each variable's bytes to a file."""
    script = render(_job(tmp_path, names), stamp=STAMP)
    secrets_file = tmp_path / ".hpc-launch" / f"{script.script_name[:-3]}.secrets"
    secrets_file.parent.mkdir(exist_ok=True)
    if file_bytes is not None:
        secrets_file.write_bytes(file_bytes)
    dump = "\n".join(f'if [ -n "${{{n}+set}}" ]; then printf %s "${n}" > out.{n}; fi' for n in [*names, *also])
    body = (
        f'set -Eeo pipefail\nWORKDIR={tmp_path}\ncd "$WORKDIR"\nHPC_LAUNCH_SCRIPT={script.script_name}\n'
        + _secrets_block(script.text)
        + dump
        + "\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in names and k != "LD_PRELOAD"}
    r = subprocess.run(["bash", "-c", body], cwd=tmp_path, env=env, capture_output=True, timeout=30)
    return r, secrets_file


def test_every_byte_but_nul_reaches_the_job_exactly(tmp_path, monkeypatch):
    for name in VALUES:
        monkeypatch.setenv(name, "x")  # resolve() checks they are set
    r, secrets_file = _run_block(tmp_path, list(VALUES), secrets.encode(VALUES))
    assert r.returncode == 0, r.stderr
    for name, value in VALUES.items():
        assert (tmp_path / f"out.{name}").read_bytes() == value, name
    assert not secrets_file.exists(), "the job must delete the secrets file"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists(), "a value was run as code"
    assert r.stdout == b"" and r.stderr == b"", "reading the secrets must print nothing"


def test_the_file_format_is_name_tab_base64_per_line():
    assert secrets.encode({"A": "x y", "B": b"\n"}) == b"A\teCB5\nB\tCg==\n"
    assert secrets.collect(["A"], {"A": "caf\udce9"}) == {"A": b"caf\xe9"}  # a non-UTF-8 byte as the shell had it
    with pytest.raises(ValueError):
        secrets.encode({"A": b"a\0b"})


def test_only_the_names_asked_for_are_exported(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "x")
    forged = secrets.encode({"MY_TOKEN": b"ok", "PATH": b"/evil", "LD_PRELOAD": b"/evil.so"})
    r, _ = _run_block(tmp_path, ["MY_TOKEN"], forged, also=("PATH", "LD_PRELOAD"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.MY_TOKEN").read_bytes() == b"ok"
    assert (tmp_path / "out.PATH").read_bytes() == os.environ["PATH"].encode()
    assert not (tmp_path / "out.LD_PRELOAD").exists()


def test_a_missing_secrets_file_fails_the_job_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "x")
    r, _ = _run_block(tmp_path, ["MY_TOKEN"], None)
    assert r.returncode == 1
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "--pass-env MY_TOKEN" in lines[0] and "submit the job again" in lines[0]
    assert not (tmp_path / "out.MY_TOKEN").exists()


def test_without_pass_env_the_script_has_no_secrets_block(tmp_path):
    assert "HPC_LAUNCH_SECRETS" not in render(_job(tmp_path, []), stamp=STAMP).text


@pytest.mark.parametrize("cluster", ["abci", "abci2", "miyabi", "polaris", "thetagpu", "slurm", "pods", "local"])
def test_every_site_script_reads_the_file_and_names_no_value(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", SECRET)
    monkeypatch.setenv("OTHER_KEY", SECRET + "2")
    kw = {"group": "g1"} if cluster != "pods" else {"hosts": ["10.0.0.11"]}
    job = _job(tmp_path, ["MY_TOKEN", "OTHER_KEY"], cluster=cluster, **kw)
    script = render(job, stamp=STAMP)
    assert SECRET not in script.text and "s3cr3t" not in " ".join(script.submit_argv)
    assert "-v" not in script.submit_argv and not any("MY_TOKEN" in a for a in script.submit_argv)
    assert "    MY_TOKEN|OTHER_KEY)\n" in _secrets_block(script.text)
    # the block comes before anything prints or starts
    assert script.text.index("HPC_LAUNCH_SECRETS=") < script.text.index('echo "[hpc-launch] job')
    if "mpirun " in script.text and "deepspeed" not in script.text:
        assert "-x MY_TOKEN -x OTHER_KEY" in script.text  # Open MPI forwards them by name to every rank
    path = tmp_path / f"{cluster}.sh"
    path.write_text(script.text)
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


# ---- the file: 0600 from its creation, never through an existing file or a symlink ---------


def test_private_file_is_0600_from_creation_over_both_transports(transport, tmp_path, monkeypatch):
    import paramiko

    def no_chmod(*_a, **_k):
        raise AssertionError("the mode must be set when the file is created, not changed afterwards")

    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(os, "fchmod", no_chmod)
    monkeypatch.setattr(paramiko.SFTPClient, "chmod", no_chmod)
    old_umask = os.umask(0)  # a permissive umask must not widen it
    try:
        path = str(tmp_path / "x.secrets")
        transport.put_private(path, b"A\tYg==\n")
    finally:
        os.umask(old_umask)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert Path(path).read_bytes() == b"A\tYg==\n"


def test_private_file_never_writes_through_an_existing_file_or_symlink(transport, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    link = tmp_path / "link.secrets"
    link.symlink_to(target)
    with pytest.raises(OSError):  # FileExistsError here, the SFTP server's failure over ssh
        transport.put_private(str(link), b"A\tYg==\n")
    with pytest.raises(OSError):
        transport.put_private(str(target), b"A\tYg==\n")
    assert target.read_text() == "untouched"


# ---- the submit path: nothing on argv or in the submit command's environment ------------------


def RecordingTransport(submit_result: CommandResult) -> FakeTransport:  # noqa: N802
    """Runs nothing; records every command, its environment and every file written; every
    input the job needs (the venv) exists."""
    return FakeTransport(lambda argv: submit_result, every_file_exists=True)


@pytest.mark.parametrize("cluster", ["abci", "abci2", "thetagpu", "slurm", "local"])
def test_submit_writes_the_file_first_and_keeps_the_value_off_argv_and_env(cluster, tmp_path, monkeypatch):
    from hpc_launch.records import JobStore

    monkeypatch.setenv("MY_TOKEN", SECRET)
    out = {"slurm": "Submitted batch job 42\n", "abci2": 'Your job 42 ("train") has been submitted\n'}.get(
        cluster, "42\n"
    )
    spec = JobSpec(
        cluster=cluster,
        nodes=1,
        group="g1",
        pass_env=["MY_TOKEN"],
        workdir=str(tmp_path),
        venv="/opt/venv",
        login="local",
    )
    t = RecordingTransport(CommandResult(0, out, ""))
    store = JobStore(tmp_path / "jobs.sqlite")
    rec = submit(prepare(spec, stamp=STAMP), transport=t, store=store)

    # the scheduler's check (Slurm, Grid Engine: hpc_launch/jobs/where.py) runs before the secrets
    # exist, and without the variable too
    checks = [c for c in t.calls if c[0] == "run" and ("--test-only" in c[1] or "-w" in c[1])]
    assert all(c[2] == {"MY_TOKEN": None} for c in checks)
    # with no scheduler the job starts once recorded: the release file comes last (dialects/none.py)
    if t.calls[-1][0] == "put_text" and str(t.calls[-1][1]).endswith(".go"):
        t.calls.pop()
    kinds = [c[0] for c in t.calls if c not in checks]
    # the capsule's files and the script, then the secrets: the file exists before the scheduler has the job
    assert kinds[-2:] == ["put_private", "run"] and set(kinds[:-2]) == {"put_text"}, kinds
    assert rec.script_path in [c[1] for c in t.calls[:-2]]
    secrets_path = t.calls[-2][1]
    assert secrets_path == secrets.path_for(rec.script_path) == f"{tmp_path}/.hpc-launch/train-{STAMP}.secrets"
    assert t.files[secrets_path] == secrets.encode({"MY_TOKEN": SECRET})
    _, argv, env, stdin = t.calls[-1]
    assert not any("s3cr3t" in a for a in argv) and "-v" not in argv
    env = {k: v for k, v in env.items() if k != "HPC_LAUNCH_SUBMITTER"}  # local: which process submits
    assert env == {"MY_TOKEN": None}, "the submit command must run without the variable"
    assert stdin is None
    assert "s3cr3t" not in t.files[rec.script_path].decode()
    for f in tmp_path.glob("jobs.sqlite*"):  # the database and its journal
        assert b"s3cr3t" not in f.read_bytes(), f
    assert "s3cr3t" not in repr(rec)


def test_a_refused_submit_removes_the_secrets_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", SECRET)
    spec = JobSpec(
        cluster="abci",
        nodes=1,
        group="g1",
        pass_env=["MY_TOKEN"],
        workdir=str(tmp_path),
        venv="/opt/venv",
        login="local",
    )
    t = RecordingTransport(CommandResult(1, "", "qsub: Unknown queue\n"))
    prepared = prepare(spec, stamp=STAMP)
    with pytest.raises(SchedulerError):
        submit(prepared, transport=t, sleep=lambda s: None)
    assert t.files == {}, "the secrets file and the script must not outlive a refused submit"
    assert ("remove", secrets.path_for(prepared.script_path)) in t.calls


def test_a_refused_submit_removes_the_real_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", SECRET)
    fake_qsub = tmp_path / "bin" / "qsub"
    fake_qsub.parent.mkdir()
    fake_qsub.write_text("#!/bin/sh\necho 'qsub: Unknown queue' >&2\nexit 1\n")
    fake_qsub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_qsub.parent}:{os.environ['PATH']}")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "activate").write_text("")
    spec = JobSpec(
        cluster="abci",
        nodes=1,
        group="g1",
        pass_env=["MY_TOKEN"],
        workdir=str(tmp_path / "w"),
        venv=str(tmp_path / "venv"),
        login="local",
    )
    (tmp_path / "w").mkdir()
    with pytest.raises(SchedulerError):
        submit(prepare(spec, stamp=STAMP), transport=LocalTransport(), sleep=lambda s: None)
    assert list((tmp_path / "w" / ".hpc-launch").iterdir()) == []


def test_the_local_submit_command_runs_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", SECRET)
    r = LocalTransport().run(
        ["bash", "-c", 'echo "${MY_TOKEN-unset}"; echo "$KEEP"'], env={"MY_TOKEN": None, "KEEP": "k"}
    )
    assert r.out == "unset\nk\n"


def test_the_remote_submit_command_names_the_variable_but_never_its_value():
    cmd = wrap_remote_command(["qsub", "x.sh"], "~/w", {"MY_TOKEN": None})
    assert "unset MY_TOKEN" in cmd and "s3cr3t" not in cmd


def test_the_remote_submit_command_unsets_it_for_real(server, monkeypatch):
    # the login shell on the far side might export it (~/.bashrc): the submit command must not see it
    from hpc_launch.transport import SSHTransport

    t = SSHTransport(server.alias, ssh_config=str(server.ssh_config))
    try:
        r = t.run(["bash", "-c", 'echo "${HOME:+home} ${MY_TOKEN-unset}"'], env={"MY_TOKEN": None})
    finally:
        t.close()
    assert r.out == "home unset\n", r


def test_an_sftp_server_that_ignores_the_mode_is_refused(shared_ssh, tmp_path, monkeypatch):
    import paramiko

    from hpc_launch.errors import TransportError

    real_stat = paramiko.SFTPClient.stat

    def lax_stat(self, path):  # as a server would answer that created the file 0644
        st = real_stat(self, path)
        st.st_mode |= 0o044
        return st

    monkeypatch.setattr(paramiko.SFTPClient, "stat", lax_stat)
    path = tmp_path / "x.secrets"
    with pytest.raises(TransportError, match="mode 0600"):
        shared_ssh.put_private(str(path), b"A\tYg==\n")
    assert not path.exists()
