"""The job layer every rank of a `--script` job starts through (hpc_launch/joblayer): what each
launcher's variables become, the user's script run as `python SCRIPT` runs it, the post-import
hooks, DeepSpeed's CPU start, and the launch line that reaches it. No torch here (fast tier)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from hpc_launch import protocol
from hpc_launch.site import launchers, profiles
from hpc_launch.joblayer import after_import, deepspeed_cpu, steps
from hpc_launch.joblayer.ranks import RankInfo, discover, torch_env
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

REPO = Path(__file__).resolve().parents[1]
TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


# ---- every launcher's variables become torch's ---------------------------------------------------


@pytest.mark.parametrize(
    "launcher, env, expected",
    [
        (
            "Open MPI mpirun",
            {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1",
             "MASTER_PORT": "29600"},
            ("3", "4", "1", "2", "1", "10.0.0.1", "29600"),
        ),
        (
            "MPICH Hydra mpiexec",
            {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4", "MASTER_ADDR": "n0"},
            ("5", "8", "1", "4", "1", "n0", "29500"),
        ),
        (
            "PALS mpiexec with PMI (Polaris)",
            {"PMI_RANK": "6", "PMI_SIZE": "8", "PMI_LOCAL_RANK": "2", "PMI_LOCAL_SIZE": "4", "PALS_NODEID": "1",
             "MASTER_ADDR": "n0", "MASTER_PORT": "1"},
            ("6", "8", "2", "4", "1", "n0", "1"),
        ),
        (
            "PALS mpiexec with PMIx (Aurora): the world from the job script",
            {"PMIX_RANK": "13", "PALS_RANKID": "13", "PALS_LOCAL_RANKID": "1", "PALS_LOCAL_SIZE": "12",
             protocol.ENV_WORLD_SIZE: "24", "MASTER_ADDR": "n0", "MASTER_PORT": "1"},
            ("13", "24", "1", "12", "1", "n0", "1"),
        ),
        (
            "Slurm srun",
            {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
             "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "MASTER_ADDR": "pod1", "MASTER_PORT": "2"},
            ("3", "4", "1", "2", "1", "pod1", "2"),
        ),
        (
            "torchrun",
            {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
             "MASTER_ADDR": "a", "MASTER_PORT": "3"},
            ("2", "4", "0", "2", "1", "a", "3"),
        ),
        (
            "DeepSpeed's launcher (local, pdsh)",
            {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_SIZE": "2", "CROSS_RANK": "0",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4"},
            ("1", "2", "1", "2", "0", "127.0.0.1", "4"),
        ),
        ("no launcher: one process", {}, ("0", "1", "0", "1", "0", "127.0.0.1", "29500")),
    ],
)  # fmt: skip
def test_each_launchers_variables_become_torchs(launcher, env, expected):
    out = dict(env, **torch_env(discover(env), env))
    assert tuple(out.get(k) for k in TORCH_VARS) == expected, launcher


def test_a_multi_node_job_without_master_addr_gets_none_invented():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"}
    assert "MASTER_ADDR" not in torch_env(discover(env), env)  # torch names the missing variable itself


def test_every_launcher_in_the_registry_names_a_convention_and_a_module_flag():
    from hpc_launch.joblayer.ranks import CONVENTIONS

    for name in launchers.names():
        entry = launchers.get(name)
        assert set(entry.ranks) <= {c.name for c in CONVENTIONS}, name
        assert entry.module_flag == ("--module" if entry.deepspeed_cli or "torchrun" in name else "-m"), name


# ---- the user's script, run as `python SCRIPT ARGS` runs it --------------------------------------

PROBE = """\
import os, sys
print("argv", sys.argv)
print("name", __name__)
print("path0", sys.path[0])
print("torch-imported", "torch" in sys.modules, "deepspeed-imported", "deepspeed" in sys.modules)
print("env", *[os.environ.get(k) for k in {vars}])
import helper  # a module beside the script
sys.exit(int(sys.argv[-1]))
"""


def _layer(args, env, cwd):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "PALS_", "HPC_LAUNCH"))}
    full.update(env)
    full["PYTHONPATH"] = str(REPO)
    full.setdefault("HPC_LAUNCH_PREFLIGHT", "0")  # the gate has its own tests (test_rank_layer_gate.py)
    return subprocess.run(
        [sys.executable, "-m", "hpc_launch.joblayer", *args], env=full, cwd=cwd, capture_output=True, text=True
    )


@pytest.fixture
def probe(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE.format(vars=list(TORCH_VARS)))
    (code / "helper.py").write_text("")
    return code / "probe.py"


def test_the_script_runs_as_main_with_its_argv_its_directory_and_its_exit_code(probe, tmp_path):
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29700"}  # fmt: skip
    r = _layer([str(probe), "--lr", "0.1", "7"], env, cwd=tmp_path)
    assert r.returncode == 7, r.stderr
    assert f"argv ['{probe}', '--lr', '0.1', '7']" in r.stdout
    assert "name __main__" in r.stdout and f"path0 {probe.parent}" in r.stdout
    assert "torch-imported False deepspeed-imported False" in r.stdout  # the layer imported neither
    assert "env 1 2 0 1 1 10.0.0.1 29700" in r.stdout


def test_deepspeeds_local_rank_argument_reaches_the_script_first(probe, tmp_path):
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    r = _layer(["--local_rank=0", str(probe), "x", "0"], env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"argv ['{probe}', '--local_rank=0', 'x', '0']" in r.stdout


def test_a_module_runs_as_python_m_runs_it(probe, tmp_path):
    r = _layer(["-m", "probe", "3"], {}, cwd=probe.parent)
    assert r.returncode == 3, r.stderr
    assert "name __main__" in r.stdout and "env 0 1 0 1 0 127.0.0.1 29500" in r.stdout


def test_an_exception_in_the_script_ends_the_rank_as_python_would(tmp_path):
    (tmp_path / "boom.py").write_text("raise RuntimeError('boom in the user script')\n")
    r = _layer([str(tmp_path / "boom.py")], {}, cwd=tmp_path)
    assert r.returncode == 1 and "RuntimeError: boom in the user script" in r.stderr


@pytest.mark.parametrize(
    "args, env, code, words",
    [
        (["probe.py", "0"], {protocol.ENV_WORLD_SIZE: "4"}, protocol.EXIT_PREFLIGHT, "found no launcher's rank"),
        (["probe.py", "0"], {"PMI_RANK": "0", "PMI_SIZE": "2", protocol.ENV_WORLD_SIZE: "4"}, protocol.EXIT_PREFLIGHT,
         "started a world of 2 rank(s) but the job asked for 4"),
        (["missing.py"], {}, 2, "the script missing.py is not a file here"),
        ([], {}, 2, "usage: python -m hpc_launch.joblayer"),
    ],
)  # fmt: skip
def test_what_cannot_run_is_one_line_and_nothing_runs(probe, args, env, code, words):
    r = _layer(args, env, cwd=probe.parent)
    assert r.returncode == code and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith("[hpc-launch] error: ") and words in r.stderr and r.stderr.count("\n") == 1


# ---- after an import ----------------------------------------------------------------------------


def test_an_action_runs_after_the_first_import_and_the_loader_keeps_its_type(tmp_path, monkeypatch):
    pkg = tmp_path / "layerprobe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    after_import.after_import("layerprobe_pkg.mod", lambda m: seen.append(m.VALUE + 1))
    import importlib

    mod = importlib.import_module("layerprobe_pkg.mod")
    assert seen == [42]
    assert type(mod.__loader__).__name__ == "SourceFileLoader" and "exec_module" not in vars(mod.__loader__)
    after_import.after_import("layerprobe_pkg.mod", lambda m: seen.append("now"))  # already imported: at once
    assert seen == [42, "now"]


def test_a_failing_action_is_a_note_and_the_import_stands(tmp_path, monkeypatch, capsys):
    (tmp_path / "layerprobe_bad.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    after_import.after_import("layerprobe_bad", lambda m: 1 / 0)
    import importlib

    assert importlib.import_module("layerprobe_bad").X == 1
    assert "after importing layerprobe_bad failed (ZeroDivisionError" in capsys.readouterr().err


# ---- DeepSpeed on CPU ---------------------------------------------------------------------------


def test_the_shm_comm_op_is_skipped_on_cpu_and_built_on_a_gpu():
    built = []
    fake = types.SimpleNamespace(build_shm_op=lambda: built.append(1) or "op")
    deepspeed_cpu.skip_shm_comm_op(fake, on_cpu=lambda: True)
    deepspeed_cpu.skip_shm_comm_op(fake, on_cpu=lambda: True)  # twice: wrapped once
    assert fake.build_shm_op() is None and built == []
    gpu = types.SimpleNamespace(build_shm_op=lambda: built.append(1) or "op")
    deepspeed_cpu.skip_shm_comm_op(gpu, on_cpu=lambda: False)
    assert gpu.build_shm_op() == "op" and built == [1]


def test_a_jit_build_is_announced_with_its_op_and_cache(capsys, monkeypatch):
    class OpBuilder:
        name = "cpu_adam"

        def jit_load(self, verbose=True):
            return "module"

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/cache/ext")
    deepspeed_cpu.announce_jit_builds(types.SimpleNamespace(OpBuilder=OpBuilder))
    assert OpBuilder().jit_load() == "module"
    assert "DeepSpeed JIT-loads its cpu_adam op: ninja compiles it unless /cache/ext holds a build" in (
        capsys.readouterr().err
    )


# ---- steps to the watchdog ----------------------------------------------------------------------


class _Recorder:
    def __init__(self):
        self.steps = []
        self.stopped = False

    def progress(self, step, work_s):
        self.steps.append(step)

    def stop(self):
        self.stopped = True


def test_optimizer_steps_and_heartbeats_reach_the_watchdog_in_order(monkeypatch):
    state = steps._Steps()
    state.info, state.tried, state.watchdog = RankInfo(0, 2, 0, 1, "slurm"), True, _Recorder()
    monkeypatch.setattr(steps, "_STEPS", state)
    steps._optimizer_stepped(None, (), {})
    steps._optimizer_stepped(None, (), {})
    steps.on_step(10)  # heartbeat(10)
    steps.on_step(4)  # a smaller number never goes back
    steps._at_exit()
    assert state.watchdog.steps == [1, 2, 10, 11] and state.watchdog.stopped


def test_a_run_that_never_steps_says_once_that_the_watchdog_had_nothing_to_watch(monkeypatch, capsys):
    state = steps._Steps()
    state.info = RankInfo(0, 2, 0, 1, "slurm")
    monkeypatch.setattr(steps, "_STEPS", state)
    steps._at_exit()
    assert capsys.readouterr().err == ""  # it raised before any step: no word about steps
    steps.ran_through()
    steps._at_exit()
    assert capsys.readouterr().err.count("it had no steps to watch") == 1


# ---- the launch line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cluster, line",
    [
        ("slurm", ' -u ${HPC_LAUNCH_LAYER[@]+"${HPC_LAUNCH_LAYER[@]}"} '),
        (
            "abci2",
            "--launcher_args '--mca btl_tcp_if_include bond0' ${HPC_LAUNCH_LAYER[@]+\"${HPC_LAUNCH_LAYER[@]}\"} ",
        ),
        ("miyabi", 'torchrun-node "$NNODES" 1 ${HPC_LAUNCH_LAYER[@]+"${HPC_LAUNCH_LAYER[@]}"} '),
    ],
)
def test_a_script_job_starts_its_ranks_through_the_layer(cluster, line, tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("")
    spec = JobSpec(cluster=cluster, nodes=2, script=str(script), workdir="/work/project", group="g")
    profile = profiles.load(cluster)
    job = resolve(spec, profile, cwd="/work/project")
    text = render(job, stamp="20260101-000000-000").text
    flag = launchers.get(profile.launch.launcher).module_flag
    assert f"HPC_LAUNCH_LAYER=({flag} hpc_launch.joblayer)" in text
    assert line in text
    entry = render(resolve(JobSpec(cluster=cluster, nodes=2, workdir="/w", group="g"), profile, cwd="/w"), stamp="1")
    assert "HPC_LAUNCH_LAYER" not in entry.text  # the shipped entrypoint finds its place itself
    path = tmp_path / "job.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert shutil.which("shellcheck"), "shellcheck is required (apt-get install shellcheck)"
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_a_job_python_without_hpc_launch_runs_the_script_bare_with_one_note(tmp_path):
    """The layer's line as the job script runs it, with a Python that cannot import hpc_launch."""
    script = tmp_path / "mine.py"
    script.write_text("import sys; print('ran', sys.argv[1:])\n")
    spec = JobSpec(cluster="slurm", nodes=1, script=str(script), workdir="/w", group="g", train_args=["a b"])
    text = render(resolve(spec, profiles.load("slurm"), cwd="/w"), stamp="1").text
    layer = text[text.index("if (cd / && ") : text.index("\nfi\n", text.index("if (cd / && ")) + 4]
    launch = next(line for line in text.splitlines() if "HPC_LAUNCH_LAYER[@]" in line)  # srun's line after `\`
    assert launch.strip().startswith("python3 -u ")  # the profile's python
    for python, expect_out, expect_err in (
        (sys.executable, "ran ['a b']", ""),
        ("/usr/bin/env PYTHONNOUSERSITE=1 python3 -I", "ran ['a b']", "the script runs without the job layer"),
    ):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        shell = f'set -u\npython3() {{ {python} "$@"; }}\n{layer}\n{launch}\n'
        r = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0 and expect_out in r.stdout, (r.stdout, r.stderr)
        assert expect_err in r.stderr


