"""`hpc-launch alloc` and `run`: which allocation a shell is in, each scheduler's allocation command,
and the allocation's life with a stand-in scheduler on PATH (real processes, real store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_launch import dialects
from hpc_launch.jobs import alloc
from hpc_launch.records import JobStore

PROFILES = Path(__file__).resolve().parent / "e2e" / "profiles"


# ---- which allocation this shell is in -----------------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"HPC_LAUNCH_ALLOC": "75", "HPC_LAUNCH_ALLOC_CLUSTER": "tb", "SLURM_JOB_ID": "9"}, ("75", None, "tb")),
        ({"SLURM_JOB_ID": "75", "SLURM_JOB_NODELIST": "pod[1-2]"}, ("75", "slurm", None)),
        # Slurm's PBS wrappers set PBS_JOBID too: Slurm's own variables are asked first
        (
            {"SLURM_JOB_ID": "75", "SLURM_JOB_NODELIST": "p1", "PBS_JOBID": "75", "PBS_NODEFILE": "/n"},
            ("75", "slurm", None),
        ),
        ({"PBS_JOBID": "51.pbs1", "PBS_NODEFILE": "/var/spool/pbs/aux/51"}, ("51.pbs1", "pbspro", None)),
        ({"JOB_ID": "24", "PE_HOSTFILE": "/sge/pe_hostfile"}, ("24", "gridengine", None)),
        ({"COBALT_JOBID": "7", "COBALT_NODEFILE": "/n"}, ("7", "cobalt", None)),
    ],
)
def test_the_allocation_is_found_by_its_variables(env, expected):
    got = alloc.detect(env)
    assert got is not None and (got.job_id, got.dialect, got.cluster) == expected


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"JOB_ID": "24"},  # a word many programs set: without Grid Engine's node file it is not a job
        {"PBS_JOBID": "51"},
        {"SLURM_JOB_ID": "75"},  # a Slurm variable leaked into a login shell, no node list
        {"HPC_LAUNCH_ALLOC": ""},
    ],
)
def test_outside_an_allocation_nothing_is_found(env):
    assert alloc.detect(env) is None


# ---- each scheduler's allocation command ---------------------------------------------------------


def test_salloc_takes_the_resources_and_leaves_out_what_only_a_batch_job_has():
    argv = dialects.get("slurm").alloc_argv(
        ["--job-name=t", "--partition=debug", "--nodes=2", "--output=t.o%j", "--time=00:04:00", "--open-mode=append"],
        ["bash", "/w/a.sh"],
        submit_flags=["--account=g1", "--exclude=pod3"],
    )
    assert argv == [
        "salloc",
        "--job-name=t",
        "--partition=debug",
        "--nodes=2",
        "--time=00:04:00",
        "--account=g1",
        "--exclude=pod3",
        "bash",
        "/w/a.sh",
    ]


def test_qsub_interactive_runs_the_command_after_a_double_dash_without_log_joining():
    argv = dialects.get("pbspro").alloc_argv(
        ["-q debug", "-l select=2:ncpus=64", "-l walltime=01:00:00", "-A proj", "-j oe", "-o t.log"],
        ["bash", "/w/a.sh"],
        submit_flags=["-N", "t", "-j", "oe"],
    )
    assert argv[:2] == ["qsub", "-I"]
    assert argv[argv.index("--") :] == ["--", "bash", "/w/a.sh"]
    flags = argv[2 : argv.index("--")]
    assert flags == ["-q", "debug", "-l", "select=2:ncpus=64", "-l", "walltime=01:00:00", "-A", "proj", "-N", "t"]


def test_qrsh_waits_in_the_queue_and_gives_the_shell_a_terminal():
    argv = dialects.get("gridengine").alloc_argv(
        ["-pe smp 2", "-l h_rt=00:04:00", "-N t", "-j y", "-cwd", "-g grp"], ["bash", "/w/a.sh"]
    )
    assert argv == [
        "qrsh", "-now", "no", "-pty", "y", "-pe", "smp", "2", "-l", "h_rt=00:04:00", "-N", "t", "-cwd", "-g", "grp",
        "bash", "/w/a.sh",
    ]  # fmt: skip


def test_no_scheduler_runs_the_command_here_and_a_scheduler_without_one_says_none():
    assert dialects.get("none").alloc_argv(["x"], ["bash", "/w/a.sh"]) == ["bash", "/w/a.sh"]
    assert not dialects.get("cobalt").supports(dialects.Allocation)  # no command hpc-launch knows


# ---- the allocation's life with a stand-in salloc -------------------------------------------------


def _fake_slurm(tmp_path: Path) -> Path:
    """`salloc` that grants job 4242 on pod[1-2] and runs its command (logging its argv), and a
    `squeue` / `sacct` that no longer know the job (the exit file then says how it ended)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "salloc").write_text(
        "#!/bin/bash\n"
        'printf "%s\\n" "$@" > "$FAKE_LOG"\n'
        'while [ "${1#-}" != "$1" ]; do shift; done\n'
        "export SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='pod[1-2]'\n"
        '"$@"\n'
    )
    for name in ("squeue", "sacct"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _hpc(args, env, cwd, timeout=60, **kw):
    hpc = str(Path(sys.executable).parent / "hpc-launch")
    return subprocess.run([hpc, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def slurm_env(tmp_path):
    env = dict(os.environ)
    env["PATH"] = f"{_fake_slurm(tmp_path)}{os.pathsep}{env['PATH']}"
    env["FAKE_LOG"] = str(tmp_path / "salloc.argv")
    work = tmp_path / "work"
    work.mkdir()
    return env, work


def test_a_walltime_over_the_queue_limit_is_refused_before_the_scheduler_is_asked(slurm_env, tmp_path):
    env, work = slurm_env
    got = _hpc(
        ["alloc", "--profile", str(PROFILES / "tb-slurm.yaml"), "-c", "tb-slurm", "-q", "short", "-t", "9:00"],
        env,
        work,
    )
    assert got.returncode != 0
    assert "above the short maximum of 00:05:00" in got.stderr and len(got.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "salloc.argv").exists()  # salloc never ran
    assert not (work / ".hpc-launch").exists() and JobStore().list() == []


def test_the_allocation_is_recorded_while_its_shell_runs_and_ends_with_it(slurm_env, tmp_path):
    env, work = slurm_env
    inside = tmp_path / "inside.json"
    shell = tmp_path / "shell.sh"  # the person's shell in the allocation: notes what it sees, then leaves
    shell.write_text(
        "#!/bin/bash\n"
        f'{sys.executable} -c \'import json, os; json.dump({{k: os.environ.get(k) for k in ("HPC_LAUNCH_ALLOC", '
        f'"HPC_LAUNCH_ALLOC_CLUSTER", "SLURM_JOB_ID")}}, open("{inside}", "w"))\'\n'
        "exit 3\n"
    )
    shell.chmod(0o755)
    env["SHELL"] = str(shell)
    args = ["alloc", "--profile", str(PROFILES / "tb-slurm.yaml"), "-c", "tb-slurm", "-n", "2", "-t", "4:00"]
    args += ["--no-preflight", "--stop-signal", "USR2"]  # options alloc takes are the runs' too
    got = _hpc([*args, "-N", "dbg"], env, work, stdin=subprocess.DEVNULL)
    assert got.returncode == 3, got.stderr  # the shell's exit is alloc's
    assert "allocation 4242 on tb-slurm recorded" in got.stderr
    salloc = (tmp_path / "salloc.argv").read_text().splitlines()
    assert "--nodes=2" in salloc and "--time=00:04:00" in salloc and not any(a.startswith("--output") for a in salloc)
    assert json.loads(inside.read_text()) == {
        "HPC_LAUNCH_ALLOC": "4242",
        "HPC_LAUNCH_ALLOC_CLUSTER": "tb-slurm",
        "SLURM_JOB_ID": "4242",
    }
    (record,) = JobStore().list()
    assert (record.job_id, record.cluster, record.name) == ("4242", "tb-slurm", "dbg")
    assert record.state == "failed" and record.exit_code == 3  # from the exit file the wrapper left
    options = record.extra["alloc"]["options"]  # what `run` renders its scripts from
    assert (options["nodes"], options["preflight"], options["stop_signal"]) == (2, False, "USR2")


def test_run_outside_an_allocation_says_how_to_get_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "HPC_LAUNCH_ALLOC"))}
    env.pop("JOB_ID", None)
    got = _hpc(["run"], env, tmp_path)
    assert got.returncode != 0 and "not inside an allocation" in got.stderr and "hpc-launch alloc" in got.stderr


