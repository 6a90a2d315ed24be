"""Rank discovery from each launcher's environment, in the documented order."""

import pytest


from hpc_launch.train import dist
from hpc_launch.train.errors import TrainError

pytestmark = pytest.mark.train


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_SIZE": "4"}, (3, 8, 1, 4, "torch")),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "OMPI_COMM_WORLD_RANK": "1"}, (0, 2, 0, None, "torch")),
        (
            {
                "OMPI_COMM_WORLD_RANK": "5",
                "OMPI_COMM_WORLD_SIZE": "8",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            },
            (5, 8, 1, 4, "openmpi"),
        ),
        (
            {"PMI_RANK": "6", "PMI_SIZE": "8", "PALS_LOCAL_RANKID": "2", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"},
            (6, 8, 2, None, "pmi"),
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, (1, 2, 1, None, "pmi")),
        (
            {
                "SLURM_PROCID": "3",
                "SLURM_NTASKS": "4",
                "SLURM_LOCALID": "1",
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
            },
            (3, 4, 1, 2, "slurm"),
        ),
        # The batch step of an sbatch job is not a rank (no SLURM_STEP_ID): world of 1.
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"}, (0, 1, 0, 1, "single")),
        ({}, (0, 1, 0, 1, "single")),
    ],
)
def test_discover(env, expected):
    info = dist.discover(env)
    assert (info.rank, info.world_size, info.local_rank, info.local_size, info.source) == expected


def test_export_env_keeps_what_the_job_script_set():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234", "GLOO_SOCKET_IFNAME": "eth0"}
    dist.export_env(dist.RankInfo(1, 8, 1, 4, "openmpi"), env)
    assert env == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "1234",
        "GLOO_SOCKET_IFNAME": "eth0",
        "RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
    }


def test_export_env_defaults_for_single_node_and_refuses_multi_node_without_master():
    env = {}
    dist.export_env(dist.RankInfo(0, 1, 0, 1, "single"), env)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29500")
    with pytest.raises(TrainError, match="MASTER_ADDR"):
        dist.export_env(dist.RankInfo(5, 8, 1, 4, "openmpi"), {})


def test_threads_split_between_local_ranks(monkeypatch):
    monkeypatch.setattr(dist.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(dist.os, "sched_getaffinity", lambda pid: {0, 1})
    env = {}
    dist.default_threads(dist.RankInfo(0, 2, 0, 2, "torch"), env)
    assert env["OMP_NUM_THREADS"] == "1"
    env = {"OMP_NUM_THREADS": "7"}
    dist.default_threads(dist.RankInfo(0, 2, 0, 2, "torch"), env)
    assert env["OMP_NUM_THREADS"] == "7"


def test_threads_follow_the_binding_a_launcher_gave_not_the_nodes_total(monkeypatch):
    # Aurora: 12 ranks on a 208-CPU node, each bound to 4 CPUs (mpiexec --cpu-bind list:...)
    monkeypatch.setattr(dist.os, "cpu_count", lambda: 208)
    monkeypatch.setattr(dist.os, "sched_getaffinity", lambda pid: {1, 2, 3, 4})
    env = {}
    dist.default_threads(dist.RankInfo(5, 24, 5, 12, "pmix"), env)
    assert env["OMP_NUM_THREADS"] == "4"  # was 208 // 12 = 17
