"""The sites' own rules (issue 7, part D): profile data checked before anything is written, and
what each site's facts change in the rendered script. Sources are in each profile's `facts:`."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from inproc import run_cli
from envutil import scheduler_env_cleared

from hpc_launch.site import profiles
from hpc_launch.errors import ProfileError, SpecError
from hpc_launch.prepare import choose_host
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve


def _job(cluster, **kw):
    kw.setdefault("workdir", "/w")
    spec, profile = JobSpec(cluster=cluster, **kw), profiles.load(cluster)
    return resolve(spec, profile, cwd="/w", host=choose_host(spec, profile))


def _script(cluster, **kw) -> str:
    return render(_job(cluster, **kw), stamp="s").text


def _bash(tmp_path, body: str, env: dict) -> str:
    """Run a piece of a rendered script under `set -u` with exactly `env`; its stdout."""
    probe = tmp_path / "probe.sh"
    probe.write_text(f"set -u\n{body}")
    return subprocess.run(["bash", str(probe)], capture_output=True, text=True, env=env, check=True).stdout.strip()


_SRUN_CPUS = re.compile(r"^if \[ -n \"\$\{SLURM_CPUS_PER_TASK:-\}\" \]; then\n.*?^fi\n", re.M | re.S)


def _refused(cluster, **kw) -> str:
    with pytest.raises(SpecError) as err:
        _job(cluster, **kw)
    line = str(err.value)
    assert "\n" not in line
    return line


# ---- Polaris: the prod routing queue, minimum walltime, demand ------------------------------


def test_polaris_prod_small_tier_refuses_more_than_three_hours_and_names_what_works():
    line = _refused("polaris", nodes=10, queue="prod", walltime="6h", group="p")
    assert "above the 03:00:00 that prod allows for 10-24 nodes" in line
    assert "Job rejected by all possible destinations" in line and "small" in line
    assert "--walltime 03:00:00 or less" in line
    assert "--nodes 25-99" in line  # the nearest tier that allows 6 h
    assert "--queue preemptable" in line  # 1-10 nodes, 72 h
    assert "demand" not in line  # by request only: never suggested


@pytest.mark.parametrize("nodes,walltime,fix", [(30, "7h", "--nodes 100-496"), (120, "25h", None)])
def test_polaris_prod_medium_and_large_tiers(nodes, walltime, fix):
    line = _refused("polaris", nodes=nodes, queue="prod", walltime=walltime, group="p")
    assert "above" in line
    if fix:
        assert fix in line


@pytest.mark.parametrize("nodes,walltime", [(10, "3h"), (24, "3h"), (25, "6h"), (99, "6h"), (100, "24h"), (496, "24h")])
def test_polaris_prod_accepts_every_tier_at_its_limit(nodes, walltime):
    assert _job("polaris", nodes=nodes, queue="prod", walltime=walltime, group="p").nodes == nodes


@pytest.mark.parametrize("queue", ["debug", "debug-scaling", "prod", "preemptable", "demand", "capacity"])
def test_polaris_every_queue_needs_five_minutes(queue):
    nodes = 10 if queue == "prod" else 1
    line = _refused("polaris", nodes=nodes, queue=queue, walltime="4m", group="p")
    assert f"below the {queue} minimum of 00:05:00" in line and "--walltime 00:05:00 or more" in line
    assert _job("polaris", nodes=nodes, queue=queue, walltime="5m", group="p").walltime == "00:05:00"


def test_polaris_demand_queue_is_known_with_its_limits():
    assert _job("polaris", nodes=56, queue="demand", walltime="1h", group="p").queue == "demand"
    assert "above the demand limit of 56" in _refused("polaris", nodes=57, queue="demand", group="p")
    assert "01:00:00" in _refused("polaris", nodes=2, queue="demand", walltime="2h", group="p")


def test_polaris_script_is_a_bash_login_shell():
    assert _script("polaris", nodes=2, group="p").startswith("#!/bin/bash -l\n#PBS ")
    assert _script("abci", nodes=1, group="g", venv="/v").startswith("#!/bin/bash\n")


def test_polaris_alcf_nccl_environment_and_aws_ofi_plugin_path(tmp_path):
    text = _script("polaris", nodes=2, group="p")
    for line in (
        "export NCCL_NET_GDR_LEVEL=PHB",
        "export NCCL_CROSS_NIC=1",
        "export NCCL_COLLNET_ENABLE=1",
        "export NCCL_NET='AWS Libfabric'",
        "export FI_CXI_DISABLE_HOST_REGISTER=1",
        "export FI_MR_CACHE_MONITOR=userfaultfd",
        "export FI_CXI_DEFAULT_CQ_SIZE=131072",
    ):
        assert line + "\n" in text
    export = next(line for line in text.splitlines() if line.startswith("export LD_LIBRARY_PATH="))
    body = f"{export}\nprintf '%s' \"$LD_LIBRARY_PATH\"\n"
    plugin = "/soft/libraries/hwloc/lib:/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"
    assert _bash(tmp_path, body, {"LD_LIBRARY_PATH": "/opt/cuda/lib64"}) == plugin + ":/opt/cuda/lib64"
    assert _bash(tmp_path, body, {}) == plugin  # no stray ':' (an empty entry means the current directory)


def test_polaris_ranks_are_bound_to_the_cores_nearest_their_gpu():
    text = _script("polaris", nodes=2, group="p")
    assert '--ppn 4 --hostfile "$NODELIST" --cpu-bind list:24-31:16-23:8-15:0-7 \\' in text
    assert "--cpu-bind depth" not in text
    assert "--cpu-bind list:24-31:16-23 " in _script("polaris", nodes=1, gpus_per_node=2, group="p")


def test_cpu_bind_must_cover_every_rank(tmp_path):
    mine = tmp_path / "polaris.yaml"
    mine.write_text("launch: {cpu_bind: ['0-7', '8-15']}\n")
    spec = JobSpec(cluster="polaris", nodes=1, group="p", workdir="/w")
    with pytest.raises(SpecError, match="cpu_bind .* gives CPUs for 2.*--gpus-per-node 2"):
        resolve(spec, profiles.load("polaris", profile_file=str(mine)))


# ---- Miyabi: queue limits, the routed regular-g, unset before mpirun ------------------------


@pytest.mark.parametrize("queue,limit", [("debug-g", 16), ("short-g", 8), ("regular-g", 256)])
def test_miyabi_queue_node_limits(queue, limit):
    assert _job("miyabi", nodes=limit, queue=queue, walltime="20m", group="g", venv="/v").nodes == limit
    assert f"above the {queue} limit of {limit} nodes" in _refused(
        "miyabi", nodes=limit + 1, queue=queue, walltime="20m", group="g", venv="/v"
    )


def test_miyabi_regular_g_above_128_nodes_is_capped_at_24_hours():
    assert _job("miyabi", nodes=128, queue="regular-g", walltime="48h", group="g", venv="/v").walltime == "48:00:00"
    line = _refused("miyabi", nodes=200, queue="regular-g", walltime="48h", group="g", venv="/v")
    assert "above the 24:00:00 that regular-g allows for 129-256 nodes" in line and "x-large-g" in line
    assert "--walltime 24:00:00 or less" in line and "--nodes 65-128" in line


def test_miyabi_unsets_nv_hpcx_env_list_after_the_modules_and_before_mpirun():
    text = _script("miyabi", nodes=2, queue="short-g", group="g", venv="/v")
    lines = text.splitlines()
    unset = lines.index("unset OMPI_MCA_mca_base_env_list")
    assert lines.index("module load cuda/12.8 cudnn/9.10.1.4 nvidia/25.3 nv-hpcx/25.3") < unset
    assert unset < next(i for i, line in enumerate(lines) if line.startswith("mpirun "))


def test_unset_env_takes_variable_names_only(tmp_path):
    bad = tmp_path / "miyabi.yaml"
    bad.write_text("launch: {unset_env: ['FOO; rm -rf ~']}\n")
    with pytest.raises(
        ProfileError, match=r"miyabi.yaml: key `launch`: unset_env: 'FOO; rm -rf ~' is not a variable name"
    ):
        profiles.load("miyabi", profile_file=str(bad))


# ---- one chunk per node, threads per rank -------------------------------------------------


@pytest.mark.parametrize("cluster,kw", [("abci", {}), ("miyabi", {}), ("polaris", {})])
def test_multi_chunk_pbs_sites_ask_for_one_chunk_per_node(cluster, kw):
    text = _script(cluster, nodes=2, group="g", venv="/v")
    assert "#PBS -l place=scatter\n" in text


@pytest.mark.parametrize(
    "kw,select",
    [
        ({}, "select=2:mpiprocs=8:ompthreads=12"),  # AIST aiaccel: 96 cores / 8 ranks
        ({"gpus_per_node": 4}, "select=2:mpiprocs=4:ompthreads=24"),
        ({"queue": "rt_HG", "nodes": 1}, "select=1:mpiprocs=1:ompthreads=8"),  # aiaccel rt_HG: 8
    ],
)
def test_abci_asks_pbs_for_threads_per_rank(kw, select):
    kw = {"nodes": 2, **kw}
    assert f"#PBS -l {select}\n" in _script("abci", group="g", venv="/v", **kw)


def test_cpu_placeholders_need_the_node_cpus(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\nextends: slurm\nnode: {gpus: 4, cpus: null}\n")
    with pytest.raises(ProfileError, match=r"mine.yaml: .*\{cpus_per_proc\}.*needs node.cpus"):
        profiles.load("mine", profile_file=str(mine))


# ---- generic Slurm: CPUs per rank ------------------------------------------------------------


def test_slurm_asks_for_cpus_per_task_and_hands_them_to_srun(tmp_path):
    text = _script("slurm", nodes=2)
    assert "#SBATCH --cpus-per-task=8\n" in text  # 32 CPUs / 4 ranks
    assert "#SBATCH --cpus-per-task=16\n" in _script("slurm", nodes=2, gpus_per_node=2)
    body = _SRUN_CPUS.search(text).group(0) + 'echo "${SRUN_CPUS_PER_TASK:-unset} ${OMP_NUM_THREADS:-unset}"\n'
    assert _bash(tmp_path, body, {"SLURM_CPUS_PER_TASK": "8"}) == "8 8"
    assert _bash(tmp_path, body, {"SLURM_CPUS_PER_TASK": "8", "OMP_NUM_THREADS": "2"}) == "8 2"
    assert _bash(tmp_path, body, {}) == "unset unset"  # a profile without --cpus-per-task: srun as before


def test_srun_torchrun_gives_its_one_task_per_node_the_cpus_of_all_ranks(tmp_path):
    mine = tmp_path / "slurm.yaml"
    mine.write_text("launch: {launcher: srun-torchrun}\n")
    job = resolve(JobSpec(cluster="slurm", nodes=2, workdir="/w"), profiles.load("slurm", profile_file=str(mine)))
    text = render(job, stamp="s").text
    body = _SRUN_CPUS.search(text).group(0) + 'echo "$SRUN_CPUS_PER_TASK $OMP_NUM_THREADS"\n'
    assert _bash(tmp_path, body, {"SLURM_CPUS_PER_TASK": "8"}) == "32 8"


# ---- no torch in the system python: never silently ------------------------------------------


@pytest.mark.parametrize("cluster", ["abci", "abci2", "miyabi"])
def test_site_without_torch_refuses_when_no_env_can_be_used(cluster, monkeypatch):
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)  # hpc-launch not in a virtualenv
    line = _refused(cluster, nodes=1, group="g", login="local")
    assert "system python3" in line and "--venv PATH" in line and "python.venv" in line
    assert f"clusters/{cluster}.yaml" in line


def test_remote_submission_cannot_use_the_local_virtualenv():
    assert sys.prefix != sys.base_prefix, "tests run in the project's .venv"
    line = _refused("abci", nodes=1, group="g", login="abci-over-ssh")
    assert "--venv PATH" in line


def test_submitting_on_the_login_node_uses_the_active_virtualenv_and_says_so(capsys):
    job = _job("abci", nodes=1, group="g", login="local")
    assert job.venv == sys.prefix
    assert f"the job activates {sys.prefix}" in capsys.readouterr().err
    text = render(job, stamp="s").text
    assert text.index("module load python/3.12/3.12.9") < text.index(f"source {sys.prefix}/bin/activate")


def test_a_given_venv_or_conda_env_is_used_quietly(capsys):
    assert _job("miyabi", nodes=1, group="g", login="remote", venv="/work/g/venv").venv == "/work/g/venv"
    job = _job("abci", nodes=1, group="g", login="remote", conda="torch")
    assert job.venv is None and job.conda == "torch"
    assert capsys.readouterr().err == ""


def test_local_keeps_its_auto_venv(monkeypatch):
    assert _job("local").venv == sys.prefix
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)
    assert _job("local").venv is None  # system python, as before: no refusal on `local`


# ---- --script gets no training defaults --------------------------------------------------------


def test_own_script_does_not_get_the_profile_train_args():
    job = _job("local", script="my.py")
    assert job.train_args == []
    assert render(job, stamp="s").text.rstrip().endswith("my.py")
    assert _job("local", script="my.py", train_args=["--lr", "1"]).train_args == ["--lr", "1"]
    assert _job("local").train_args == profiles.load("local").train_args


# ---- the schema: errors name the file and the key ------------------------------------------


@pytest.mark.parametrize(
    "yaml_text,words",
    [
        (
            "queues: {prod: {tiers: [{min_nodes: 30, max_nodes: 20, max_walltime: '1:00:00'}]}}\n",
            ["queues", "min_nodes is above max_nodes"],
        ),
        (
            "queues: {prod: {tiers: [{min_nodes: 10, max_nodes: 30, max_walltime: '3:00:00'}, {min_nodes: 25, "
            "max_nodes: 99, max_walltime: '6:00:00'}]}}\n",
            ["overlap"],
        ),
        ("queues: {prod: {tiers: [{min_nodes: 10, max_nodes: 30, max_walltime: 'soon'}]}}\n", ["malformed walltime"]),
        ("queues: {debug: {min_walltime: 'x'}}\n", ["queues", "malformed walltime"]),
        (
            "queues: {prod: {tiers: [{min_nodes: 10, max_nodes: 30, max_wall: '3:00:00'}]}}\n",
            ["tiers", "max_wall", "not a known key"],
        ),
        ("paths: {LD_LIBRARY_PATH: ['/a:/b']}\n", ["paths.LD_LIBRARY_PATH", "one directory"]),
        ("launch: {cpu_bind: ['0-7; reboot']}\n", ["launch", "not a CPU list"]),
        ("launch: {launcher: mpirun, cpu_bind: ['0-7']}\n", ["launch", "not rendered by the mpirun launcher"]),
    ],
)
def test_bad_site_rules_in_a_profile_name_file_and_key(tmp_path, yaml_text, words):
    bad = tmp_path / "polaris.yaml"
    bad.write_text(yaml_text)
    with pytest.raises(ProfileError) as err:
        profiles.load("polaris", profile_file=str(bad))
    line = str(err.value)
    assert line.startswith(f"{bad}: "), line
    for word in words:
        assert word in line, (word, line)


def test_cli_refuses_a_polaris_tier_violation_in_one_line_before_writing(tmp_path, hpc_launch_bin):
    r = run_cli(
        ["submit", "-c", "polaris", "-n", "10", "-q", "prod", "-t", "6h", "-P", "p", "--login", "local"],
        env=scheduler_env_cleared(),
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "--walltime 03:00:00 or less" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_a_remote_abci_job_without_a_venv_in_one_line(tmp_path, hpc_launch_bin):
    r = run_cli(
        ["submit", "-c", "abci", "-n", "1", "-P", "g", "--login", "abci-remote", "--dry-run"],
        env=scheduler_env_cleared(),
        cwd=tmp_path,
    )
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and "pass --venv PATH" in r.stderr


def test_queue_fallbacks_name_queues_the_profile_has(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "name: mine\nextends: slurm\nqueues: {a: {min_nodes: 2}, b: {}}\ndefault_queue: a\nqueue_fallbacks: [b, c]\n"
    )
    with pytest.raises(ProfileError, match=r"queue_fallbacks: 'c' is not one of the queues \(a, b\)"):
        profiles.load("mine", profile_file=str(mine))
    mine.write_text(
        "name: mine\nextends: slurm\nqueues: {a: {min_nodes: 2}, b: {}}\ndefault_queue: a\nqueue_fallbacks: [b]\n"
    )
    spec = JobSpec(cluster="mine", nodes=1, workdir="/w")
    assert resolve(spec, profiles.load("mine", profile_file=str(mine)), cwd="/w").queue == "b"


# ---- a user's jobs at once: chains, sweeps, where --submit (issue 28) -----------------------


@pytest.mark.parametrize(
    "cluster, queue, most, fix",
    [
        ("aurora", "debug-scaling", 1, "--queue capacity"),  # ALCF: 1 job per user
        ("aurora", "debug", 1, "--queue capacity"),
        ("polaris", "debug-scaling", 1, "--queue"),
        ("polaris", "capacity", 2, "--chain 2"),  # ALCF: 2 queued or running per user
        ("aurora", "capacity", 5, "--chain 5"),  # ALCF: 5 queued or running per user
    ],
)
def test_a_chain_longer_than_the_queue_lets_a_user_queue_is_refused_before_submit(cluster, queue, most, fix):
    nodes = 2 if queue == "debug-scaling" else 1
    _job(cluster, queue=queue, nodes=nodes, chain=most, group="p", venv="/v")  # at the limit: taken
    line = _refused(cluster, queue=queue, nodes=nodes, chain=most + 1, group="p", venv="/v")
    assert f"--chain {most + 1} submits {most + 1} linked jobs at once in {queue}" in line
    assert f"allows a user {most} job" in line and fix in line


def test_a_chain_on_aurora_without_a_queue_names_the_queue_that_takes_it():
    line = _refused("aurora", nodes=2, chain=3, group="p", venv="/v")  # default: debug-scaling
    assert "in debug-scaling" in line and "use --chain 1 (one job), or --queue capacity (5 per user)" in line


def test_frontier_counts_a_users_jobs_in_all_partitions_together():
    _job("frontier", nodes=2, chain=100, group="p", venv="/v")
    line = _refused("frontier", nodes=2, chain=101, group="p", venv="/v")
    assert "frontier allows a user 100 jobs at once in all queues together" in line and "--chain 100" in line


def test_a_chain_refused_by_the_queue_limit_writes_nothing(tmp_path, hpc_launch_bin):
    run = run_cli(["submit", "-c", "aurora", "--nodes", "2", "--chain", "2", "--group", "p", "--venv", "/v",
         "--workdir", str(tmp_path), "--dry-run"], env=scheduler_env_cleared(), cwd=tmp_path)  # fmt: skip
    assert run.returncode != 0 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "allows a user 1 job there at once" in run.stderr
    assert list(tmp_path.iterdir()) == []


def _sweep(cluster, points, **kw):
    from hpc_launch import sweep

    spec = JobSpec(cluster=cluster, group="p", venv="/v", workdir="/w", **kw)
    return sweep.plan(spec, [{"micro_batch": 2**i} for i in range(points)])


def test_a_sweep_array_counts_each_task_against_the_queue_limit():
    # ALCF: an array's subjobs count one by one against the queue's queued + running limit
    line = str(pytest.raises(SpecError, _sweep, "aurora", 6, queue="capacity", nodes=1).value)
    assert line.startswith("the sweep submits 6 jobs at once in capacity, but aurora allows a user 5 jobs there")
    assert "a grid of at most 5 point(s)" in line


def test_a_site_that_counts_an_array_as_one_job_takes_the_sweep(tmp_path, monkeypatch):
    (tmp_path / "aurora.yaml").write_text("array_tasks_count: false\n")
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(tmp_path))
    plan = _sweep("aurora", 6, queue="capacity", nodes=1)
    assert [s.array for s in plan.submissions] == [True]


def test_a_sweep_of_separate_jobs_says_how_many_run_at_once():
    from hpc_launch import sweep

    spec = JobSpec(cluster="aurora", group="p", venv="/v", workdir="/w", queue="capacity", nodes=1)
    plan = sweep.plan(spec, [{"micro_batch": m} for m in (1, 2, 4)], separate=True)
    assert len(plan.submissions) == 3
    assert "aurora runs 2 of a user's jobs at once on capacity: the points wait their turn" in plan.notes


def test_where_submit_refuses_a_chain_no_cluster_may_queue_before_connecting():
    from hpc_launch.jobs.first_start import submit_first_start

    opened = []
    with pytest.raises(SpecError, match="no cluster takes the job as asked") as err:
        submit_first_start(
            ["aurora", "polaris"],
            lambda c: JobSpec(cluster=c, group="p", venv="/v", workdir="/w", nodes=2, chain=2),
            transport=lambda host: opened.append(host),
        )
    assert str(err.value).count("allows a user 1 job there at once") == 2
    assert opened == []


# ---- the sites' pages: TSUBAME 4.0's interface, Aurora's work dir (issue 28) ----------------


def test_tsubame4_talks_over_bond0_not_deepspeeds_eth0():
    text = _script("tsubame4", group="g", venv="/v")
    # DeepSpeed's mpirun adds btl_tcp_if_include eth0, which TSUBAME 4.0 nodes do not have
    assert "--launcher_args '--mca btl_tcp_if_include bond0'" in text
    assert 'NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-bond0}"' in text


@pytest.mark.parametrize("workdir", [None, "~/runs/a", "~", "/home/alice/runs"])
def test_aurora_refuses_a_work_dir_in_home_naming_the_projects_flare_space(workdir):
    spec = JobSpec(cluster="aurora", group="proj1", venv="/v", login="aurora", workdir=workdir)
    with pytest.raises(SpecError) as err:
        from hpc_launch.prepare import prepare

        prepare(spec)  # over ssh: without --workdir the job would go to ~/hpc-launch/NAME
    line = str(err.value)
    assert "is in the home directory" in line and "--workdir /lus/flare/projects/proj1/<your dir>" in line


def test_aurora_takes_a_work_dir_in_the_project_space():
    job = _job("aurora", group="proj1", venv="/v", login="aurora", workdir="/lus/flare/projects/proj1/me/run")
    assert job.workdir == "/lus/flare/projects/proj1/me/run"
    _job("polaris", group="proj1", login="polaris", workdir="~/runs")  # Polaris says nothing of the kind
