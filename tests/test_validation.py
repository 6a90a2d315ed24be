"""Bad input: a one-line error that names the fix, exit code 2, nothing written, nothing submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli

CASES = [
    # (args, words the one-line error must contain)
    (["--cluster", "abcd"], ["unknown cluster", "abci"]),
    (["--cluster", "abci", "--nodes", "200", "--group", "g1"], ["above", "128", "--nodes"]),
    (
        ["--cluster", "abci", "--nodes", "2", "--group", "g1", "--walltime", "200:00:00"],
        ["above", "168:00:00", "--walltime"],
    ),
    (["--cluster", "abci", "--nodes", "2"], ["group", "--group"]),
    (["--cluster", "abci", "--nodes", "2", "--group", "g1", "--gpus-per-node", "9"], ["8 GPUs", "--gpus-per-node"]),
    (["--cluster", "abci", "--nodes", "2", "--group", "g1", "--walltime", "1:99:00"], ["walltime"]),
    (["--cluster", "abci", "--nodes", "2", "--group", "g1", "--walltime", "soon"], ["malformed walltime", "HH:MM:SS"]),
    (["--cluster", "abci", "--nodes", "2", "--group", "g1", "--queue", "rt_HX"], ["unknown queue", "rt_HF"]),
    (["--cluster", "abci", "--nodes", "2", "--group", "g;rm -rf", "--name", "x"], ["group", "characters"]),
    (["--cluster", "polaris", "--nodes", "3", "--group", "p", "--queue", "debug"], ["above", "2 nodes"]),
    (["--cluster", "polaris", "--nodes", "2", "--group", "p", "--queue", "prod"], ["below", "10"]),
    (["--cluster", "abci", "--nodes", "2", "--group", "g1", "--name", "1bad name"], ["job name", "--name"]),
    (["--cluster", "abci", "--nodes", "0", "--group", "g1"], ["--nodes"]),
    (["--cluster", "local", "--nodes", "2"], ["this machine", "pods"]),
    (["--cluster", "pods", "--nodes", "2"], ["--hosts"]),
    (["--cluster", "pods", "--nodes", "3", "--hosts", "a,b"], ["only 2 host", "--hosts"]),
    (["--cluster", "abci", "--nodes", "1", "--group", "g1", "--env", "NOEQUALS"], ["NAME=VALUE"]),
    (["--cluster", "abci", "--nodes", "1", "--group", "g1", "--env", "1X=y"], ["variable name", "--env"]),
    (["--cluster", "pods", "--nodes", "1", "--hosts", "a", "--env", "X=a\nb"], ["newline"]),
    (["--cluster", "abci", "--nodes", "1", "--group", "g1", "--bogus"], ["--bogus"]),
    (
        ["--cluster", "abci", "--nodes", "1", "--group", "g1", "--env", "WANDB_API_KEY=abc"],
        ["secret", "--pass-env WANDB_API_KEY"],
    ),
    (
        ["--cluster", "abci", "--nodes", "1", "--group", "g1", "--pass-env", "SURELY_UNSET_VAR_OF_HPC_LAUNCH_TESTS"],
        ["not set", "export"],
    ),
    # --pass-env: DeepSpeed's multi-node runners put forwarded values on a command line (ps)
    (
        ["--cluster", "pods", "--nodes", "2", "--hosts", "a,b", "--pass-env", "HOME"],
        ["--pass-env", "command line", "--nodes 1"],
    ),
    (
        ["--cluster", "abci", "--nodes", "1", "--group", "g1", "--pass-env", "HPC_LAUNCH_LOG"],
        ["HPC_LAUNCH_", "another name"],
    ),
    (
        ["--cluster", "abci", "--nodes", "1", "--group", "g1", "--env", "HOME=/x", "--pass-env", "HOME"],
        ["both", "--pass-env HOME"],
    ),
    (["--cluster", "abci", "--nodes", "x"], ["nodes"]),
    (["--cluster", "local", "--script", "/etc"], ["--script /etc", "is a directory", "script's file"]),
    (["--cluster", "local", "--venv", "/etc/passwd"], ["--venv /etc/passwd", "bin/activate"]),
    # issue 17: an empty value given is no default, a directive no way around a limit, bounds
    (["--cluster", ""], ["--cluster is empty"]),
    (["--cluster", "local", "--directive", "-l place=scatter"], ["local has no scheduler", "drop --directive"]),
    (
        ["--cluster", "abci", "--nodes", "1", "--group", "g1", "--directive", "-l walltime=999:00:00"],
        ["above", "168:00:00"],
    ),
    (["--cluster", "slurm", "--chain", "100000"], ["--chain", "1 to 1000"]),
]


def _run(bin_, args, cwd):
    return run_cli(["submit", *args], env=scheduler_env_cleared(), cwd=cwd)


@pytest.mark.parametrize("args,words", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_submit_is_one_line_exit_2_nothing_written(args, words, tmp_path, hpc_launch_bin):
    # no --dry-run: a real submit must be refused before anything is written or run
    r = _run(hpc_launch_bin, args + ["--login", "local"], tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hpc-launch: error: ")
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert r.stdout == ""
    assert list(tmp_path.iterdir()) == [], "something was written"


def test_dry_run_prints_script_on_stdout_and_command_on_stderr(tmp_path, hpc_launch_bin):
    r = _run(
        hpc_launch_bin,
        ["--cluster", "abci", "--nodes", "9", "--group", "g1", "--login", "local", "--dry-run"],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash\n")
    assert "qsub -N train -j oe" in r.stderr
    assert list(tmp_path.iterdir()) == [], "dry-run wrote something"


def test_project_config_supplies_defaults_and_options_override(tmp_path, hpc_launch_bin):
    (tmp_path / "hpc-launch.yaml").write_text(
        "cluster: abci\nnodes: 4\nproject: gcb50389\nwalltime: '2:00:00'\nenv: "
        "{WANDB_MODE: offline}\ntrain_args: --zero 3 --steps 5\n"
    )
    r = _run(hpc_launch_bin, ["--nodes", "2", "--login", "local", "--dry-run"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "#PBS -l select=2:mpiprocs=8" in r.stdout  # option wins
    assert "#PBS -P gcb50389" in r.stdout and "#PBS -l walltime=02:00:00" in r.stdout  # config supplies
    assert "export WANDB_MODE=offline" in r.stdout
    assert '"$HPC_TRAIN" --zero 3 --steps 5' in r.stdout


def test_project_config_unknown_key_is_refused(tmp_path, hpc_launch_bin):
    (tmp_path / "hpc-launch.yaml").write_text("clutser: abci\n")
    r = _run(hpc_launch_bin, ["--dry-run"], tmp_path)
    assert r.returncode == 2 and "unknown key 'clutser'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_broken_user_profile_names_file_and_key(tmp_path, hpc_launch_bin):
    bad = tmp_path / "mine.yaml"
    bad.write_text("name: mine\nextends: slurm\nlaunch: {launcher: srunn}\n")
    r = _run(hpc_launch_bin, ["--profile", str(bad), "--cluster", "mine", "--dry-run"], tmp_path)
    assert r.returncode == 2
    line = r.stderr.strip()
    assert str(bad) in line and "launch.launcher" in line and "srun-torchrun" in line


def test_user_profile_overrides_shipped_profile(tmp_path, hpc_launch_bin, monkeypatch):
    import os

    config = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"])
    (config / "clusters").mkdir(parents=True)
    (config / "clusters" / "abci.yaml").write_text("group: {default: gdefault1}\nmodules: {load: [cuda/12.8/12.8.1]}\n")
    r = _run(hpc_launch_bin, ["--cluster", "abci", "--nodes", "1", "--login", "local", "--dry-run"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "#PBS -P gdefault1" in r.stdout and "module load cuda/12.8/12.8.1\n" in r.stdout


def test_user_template_overrides_shipped_one(tmp_path, hpc_launch_bin):
    import os

    tdir = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body"
    tdir.mkdir(parents=True)
    (tdir / "rendezvous.sh.j2").write_text("export MASTER_ADDR=custom MASTER_PORT=1234\n")
    r = _run(hpc_launch_bin, ["--cluster", "slurm", "--nodes", "1", "--login", "local", "--dry-run"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "export MASTER_ADDR=custom MASTER_PORT=1234" in r.stdout


def test_clusters_lists_every_profile_and_show_resolves(hpc_launch_bin):
    r = run_cli(["clusters"])
    assert r.returncode == 0
    for name in ("abci", "abci2", "miyabi", "polaris", "thetagpu", "slurm", "pods", "local"):
        assert name in r.stdout
    assert "retired" in r.stdout
    r = run_cli(["clusters", "show", "miyabi"])
    assert r.returncode == 0 and "group_list" in r.stdout and "aarch64" in r.stdout
    r = run_cli(["clusters", "show", "miyabe"])
    assert r.returncode == 2 and "did you mean `miyabi`" in r.stderr


def test_pass_env_names_the_variable_but_never_writes_its_value(tmp_path, hpc_launch_bin):
    env = dict(scheduler_env_cleared(), MY_TOKEN="s3cr3t-value")
    r = run_cli(
        [
            "submit",
            "--cluster",
            "abci",
            "--nodes",
            "1",
            "--group",
            "g1",
            "--login",
            "local",
            "--venv",
            "/opt/venv",
            "--pass-env",
            "MY_TOKEN",
            "--dry-run",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    # no `qsub -v`: it would put the value in the job's Variable_List, which every PBS user can read
    assert "qsub -N train" in r.stderr and " -v " not in r.stderr
    assert "    MY_TOKEN)\n" in r.stdout  # the script reads it from the secrets file (tests/test_secrets.py)
    assert "s3cr3t-value" not in r.stdout + r.stderr
    assert list(tmp_path.iterdir()) == [], "a dry run writes nothing, the secrets file least of all"


# ---- issue 17: edges a new user tries, checked in-process (cheap) --------------------------------


def _refusal(**kw):
    from hpc_launch.site import profiles
    from hpc_launch.errors import SpecError
    from hpc_launch.spec import resolve, spec_from

    cluster = kw.pop("cluster")
    spec = spec_from({}, dict(cluster=cluster, workdir="/w", **kw))
    with pytest.raises(SpecError) as err:
        resolve(spec, profiles.load(cluster))
    return err.value.one_line()


@pytest.mark.parametrize("option", ["cluster", "queue", "walltime", "venv", "script", "group", "workdir", "login"])
def test_an_option_given_empty_is_refused_not_read_as_its_default(option):
    from hpc_launch.errors import SpecError
    from hpc_launch.spec import spec_from

    flag = "--" + option
    with pytest.raises(SpecError, match=f"^{flag} is empty"):
        spec_from({"cluster": "local"}, {option: ""})
    with pytest.raises(SpecError, match=f"hpc-launch.yaml key `{option}` is empty"):
        spec_from({option: "  "}, {})


@pytest.mark.parametrize(
    "cluster, kw, words",
    [
        # the directive carries a value a profile writes from a checked option: read back and checked
        ("abci", dict(directives=["-q rt_HG"], nodes=2), ["--nodes 2", "rt_HG limit of 1"]),
        ("abci2", dict(directives=["-l rt_AF=200"]), ["--nodes 200", "rt_AF limit of 64"]),
        ("frontier", dict(directives=["--time=99:00:00"]), ["99:00:00", "above", "12:00:00"]),
        ("thetagpu", dict(directives=["-t 6000"]), ["100:00:00", "above", "12:00:00"]),
        ("frontier", dict(directives=["--nodes=2"], nodes=3), ["--nodes 3", "different", "with --nodes"]),
        ("abci", dict(directives=["-l walltime=02:00:00"], walltime="1h"), ["different", "with --walltime"]),
        # in another form, or with other values on the line: refused, pointing at the option
        ("abci", dict(directives=["-l select=200:ngpus=8"]), ["-l select=200:ngpus=8", "use --nodes"]),
        ("abci", dict(directives=["-l nodes=4"]), ["use --nodes"]),  # PBS Pro turns nodes= into select
        ("abci", dict(directives=["-l place=pack,walltime=200:00:00"]), ["use --walltime"]),
        ("frontier", dict(directives=["-t 99:00:00"]), ["use --walltime"]),  # sbatch's -t is --time
        ("frontier", dict(directives=["-N 9999"]), ["use --nodes"]),
        # sbatch reads an unambiguous prefix of a long option as the option (getopt_long)
        ("frontier", dict(directives=["--parti=nosuch"]), ["--parti=nosuch", "use --queue"]),
        ("frontier", dict(directives=["--gpus-per-n=99"]), ["--gpus-per-n=99", "use --gpus-per-node"]),
        # bounds
        ("slurm", dict(walltime="400d"), ["more than a year", "--chain"]),
        ("slurm", dict(walltime="99999999999h"), ["more than a year"]),
        ("slurm", dict(chain=1001), ["--chain", "1 to 1000"]),
        ("pods", dict(hosts=["a", "b", "a"]), ["host a is listed twice", "each host once"]),
        ("local", dict(directives=["-l x=1"]), ["local has no scheduler"]),
    ],
)
def test_what_a_directive_or_a_bound_cannot_slip_past(cluster, kw, words):
    kw.setdefault("group", "g1")
    line = _refusal(cluster=cluster, **kw)
    for word in words:
        assert word in line, (word, line)


def test_a_directive_in_the_profiles_own_form_is_the_option_itself():
    """`-d '-l walltime=02:00:00'` replaces the default line and is the job's walltime: its
    deadline (--stop-before) and its limits follow it, not the default hour."""
    from hpc_launch.site import profiles
    from hpc_launch.render import render
    from hpc_launch.spec import JobSpec, resolve

    spec = JobSpec(cluster="abci", group="g1", directives=["-l walltime=02:00:00"], workdir="/w")
    job = resolve(spec, profiles.load("abci"))
    assert job.walltime_s == 7200 and job.stop_before_s == 300
    assert [l for l in render(job, stamp="s").text.splitlines() if "walltime" in l] == ["#PBS -l walltime=02:00:00"]
    assert spec.walltime is None  # the caller's spec is not changed