def test_a_scheduler_allocation_hpc_launch_did_not_open_needs_its_cluster(tmp_path):
    env = dict(os.environ, SLURM_JOB_ID="77", SLURM_JOB_NODELIST="pod1")
    env.pop("HPC_LAUNCH_ALLOC", None)
    got = _hpc(["run"], env, tmp_path)
    assert got.returncode != 0 and "was not opened by `hpc-launch alloc`" in got.stderr and "--cluster" in got.stderr


def test_a_run_takes_the_allocations_options_with_its_own_on_top(tmp_path):
    store = JobStore()
    rec = alloc_record(tmp_path)
    store.add(rec)
    inside = alloc.Inside("4242", "HPC_LAUNCH_ALLOC", cluster="tb-slurm")
    assert alloc.allocation_record(store, inside, None) == rec
    assert alloc.allocation_record(store, alloc.Inside("4242", "X", cluster="other"), None) is None
    options = alloc.run_options(rec, {"script": "t.py", "env": {"B": "2"}, "train_args": None, "name": "r"}, None)
    assert options["nodes"] == 2 and options["script"] == "t.py" and options["name"] == "r"
    assert options["env"] == {"A": "1", "B": "2"} and options["login"] == "local"
    assert options["workdir"] == str(tmp_path) and options["train_args"] == ["--steps", "4"]
    assert alloc.next_run_name(store, "dbg", "4242") == "dbg-run1"


