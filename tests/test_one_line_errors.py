"""Every failure a user can cause is one line naming the fix, a non-zero exit, nothing written,
and no job submitted; never a traceback (issue 8). Each case ran into a traceback before."""

from __future__ import annotations

import os
import sqlite3

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli


def _cli(bin_path, *args, cwd, env=None, **extra_env):
    env = dict(env or scheduler_env_cleared(), **extra_env)
    return run_cli(args, env=env, cwd=cwd)  # in-process (tests/inproc.py): a traceback still fails the test


def _one_line(r, *needles, rc=None):
    assert r.returncode != 0, (r.stdout, r.stderr)
    if rc is not None:
        assert r.returncode == rc, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hpc-launch: error: "), lines[0]
    assert "Traceback" not in r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def home(tmp_path):
    """A private config, state and cache dir, so a test can break them."""
    env = scheduler_env_cleared()
    env.update(
        HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"),
        HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    (tmp_path / "work").mkdir()
    return tmp_path, env


def test_unbalanced_quotes_in_train_args(hpc_launch_bin, home):
    tmp, env = home
    r = _cli(hpc_launch_bin, "submit", "--train-args", "--note 'abc", "--dry-run", cwd=tmp / "work", env=env)
    _one_line(r, "--train-args", "No closing quotation", rc=2)


@pytest.mark.parametrize(
    "yaml_text, needles",
    [
        ("nodes: two\n", ["key `nodes`", "Expected `int"]),
        ("nodez: 2\n", ["unknown key 'nodez'", "known keys"]),
        ("env: [A, B]\n", ["key `env`", "Expected `object`"]),
        ('train_args: "--note \'x"\n', ["key `train_args`", "No closing quotation"]),
        ("nodes: [1\n", ["cannot read the project config"]),
        ("queue: ''\n", ["key `queue` is empty", "leave it out"]),  # was the profile's default queue
    ],
)
def test_type_mistakes_in_hpc_launch_yaml(hpc_launch_bin, home, yaml_text, needles):
    tmp, env = home
    (tmp / "work" / "hpc-launch.yaml").write_text(yaml_text)
    r = _cli(hpc_launch_bin, "submit", "--dry-run", cwd=tmp / "work", env=env)
    _one_line(r, "hpc-launch.yaml", *needles, rc=2)


def test_hpc_launch_yaml_that_is_not_utf8(hpc_launch_bin, home):
    tmp, env = home
    (tmp / "work" / "hpc-launch.yaml").write_bytes(b"name: caf\xe9\n")
    _one_line(_cli(hpc_launch_bin, "submit", "--dry-run", cwd=tmp / "work", env=env), "not valid UTF-8", rc=2)


def test_a_broken_user_template_names_the_file_and_line(hpc_launch_bin, home):
    tmp, env = home
    tdir = tmp / "config" / "templates" / "body"
    tdir.mkdir(parents=True)
    (tdir / "rendezvous.sh.j2").write_text("MASTER_ADDR=x\n{% if %}\n")
    r = _cli(hpc_launch_bin, "submit", "--dry-run", cwd=tmp / "work", env=env)
    _one_line(r, "rendezvous.sh.j2, line 2", "fix or remove your override", rc=2)


def test_profile_with_invalid_utf8_breaks_only_itself(hpc_launch_bin, home):
    tmp, env = home
    cdir = tmp / "config" / "clusters"
    cdir.mkdir(parents=True)
    (cdir / "abci.yaml").write_bytes(b"group: {default: g\xff}\n")
    _one_line(
        _cli(hpc_launch_bin, "submit", "--cluster", "abci", "--dry-run", cwd=tmp / "work", env=env),
        "abci.yaml line 1",
        "not valid UTF-8",
    )
    ok = _cli(hpc_launch_bin, "submit", "--cluster", "local", "--dry-run", cwd=tmp / "work", env=env)
    assert ok.returncode == 0, ok.stderr


def test_a_yaml_typo_in_one_override_breaks_only_that_cluster(hpc_launch_bin, home):
    tmp, env = home
    cdir = tmp / "config" / "clusters"
    cdir.mkdir(parents=True)
    (cdir / "miyabi.yaml").write_text("group: {default: x\n")  # unclosed flow mapping
    _one_line(
        _cli(hpc_launch_bin, "submit", "--cluster", "miyabi", "--dry-run", cwd=tmp / "work", env=env),
        "miyabi.yaml",
        "not valid YAML",
    )
    assert _cli(hpc_launch_bin, "submit", "--dry-run", cwd=tmp / "work", env=env).returncode == 0
    listing = _cli(hpc_launch_bin, "clusters", cwd=tmp / "work", env=env)
    assert listing.returncode == 0 and "broken" in listing.stdout and "local" in listing.stdout


@pytest.mark.parametrize("option", ["--group", "--queue"])
def test_values_starting_with_a_dash_are_refused(hpc_launch_bin, home, option):
    tmp, env = home
    r = _cli(
        hpc_launch_bin,
        "submit",
        "--cluster",
        "abci",
        "--group",
        "g1",
        option,
        "-x",
        "--venv",
        "/v",
        "--dry-run",
        cwd=tmp / "work",
        env=env,
    )
    _one_line(r, "'-x'", rc=2)


def test_corrupted_job_store_says_how_to_recover(hpc_launch_bin, home):
    tmp, env = home
    (tmp / "state").mkdir()
    (tmp / "state" / "jobs.sqlite").write_bytes(b"this is not a database" * 100)
    line = _one_line(_cli(hpc_launch_bin, "list", cwd=tmp / "work", env=env), "is damaged", "move it aside", rc=3)
    assert str(tmp / "state" / "jobs.sqlite") in line


def test_unwritable_job_store_directory(hpc_launch_bin, home):
    if os.geteuid() == 0:
        # root ignores permissions: a store under a file (not a directory) fails the same way for everyone
        tmp, env = home
        (tmp / "state-file").write_text("")
        env["HPC_LAUNCH_STATE_DIR"] = str(tmp / "state-file" / "sub")
    else:
        tmp, env = home
        (tmp / "state").mkdir(mode=0o500)
    _one_line(_cli(hpc_launch_bin, "list", cwd=tmp / "work", env=env), "job store", "HPC_LAUNCH_STATE_DIR", rc=3)


def test_locked_job_store_is_one_line_after_the_busy_timeout(home, monkeypatch):
    tmp, _ = home
    from hpc_launch import records
    from hpc_launch.errors import StoreError

    monkeypatch.setattr(records, "_BUSY_TIMEOUT_S", 0.2)
    path = tmp / "jobs.sqlite"
    records.JobStore(path)
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="stayed locked by another process"):
            records.JobStore(path)  # opening writes (schema check) and waits for the lock
    finally:
        holder.execute("ROLLBACK")