# ---- the in-job API -------------------------------------------------------------------------------


def test_stop_requested_by_the_stop_file_and_by_sigusr1(tmp_path, monkeypatch):
    import signal

    from hpc_launch.joblayer import api

    stop_file = tmp_path / "stop.1"
    monkeypatch.setenv("HPC_LAUNCH_STOP", str(stop_file))
    monkeypatch.delenv("HPC_LAUNCH_DEADLINE", raising=False)
    monkeypatch.setattr(api, "_REQUEST", None)
    before = signal.getsignal(signal.SIGUSR1)
    try:
        assert not api.stop_requested()
        stop_file.touch()
        assert api.stop_requested()
        stop_file.unlink()
        os.kill(os.getpid(), signal.SIGUSR1)  # handled: asks to stop, does not end the process
        assert api.stop_requested()
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_resume_from_the_chains_checkpoint_dir(tmp_path, monkeypatch):
    from hpc_launch.joblayer import checkpoint_dir, resume_from

    monkeypatch.delenv("HPC_LAUNCH_CHECKPOINT_DIR", raising=False)
    assert checkpoint_dir() is None and resume_from() is None
    monkeypatch.setenv("HPC_LAUNCH_CHECKPOINT_DIR", str(tmp_path))
    assert checkpoint_dir() == str(tmp_path) and resume_from() is None  # a first start
    (tmp_path / "step100.pt").write_text("")
    assert resume_from() == str(tmp_path / "step100.pt")
    (tmp_path / "latest").write_text("global_step100")
    assert resume_from() == str(tmp_path)  # DeepSpeed's: load_checkpoint(dir) reads `latest`


