"""Four more sites as data only (issue 11): TSUBAME 4.0, Aurora, Perlmutter and Frontier. Each
site's rules, checked on the resolved job and the rendered script; each refusal is one line that
names a fix. Sources are in each profile's `facts:` and on docs/sites/NAME.md."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from envutil import scheduler_env_cleared

from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

DOCS = Path(__file__).resolve().parent.parent / "docs" / "sites"
VENV = {"venv": "/v"}  # every one of these sites needs a venv for its python


def _job(cluster, **kw):
    kw.setdefault("workdir", "/w")
    return resolve(JobSpec(cluster=cluster, **kw), profiles.load(cluster), cwd="/w")


def _render(cluster, **kw):
    return render(_job(cluster, **kw), stamp="s")


def _script(cluster, **kw) -> str:
    return _render(cluster, **kw).text


def _directives(text: str, prefix: str):
    return [line[len(prefix) + 1 :] for line in text.splitlines() if line.startswith(prefix + " ")]


def _refused(cluster, **kw) -> str:
    with pytest.raises(SpecError) as err:
        _job(cluster, **kw)
    line = str(err.value)
    assert "\n" not in line
    return line


def _cpus(spec: str):
    """A CPU list such as `4-7` or `1,3-5` -> the set of CPUs."""
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


# ---- TSUBAME 4.0: Grid Engine, qsub -g, resource types -------------------------------------


def test_tsubame4_group_goes_on_the_qsub_command_line_not_in_the_script():
    script = _render("tsubame4", nodes=2, group="tga-mygroup", walltime="2h", **VENV)
    assert script.submit_argv[:3] == ["qsub", "-g", "tga-mygroup"]
    directives = _directives(script.text, "#$")
    assert not any(d.startswith("-g") or "tga-mygroup" in d for d in directives)
    assert directives[:2] == ["-l node_f=2", "-l h_rt=02:00:00"]
    assert "# Submit with: qsub -g tga-mygroup .hpc-launch/" in script.text


def test_tsubame4_without_a_group_is_refused_naming_the_option():
    line = _refused("tsubame4", nodes=2, **VENV)
    assert "tsubame4 requires an existing TSUBAME group" in line and "--group NAME" in line


def test_tsubame4_always_asks_for_h_rt():
    # qsub on TSUBAME refuses a job without h_rt: the default walltime is written too
    assert "#$ -l h_rt=01:00:00\n" in _script("tsubame4", nodes=1, group="g", **VENV)


@pytest.mark.parametrize("queue,gpus,ranks", [("node_f", 4, 4), ("node_h", 2, 2), ("node_q", 1, 1), ("gpu_1", 1, 1)])
def test_tsubame4_resource_type_sets_the_ranks_per_node(queue, gpus, ranks):
    job = _job("tsubame4", nodes=1, queue=queue, group="g", **VENV)
    assert job.gpus_per_node == gpus and job.procs_per_node == ranks
    text = render(job, stamp="s").text
    assert f"#$ -l {queue}=1\n" in text and f"--slots {ranks} " in text


def test_tsubame4_refusals_name_the_fix():
    assert "above the node_f maximum of 24:00:00" in _refused("tsubame4", nodes=2, walltime="30h", group="g", **VENV)
    assert "use --nodes 64 or fewer" in _refused("tsubame4", nodes=65, group="g", **VENV)
    assert "use --gpus-per-node 1 or fewer" in _refused(
        "tsubame4", nodes=1, queue="node_q", gpus_per_node=2, group="g", **VENV
    )
    line = _refused("tsubame4", nodes=1, queue="node_o", group="g", **VENV)  # a fraction of a GPU: not offered
    assert "unknown queue 'node_o'" in line and "node_f, node_h, node_q, gpu_1" in line


def test_tsubame4_launches_with_deepspeeds_openmpi_runner_from_pe_hostfile():
    text = _script("tsubame4", nodes=2, group="g", **VENV)
    assert "hpc-launch hostfile --from gridengine --slots 4" in text and '"$PE_HOSTFILE"' in text
    assert '\ndeepspeed --hostfile "$HOSTFILE" --launcher openmpi --no_ssh_check ' in text
    assert "module load openmpi/5.0.2-gcc\n" in text


# ---- Aurora: PBS Pro, prod tiers, 12 ranks per node bound to their socket ------------------


def test_aurora_prod_tier_refusal_names_the_tier_and_what_works():
    line = _refused("aurora", nodes=300, queue="prod", walltime="13h", group="p", **VENV)
    assert "above the 12:00:00 that prod allows for 256-1024 nodes on aurora" in line
    assert "routes them to small" in line and "Job rejected by all possible destinations" in line
    assert "--walltime 12:00:00 or less" in line and "--nodes 1025-1999 (up to 18:00:00 on prod)" in line
    assert "visualization" not in line  # by request only: never suggested


@pytest.mark.parametrize(
    "nodes,walltime", [(256, "12h"), (1024, "12h"), (1025, "18h"), (1999, "18h"), (2000, "24h"), (10624, "24h")]
)
def test_aurora_prod_accepts_every_tier_at_its_limit(nodes, walltime):
    assert _job("aurora", nodes=nodes, queue="prod", walltime=walltime, group="p", **VENV).nodes == nodes


def test_aurora_queue_node_ranges_and_minimum_walltime():
    assert "below the prod minimum of 256 nodes" in _refused("aurora", nodes=100, queue="prod", group="p", **VENV)
    assert "below the debug-scaling minimum of 2 nodes" in _refused(
        "aurora", nodes=1, queue="debug-scaling", group="p", **VENV
    )
    assert "use --nodes 2 or fewer, or another --queue" in _refused("aurora", nodes=4, queue="debug", group="p", **VENV)
    assert "--walltime 00:05:00 or more" in _refused("aurora", nodes=2, walltime="3m", group="p", **VENV)
    assert "above the capacity limit of 16 nodes" in _refused(
        "aurora", nodes=17, queue="capacity", walltime="100h", group="p", **VENV
    )
    assert "requires an ALCF project" in _refused("aurora", nodes=2, **VENV)


def test_aurora_twelve_ranks_per_node_each_bound_to_cores_of_its_tiles_socket():
    text = _script("aurora", nodes=2, group="p", **VENV)
    launch = next(line for line in text.splitlines() if line.startswith("mpiexec "))
    assert launch.startswith('mpiexec --envall -n "$WORLD_SIZE" --ppn 12 --hostfile "$NODELIST" --cpu-bind list:')
    sets = [_cpus(s) for s in re.search(r"--cpu-bind list:(\S+)", launch).group(1).split(":")]
    assert len(sets) == 12 and all(len(s) == 4 for s in sets)
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])  # no core shared
    # tiles 0-5 (GPUs 0-2) hang off socket 0 (cores 0-51), tiles 6-11 off socket 1 (52-103);
    # cores 0 and 52 are the system's
    assert all(s <= set(range(1, 52)) for s in sets[:6]) and all(s <= set(range(53, 104)) for s in sets[6:])
    assert "WORLD_SIZE=$((NNODES * 12))" in text and "--slots 12 " in text
    assert "--cpu-bind list:4-7:8-11:12-15:16-19:20-23:24-27 " in _script(
        "aurora", nodes=1, queue="debug", gpus_per_node=6, group="p", **VENV
    )


def test_aurora_script_loads_frameworks_under_the_venv_and_sets_oneccl():
    text = _script("aurora", nodes=2, group="p", **VENV)
    assert text.startswith("#!/bin/bash -l\n#PBS -q debug-scaling\n")
    directives = _directives(text, "#PBS")
    for d in ("-l select=2", "-l place=scatter", "-l filesystems=home:flare", "-k doe", "-A p"):
        assert d in directives
    lines = text.splitlines()
    assert lines.index("module load frameworks  # the python the virtualenv was made with") < lines.index(
        "source /v/bin/activate"
    )
    for line in (
        "export CCL_PROCESS_LAUNCHER=pmix",
        "export CCL_ATL_TRANSPORT=mpi",
        "export CCL_KVS_MODE=mpi",
        "export FI_MR_CACHE_MONITOR=userfaultfd",
        "export DS_ACCELERATOR=xpu",
    ):
        assert line in lines
        assert lines.index(line) > lines.index("source /v/bin/activate")  # after the module: ours win


# ---- Perlmutter: Slurm, -C gpu, QOS, account ----------------------------------------------


def test_perlmutter_asks_for_gpu_nodes_with_the_qos_and_account():
    directives = _directives(
        _script("perlmutter", nodes=2, queue="regular", walltime="2h", group="m1234_g", **VENV), "#SBATCH"
    )
    assert "--constraint=gpu" in directives and "--qos=regular" in directives and "--account=m1234_g" in directives
    assert {"--ntasks-per-node=4", "--cpus-per-task=32", "--gpus-per-node=4", "--time=02:00:00"} <= set(directives)


def test_perlmutter_defaults_to_debug_for_30_minutes_and_the_default_project():
    directives = _directives(_script("perlmutter", nodes=1, **VENV), "#SBATCH")
    assert "--qos=debug" in directives and "--time=00:30:00" in directives
    assert not any(d.startswith("--account") for d in directives)  # NERSC charges the default project


def test_perlmutter_qos_refusals_name_the_fix():
    assert "above the debug limit of 8 nodes on perlmutter (use --nodes 8 or fewer" in _refused(
        "perlmutter", nodes=16, **VENV
    )
    assert "(use --walltime 00:30:00 or less)" in _refused("perlmutter", nodes=2, walltime="1h", **VENV)
    assert "(use --walltime 48:00:00 or less)" in _refused(
        "perlmutter", nodes=2, queue="regular", walltime="72h", **VENV
    )
    assert "above the preempt limit of 128 nodes" in _refused("perlmutter", nodes=129, queue="preempt", **VENV)
    assert "did you mean regular?" in _refused("perlmutter", nodes=2, queue="regulr", **VENV)


def test_perlmutter_shared_qos_is_half_a_node():
    directives = _directives(_script("perlmutter", nodes=1, queue="shared", **VENV), "#SBATCH")
    assert {"--ntasks-per-node=2", "--cpus-per-task=32", "--gpus-per-node=2"} <= set(directives)
    assert "use --nodes 1 or fewer" in _refused("perlmutter", nodes=2, queue="shared", **VENV)


def test_perlmutter_ranks_see_every_gpu_of_their_node():
    text = _script("perlmutter", nodes=2, **VENV)
    assert 'srun --kill-on-bad-exit=1 --nodes="$NNODES" --ntasks-per-node=4 --gpu-bind=none \\\n' in text
    assert "--gpus-per-task" not in text  # per-task binding leaves each rank only device 0
    lines = text.splitlines()
    assert lines.index("module load pytorch  # the python the virtualenv was made with") < lines.index(
        "source /v/bin/activate"
    )


# ---- Frontier: Slurm, walltime bins by node count, 8 GCDs --------------------------------


@pytest.mark.parametrize(
    "nodes,ok,too_long",
    [
        (1, "2h", "02:01:00"),
        (91, "2h", "3h"),
        (92, "6h", "7h"),
        (183, "6h", "7h"),
        (184, "12h", "13h"),
        (5000, "12h", "13h"),
        (9472, "12h", "13h"),
    ],
)
def test_frontier_batch_walltime_bins_by_node_count(nodes, ok, too_long):
    assert _job("frontier", nodes=nodes, walltime=ok, group="abc123", **VENV).nodes == nodes
    line = _refused("frontier", nodes=nodes, walltime=too_long, group="abc123", **VENV)
    assert "above the" in line and "on frontier" in line and "or less" in line


def test_frontier_bin_refusal_names_a_shorter_time_a_bigger_bin_and_extended():
    line = _refused("frontier", nodes=64, walltime="4h", group="abc123", **VENV)
    assert "above the 02:00:00 that batch allows for 1-91 nodes on frontier" in line
    assert (
        "--walltime 02:00:00 or less" in line
        and "--nodes 92-183 (up to 06:00:00 on batch)" in line
        and "--queue extended" in line
    )
    assert "qsub" not in line and "Job rejected" not in line  # a PBS message has no place on Slurm
    line = _refused("frontier", nodes=100, walltime="8h", group="abc123", **VENV)
    assert (
        "--nodes 184-1881 (up to 12:00:00 on batch)" in line and "extended" not in line
    )  # 100 nodes: too many for extended


def test_frontier_extended_partition_limits():
    assert _job("frontier", nodes=64, queue="extended", walltime="24h", group="abc123", **VENV).queue == "extended"
    assert "above the extended limit of 64 nodes" in _refused(
        "frontier", nodes=65, queue="extended", group="abc123", **VENV
    )
    assert "above the extended maximum of 24:00:00" in _refused(
        "frontier", nodes=8, queue="extended", walltime="25h", group="abc123", **VENV
    )
    assert "requires an OLCF project" in _refused("frontier", nodes=2, **VENV)


# OLCF's table: the cores of the L3 region attached to each GCD (frontier_user_guide.rst numa-note)
FRONTIER_L3 = {
    0: range(48, 56),
    1: range(56, 64),
    2: range(16, 24),
    3: range(24, 32),
    4: range(0, 8),
    5: range(8, 16),
    6: range(32, 40),
    7: range(40, 48),
}


def test_frontier_rank_i_drives_gcd_i_from_the_seven_free_cores_next_to_it():
    text = _script("frontier", nodes=2, group="abc123", **VENV)
    launch = next(line for line in text.splitlines() if line.startswith("srun --kill-on-bad-exit"))
    args = shlex.split(launch.rstrip("\\"))
    assert "--gpu-bind=none" in args and not any(a.startswith("--gpus-per-task") for a in args)
    masks = next(a for a in args if a.startswith("--cpu-bind=mask_cpu:")).split(":", 1)[1].split(",")
    assert len(masks) == 8
    for gcd, mask in enumerate(masks):
        cores = {bit for bit in range(64) if int(mask, 16) >> bit & 1}
        region = set(FRONTIER_L3[gcd])
        assert cores == region - {min(region)}, gcd  # the first core of each region is the system's (-S 8)
    directives = _directives(text, "#SBATCH")
    assert {
        "--ntasks-per-node=8",
        "--cpus-per-task=7",
        "--gpus-per-node=8",
        "--partition=batch",
        "--network=disable_rdzv_get",
        "--account=abc123",
    } <= set(directives)


def test_frontier_rendezvous_on_the_slingshot_interface_and_rccl_settings():
    text = _script("frontier", nodes=2, group="abc123", **VENV)
    assert "MASTER_ADDR=$(ip -4 -o addr show dev hsn0 " in text
    assert "export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3\n" in text
    assert 'NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-hsn0}"' in text  # the profile's list is kept
    modules = "PrgEnv-gnu/8.7.0 cpe/26.03 miniforge3/23.11.0-0 rocm/7.1.1 rccl-net-plugin craype-accel-amd-gfx90a"
    assert f"module load {modules}\n" in text
    assert "export MIOPEN_USER_DB_PATH=/tmp/miopen-cache\n" in text


# ---- every site: the documented first example works as written ----------------------------


@pytest.mark.parametrize("site", ["tsubame4", "aurora", "perlmutter", "frontier"])
def test_first_example_on_the_site_page_renders(site, hpc_launch_bin, tmp_path):
    page = (DOCS / f"{site}.md").read_text()
    block = page.split("## Example", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    first = block.splitlines()[0]
    argv = shlex.split(first)
    assert argv[:4] == ["hpc-launch", "submit", "-c", site] and argv[-1] == "-f", first
    env = scheduler_env_cleared()
    r = subprocess.run(
        [hpc_launch_bin, *argv[1:-1], "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert f"[{site}]" in r.stdout and "submit:" in r.stderr


# ---- issue 17: the sites read against their own documentation ---------------------------------


def _bash_out(tmp_path, body: str, env: dict) -> str:
    probe = tmp_path / "probe.sh"
    probe.write_text(body)
    return subprocess.run(["bash", str(probe)], capture_output=True, text=True, env=env, check=True).stdout.strip()


def _before_launch(text: str, launch: str) -> list:
    lines = text.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith(launch))]


@pytest.mark.parametrize(
    "cluster,kw,threads",
    [
        ("aurora", {"nodes": 2}, 4),  # ALCF: list:4-7:...: 4 CPUs a rank
        ("aurora", {"nodes": 1, "queue": "debug", "gpus_per_node": 6}, 4),
        ("polaris", {"nodes": 2}, 8),  # 24-31:16-23:8-15:0-7: 8 CPUs a rank, not 64 // 4 = 16
    ],
)
def test_mpiexec_ranks_run_as_many_threads_as_their_binding_has_cpus(cluster, kw, threads, tmp_path):
    text = _script(cluster, group="p", **VENV, **kw)
    before = _before_launch(text, "mpiexec ")
    exports = [line for line in before if line.startswith("export OMP_NUM_THREADS=")]
    assert exports == [f"export OMP_NUM_THREADS={threads}"]
    # PBS sets OMP_NUM_THREADS to the chunk's ncpus in the job: the launch's value wins
    assert _bash_out(tmp_path, f'{exports[0]}\necho "$OMP_NUM_THREADS"\n', {"OMP_NUM_THREADS": "208"}) == str(threads)


def test_mpiexec_threads_follow_the_smallest_binding_and_yield_to_the_users_value(tmp_path):
    mine = tmp_path / "polaris.yaml"
    mine.write_text("launch: {cpu_bind: ['0-7', '8-11', '12,13,14', '16-23']}\n")
    job = resolve(
        JobSpec(cluster="polaris", nodes=1, group="p", workdir="/w"), profiles.load("polaris", profile_file=str(mine))
    )
    assert "export OMP_NUM_THREADS=3\n" in render(job, stamp="s").text
    text = _script("aurora", nodes=2, group="p", env={"OMP_NUM_THREADS": "2"}, **VENV)
    assert [line for line in text.splitlines() if "OMP_NUM_THREADS=" in line] == ["export OMP_NUM_THREADS=2"]


def test_aurora_trains_on_debug_scaling_by_default_not_on_the_shared_debug_pool():
    assert _job("aurora", nodes=2, group="p", **VENV).queue == "debug-scaling"
    # without --queue, a job debug-scaling does not take goes to the first fallback that does
    assert _job("aurora", nodes=1, group="p", **VENV).queue == "debug"
    assert _job("aurora", nodes=2, walltime="4:00:00", group="p", **VENV).queue == "capacity"
    assert _job("aurora", nodes=300, group="p", **VENV).queue == "prod"
    line = _refused("aurora", nodes=20, walltime="4:00:00", group="p", **VENV)  # none takes it
    assert "above the debug-scaling maximum" in line
    line = _refused("aurora", nodes=1, queue="debug-scaling", group="p", **VENV)  # an asked queue is kept
    assert "below the debug-scaling minimum of 2 nodes" in line and "--queue" in line
    assert _job("aurora", nodes=1, queue="debug", group="p", **VENV).queue == "debug"  # still reachable
    assert "#PBS -q debug\n" in _script("aurora", nodes=1, queue="debug", group="p", **VENV)


def test_polaris_venv_is_sourced_on_top_of_conda_base_as_alcf_pairs_them():
    lines = _script("polaris", nodes=2, group="p", **VENV).splitlines()
    order = [lines.index(x) for x in ("module load conda", "conda activate base", "source /v/bin/activate")]
    assert order == sorted(order) and lines.count("conda activate base") == 1
    lines = _script("polaris", nodes=2, group="p").splitlines()  # without a venv: base, once
    assert lines.count("conda activate base") == 1 and not any(line.startswith("source ") for line in lines)


def test_frontier_loads_olcfs_programming_environment_and_its_library_path(tmp_path):
    text = _script("frontier", nodes=2, group="abc123", **VENV)
    lines = text.splitlines()
    load = next(i for i, line in enumerate(lines) if line.startswith("module load "))
    assert lines[load].split()[2:4] == ["PrgEnv-gnu/8.7.0", "cpe/26.03"]
    assert lines[load].index("cpe/26.03") < lines[load].index("rocm/7.1.1")
    path = lines[load + 1]
    assert path.startswith("export LD_LIBRARY_PATH=") and load + 1 < lines.index("source /v/bin/activate")
    body = f'{path}\nprintf "%s" "$LD_LIBRARY_PATH"\n'
    assert _bash_out(tmp_path, body, {"CRAY_LD_LIBRARY_PATH": "/cray/lib", "LD_LIBRARY_PATH": "/x"}) == "/cray/lib:/x"
    assert _bash_out(tmp_path, body, {"CRAY_LD_LIBRARY_PATH": "/cray/lib"}) == "/cray/lib"  # no stray ':'
    # nor a leading one (an empty entry is the current directory) where the CPE set none
    assert _bash_out(tmp_path, body, {"CRAY_LD_LIBRARY_PATH": "", "LD_LIBRARY_PATH": "/x"}) == "/x"


@pytest.mark.parametrize("gpus", [8, 4, 2])
def test_frontier_threads_cpus_and_masks_agree_whatever_the_gcds(gpus, tmp_path):
    from test_site_rules import _SRUN_CPUS

    text = _script("frontier", nodes=2, group="abc123", gpus_per_node=gpus, **VENV)
    cpus_per_task = int(next(d for d in _directives(text, "#SBATCH") if d.startswith("--cpus-per-task=")).split("=")[1])
    assert cpus_per_task * gpus == 56  # the step holds every core, so Slurm accepts the masks
    launch = next(line for line in text.splitlines() if line.startswith("srun --kill-on-bad-exit"))
    masks = next(a for a in shlex.split(launch.rstrip("\\")) if a.startswith("--cpu-bind=mask_cpu:"))
    cores = [bin(int(m, 16)).count("1") for m in masks.split(":", 1)[1].split(",")[:gpus]]
    exports = "\n".join(line for line in text.splitlines() if line.startswith("export OMP_NUM_THREADS="))
    body = exports + "\n" + _SRUN_CPUS.search(text).group(0) + 'echo "$OMP_NUM_THREADS"\n'
    threads = int(_bash_out(tmp_path, body, {"SLURM_CPUS_PER_TASK": str(cpus_per_task)}))
    # hpc_launch/train/preflight.py stops a rank with more threads than CPUs
    assert cores == [7] * gpus and threads == 7


def test_frontier_makes_the_miopen_cache_on_every_node_before_the_ranks_start():
    text = _script("frontier", nodes=2, group="abc123", **VENV)
    lines = text.splitlines()
    mkdir = 'srun --nodes="$NNODES" --ntasks-per-node=1 mkdir -p /tmp/miopen-cache'
    assert mkdir in lines
    assert lines.index(mkdir) < next(i for i, line in enumerate(lines) if line.startswith("srun --kill-on-bad-exit"))
    assert "export MIOPEN_USER_DB_PATH=/tmp/miopen-cache" in lines
    assert "mkdir -p" not in _script("perlmutter", nodes=2, **VENV)  # only where a profile asks


@pytest.mark.parametrize(
    "yaml_text,words",
    [
        ("launch: {node_dirs: [tmp/x]}\n", ["node_dirs", "not an absolute directory"]),
        ("launch: {launcher: mpirun, node_dirs: [/tmp/x]}\n", ["node_dirs are not created by the mpirun launcher"]),
    ],
)
def test_node_dirs_are_absolute_and_for_launchers_that_make_them(tmp_path, yaml_text, words):
    from hpc_launch.errors import ProfileError

    bad = tmp_path / "frontier.yaml"
    bad.write_text(yaml_text)
    with pytest.raises(ProfileError) as err:
        profiles.load("frontier", profile_file=str(bad))
    assert str(err.value).startswith(f"{bad}: ") and all(w in str(err.value) for w in words)