def test_logs_before_the_log_exists_exits_2_with_a_hint(hpc_launch_bin, home):
    tmp, env = home
    from hpc_launch.records import JobRecord, JobStore

    JobStore(tmp / "state" / "jobs.sqlite").add(
        JobRecord(
            job_id="77",
            cluster="local",
            dialect="none",
            host="localhost",
            name="train",
            workdir=str(tmp / "work"),
            script_path=str(tmp / "work/.hpc-launch/train-x.sh"),
            log_path=str(tmp / "work/train.o77"),
            exit_path=str(tmp / "work/train.o77.exitcode"),
            submit_time=1.0,
            state="queued",
        )
    )
    r = _cli(hpc_launch_bin, "logs", "77", cwd=tmp / "work", env=env)
    _one_line(r, "does not exist yet", "logs -f 77", rc=2)


def test_a_store_path_that_is_a_directory(hpc_launch_bin, home):
    tmp, env = home
    (tmp / "state" / "jobs.sqlite").mkdir(parents=True)  # a directory where the store's file should be
    _one_line(_cli(hpc_launch_bin, "list", cwd=tmp / "work", env=env), "job store", rc=3)


def test_an_unexpected_error_is_one_line_and_the_traceback_is_one_variable_away(monkeypatch, capsys):
    from hpc_launch import cli
    from hpc_launch.site import profiles

    def boom(*a, **k):
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(profiles, "available", boom)
    monkeypatch.delenv("HPC_LAUNCH_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["clusters"])
    err = capsys.readouterr().err
    assert exit_.value.code == 1
    assert err.strip() == (
        "hpc-launch: error: RuntimeError: something nobody foresaw (HPC_LAUNCH_DEBUG=1 shows the traceback; "
        "please report it if the cause is unclear)"
    )
    monkeypatch.setenv("HPC_LAUNCH_DEBUG", "1")
    with pytest.raises(RuntimeError, match="nobody foresaw"):
        cli.main(["clusters"])


def test_a_store_that_fails_after_submission_prints_the_id_and_the_adopt_command(home, monkeypatch, capsys):
    """The job exists; the record could not be written (disk full at that moment): the id and the
    exact command that records it are printed, and that command works."""
    import shlex

    from hpc_launch import cli, records
    from hpc_launch.errors import StoreError

    tmp, env = home
    for key in ("HPC_LAUNCH_STATE_DIR", "HPC_LAUNCH_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    (tmp / "work" / "quick.py").write_text("print('hi')\n")
    real_add = records.JobStore.add

    def full_disk(self, rec):
        raise StoreError(f"cannot write the job store {self.path}: database or disk is full")

    monkeypatch.setattr(records.JobStore, "add", full_disk)
    monkeypatch.chdir(tmp / "work")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "--cluster", "local", "--script", "quick.py", "--gpus-per-node", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 3
    assert "was submitted but could not be recorded" in err and "disk is full" in err
    command = err.split("once the store works again: ", 1)[1].rstrip(")\n")
    monkeypatch.setattr(records.JobStore, "add", real_add)
    argv = shlex.split(command)
    assert argv[:2] == ["hpc-launch", "adopt"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv[1:])
    assert exit_.value.code == 0
    rec = records.JobStore().get(argv[2], "local")
    assert rec.workdir == str(tmp / "work") and rec.log_path.endswith(f"train.o{argv[2]}")