# ---- stop before the walltime and on SIGTERM ------------------------------------------------------

LISTENER = """\
import os, signal, sys, time
from hpc_launch.joblayer import stop_requested
got = []
if sys.argv[1] == "own-usr1":
    signal.signal(signal.SIGUSR1, lambda s, f: got.append("usr1"))  # as Lightning's requeue handler does
if sys.argv[1] == "listens":
    stop_requested()  # a script listens from its first question on
print("ready", flush=True)
end = time.time() + 20
while time.time() < end and not got and not (sys.argv[1] == "listens" and stop_requested()):
    time.sleep(0.02)
print("stopped", got, flush=True)
"""


def _in_job(tmp_path, mode, **env):
    (tmp_path / "listener.py").write_text(LISTENER)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    full.update(PYTHONPATH=str(REPO), HPC_LAUNCH_STOP=str(tmp_path / "stop.1"), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "hpc_launch.joblayer", str(tmp_path / "listener.py"), mode],
        env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_the_deadline_sends_sigusr1_to_the_scripts_own_handler(tmp_path):
    import time

    p = _in_job(tmp_path, "own-usr1", HPC_LAUNCH_DEADLINE=str(time.time() + 1))
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped ['usr1']" in out, (out, err)


def test_sigterm_asks_a_listening_script_to_stop_and_ends_one_that_never_asks(tmp_path):
    import signal

    listening = _in_job(tmp_path, "listens")
    deaf = _in_job(tmp_path, "deaf")
    for p in (listening, deaf):
        assert p.stdout.readline() == "ready\n"
        p.send_signal(signal.SIGTERM)
    out, err = listening.communicate(timeout=30)
    assert listening.returncode == 0 and "stopped []" in out, (out, err)
    assert "SIGTERM from the scheduler: stop_requested() is now true" in err
    assert (tmp_path / "stop.1").exists()  # for the ranks the signal did not reach
    deaf.communicate(timeout=30)
    assert deaf.returncode == -signal.SIGTERM  # as without the layer, at once


def test_a_process_forked_from_a_listening_rank_still_ends_on_sigterm(tmp_path):
    """A DataLoader worker inherits the rank's handler; the scheduler's or the loader's SIGTERM ends it."""
    import signal
    import time

    (tmp_path / "forks.py").write_text(
        "import os, signal, time\n"
        "from hpc_launch.joblayer import stop_requested\n"
        "stop_requested()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(30); os._exit(0)\n"
        "time.sleep(0.5); os.kill(child, signal.SIGTERM)\n"
        "print('child', os.waitpid(child, 0)[1] & 0x7F, flush=True)\n"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    full.update(PYTHONPATH=str(REPO), HPC_LAUNCH_STOP=str(tmp_path / "stop.1"))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "hpc_launch.joblayer", str(tmp_path / "forks.py")], env=full,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.stdout == f"child {int(signal.SIGTERM)}\n", (r.stdout, r.stderr)
    assert time.monotonic() - t0 < 20