def alloc_record(workdir: Path):
    from hpc_launch.records import JobRecord

    return JobRecord(
        job_id="4242",
        cluster="tb-slurm",
        dialect="slurm",
        host="localhost",
        name="dbg",
        workdir=str(workdir),
        script_path=f"{workdir}/.hpc-launch/dbg-1.sh",
        log_path=f"{workdir}/dbg.o4242",
        exit_path=f"{workdir}/dbg.o4242.exitcode",
        submit_time=1.0,
        state="running",
        extra={
            "alloc": {"options": {"cluster": "tb-slurm", "nodes": 2, "env": {"A": "1"}, "train_args": ["--steps", "4"]}}
        },
    )


# ---- no scheduler: this machine is the allocation --------------------------------------------------


def _shell(tmp_path: Path, body: str) -> Path:
    shell = tmp_path / "shell.sh"
    shell.write_text("#!/bin/bash\n" + body)
    shell.chmod(0o755)
    return shell


def test_a_local_allocation_is_running_while_its_shell_runs_and_done_after(tmp_path):
    hpc = Path(sys.executable).parent / "hpc-launch"
    seen = tmp_path / "seen.json"
    env = dict(os.environ, SHELL=str(_shell(tmp_path, f"{hpc} list --json > {seen}\n")))
    got = _hpc(["alloc", "-c", "local", "-N", "here"], env, tmp_path, stdin=subprocess.DEVNULL)
    assert got.returncode == 0, got.stderr
    (inside,) = json.loads(seen.read_text())
    assert inside["name"] == "here" and inside["state"] == "running"  # `list` inside: the allocation is alive
    (record,) = JobStore().list()
    assert record.job_id == inside["job_id"] and record.state == "done" and record.exit_code == 0


@pytest.mark.train  # the local profile's launcher is DeepSpeed's (seconds to start)
def test_two_runs_in_a_local_allocation_each_have_their_own_record_and_log(tmp_path):
    hpc = Path(sys.executable).parent / "hpc-launch"
    (tmp_path / "t.py").write_text("import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n")
    body = f"{hpc} run --script t.py && {hpc} run --script t.py --name second\n"
    env = dict(os.environ, SHELL=str(_shell(tmp_path, body)))
    got = _hpc(["alloc", "-c", "local", "-g", "1", "-N", "here"], env, tmp_path, stdin=subprocess.DEVNULL, timeout=240)
    assert got.returncode == 0, got.stdout + got.stderr
    records = {r.name: r for r in JobStore().list()}
    alloc_id = records["here"].job_id
    for name in ("here-run1", "second"):
        run = records[name]
        assert run.state == "done" and run.extra["run_of"] == {"cluster": "local", "job_id": alloc_id}
        assert run.log_path == str(tmp_path / f"{name}.o{alloc_id}")  # named by the allocation, its own
        assert "rank 0 of 1" in Path(run.log_path).read_text()


@pytest.mark.parametrize("nodes, queue", [(1, "debug"), (2, "debug"), (4, "debug-scaling")])
def test_alloc_takes_the_sites_interactive_queue_where_it_fits_the_allocation(nodes, queue):
    from hpc_launch.project_config import spec_for

    spec = alloc.interactive_spec(spec_for(None, {"cluster": "polaris", "nodes": nodes, "walltime": "30m"}), None)
    assert (spec.queue or "debug-scaling") == queue  # 4 nodes: over debug's 2, the batch default stays
    assert alloc.interactive_spec(spec_for(None, {"cluster": "polaris", "queue": "prod"}), None).queue == "prod"
