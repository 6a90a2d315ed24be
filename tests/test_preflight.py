"""The pre-flight gate's rules (hpc_launch/train/dist.py discovery, hpc_launch/train/preflight.py checks) without a
launch: the worlds a wrong profile produces are refused with the host, the fact and the fix."""

from __future__ import annotations

import socket

import pytest

from hpc_launch import protocol
from hpc_launch.site import launchers
from hpc_launch.train import dist, preflight
from hpc_launch.train.dist import PreflightError


def _facts(rank, host, local_rank, *, threads=1, cpus=None, local_size=None, device=None, if_problem=None):
    return {
        "rank": rank,
        "host": host,
        "local_rank": local_rank,
        "local_size": local_size,
        "threads": threads,
        "cpus": list(cpus if cpus is not None else (local_rank,)),
        "device": device,
        "ifname": "eth0",
        "if_problem": if_problem,
        "source": "test",
    }


# ---- discovery -----------------------------------------------------------------------------------


def test_aurora_ranks_under_pals_mpiexec_learn_the_world_from_the_job_script():
    # What ALCF's Aurora mpiexec sets: PMIX_RANK and PALS_*, no world size anywhere.
    env = {
        "PMIX_RANK": "13",
        "PALS_RANKID": "13",
        "PALS_LOCAL_RANKID": "1",
        "PALS_LOCAL_SIZE": "12",
        protocol.ENV_WORLD_SIZE: "24",
    }
    info = dist.discover(env)
    assert (info.rank, info.world_size, info.local_rank, info.local_size, info.source) == (13, 24, 1, 12, "pmix")


def test_pals_alone_is_read_too():
    env = {"PALS_RANKID": "3", "PALS_LOCAL_RANKID": "3", "PALS_LOCAL_SIZE": "4", protocol.ENV_WORLD_SIZE: "8"}
    info = dist.discover(env)
    assert (info.rank, info.world_size, info.local_rank, info.source) == (3, 8, 3, "pals")


def test_a_launcher_with_no_world_size_and_no_count_from_the_script_is_refused_not_guessed():
    with pytest.raises(PreflightError, match="sets no world size") as err:
        dist.discover({"PMIX_RANK": "0", "PALS_LOCAL_RANKID": "0"})
    assert err.value.exit_code == protocol.EXIT_PREFLIGHT


def test_plain_copies_of_a_multi_rank_job_are_refused():
    # the old Aurora failure: no variable we read, so every copy thought it was rank 0 of 1
    with pytest.raises(PreflightError, match="found no launcher's rank variables .* asked for 24 ranks"):
        dist.discover({protocol.ENV_WORLD_SIZE: "24"})
    assert dist.discover({protocol.ENV_WORLD_SIZE: "1"}).world_size == 1


def test_a_world_other_than_the_one_asked_for_is_refused():
    with pytest.raises(PreflightError, match="started a world of 4 rank.* asked for 8"):
        dist.discover({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", protocol.ENV_WORLD_SIZE: "8"})


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PMI_RANK": "x", "PMI_SIZE": "2"}, "not a number"),
        ({"RANK": "5", "WORLD_SIZE": "4"}, "rank 5 in a world of 4"),
    ],
)
def test_nonsense_from_a_launcher_is_named(env, message):
    with pytest.raises(PreflightError, match=message):
        dist.discover(env)


def test_every_launcher_in_the_registry_names_a_rank_convention_the_entrypoint_reads():
    names = {c.name for c in dist.CONVENTIONS}
    for name in launchers.names():
        assert set(launchers.get(name).ranks) <= names, name


# ---- the world against the plan ------------------------------------------------------------------


def test_a_right_world_passes():
    facts = [
        _facts(r, f"n{r // 2}", r % 2, cpus=(2 * (r % 2), 2 * (r % 2) + 1), threads=2, local_size=2) for r in range(4)
    ]
    assert preflight.check(facts, world=4, ranks_per_node=2) == []


def test_two_ranks_on_one_local_rank_and_one_device_are_named_with_their_host():
    facts = [_facts(0, "n1", 0, device="0"), _facts(1, "n1", 0, device="0"), _facts(2, "n2", 0), _facts(3, "n2", 1)]
    problems = preflight.check(facts, world=4, ranks_per_node=2)
    text = " | ".join(f"{p.host}: {p.fact}" for p in problems)
    assert "n1: ranks 0, 1 share local ranks [0, 0]" in text and "share accelerator(s)" in text
    assert not any(p.host == "n2" for p in problems)


def test_more_threads_than_the_binding_is_named_with_the_fix():
    # Polaris before the fix: 16 threads inside an 8-CPU binding
    facts = [_facts(0, "x3001", 0, threads=16, cpus=range(8)), _facts(1, "x3001", 1, threads=8, cpus=range(8, 16))]
    [problem] = preflight.check(facts, world=2, ranks_per_node=2)
    assert problem.host == "x3001" and "rank 0 runs 16 threads in a 8-CPU binding" in problem.fact
    assert "OMP_NUM_THREADS=8" in problem.fix


def test_unbound_ranks_that_oversubscribe_their_node_are_named():
    facts = [_facts(r, "n1", r, threads=4, cpus=range(4)) for r in range(2)]
    [problem] = preflight.check(facts, world=2, ranks_per_node=2)
    assert "2 rank(s) run 8 threads on 4 CPUs" in problem.fact and "OMP_NUM_THREADS=2" in problem.fix


def test_a_host_with_the_wrong_rank_count_or_a_missing_interface_is_named():
    facts = [
        _facts(0, "n1", 0),
        _facts(1, "n2", 0, if_problem="interface hsn0 does not exist (this host has: lo, eth0)"),
        _facts(2, "n2", 1, if_problem="interface hsn0 does not exist (this host has: lo, eth0)"),
    ]
    problems = preflight.check(facts, world=3, ranks_per_node=2)
    assert [(p.host, p.bad_host) for p in problems] == [("n1", False), ("n2", True)]
    assert "1 rank(s) (0) on this host, the job planned 2 per node" in problems[0].fact
    assert "hsn0 does not exist" in problems[1].fact


def test_missing_ranks_in_the_gathered_world_are_named():
    [problem] = preflight.check([_facts(0, "n1", 0), _facts(2, "n2", 0)], world=3, ranks_per_node=None)
    assert "ranks [0, 2] started, the job asked for 0..2" in problem.fact


def test_the_verdict_names_every_problem_and_reports_bad_hosts(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "job.badhosts"
    monkeypatch.setenv(protocol.ENV_BAD_HOSTS, str(bad))
    problems = [
        preflight.Problem("n2", "interface hsn0 is down", "set net_if", bad_host=True),
        preflight.Problem("n1", "rank 0 runs 16 threads in a 8-CPU binding", "set OMP_NUM_THREADS=8"),
    ]
    verdict = preflight._fail(problems)
    err = capsys.readouterr().err
    assert verdict == "the job is not what was asked on n2: interface hsn0 is down (and 1 more problem above)"
    assert f"{protocol.PREFLIGHT_FAILED}n1: rank 0 runs 16 threads" in err and "fix: set OMP_NUM_THREADS=8" in err
    assert protocol.parse_bad_hosts_file(bad.read_text()) == {"n2": "preflight: interface hsn0 is down"}


# ---- the interface check on this machine's own interfaces ------------------------------------------


def test_the_interface_check_reads_this_hosts_interfaces():
    names = [n for _, n in socket.if_nameindex()]
    assert preflight.interface_problem("lo") is None  # up, 127.0.0.1
    assert preflight.interface_problem(None) is None and preflight.interface_problem("^docker,lo") is None
    missing = preflight.interface_problem("hpcnosuchif")
    assert missing.startswith("interface hpcnosuchif does not exist") and all(n in missing for n in names)
    assert preflight.interface_problem("=l") is not None  # `=`: exact names only


def test_only_a_rank_on_master_addrs_host_serves_the_store():
    # a second "rank 0" on another host must join the real store (and be caught), not serve its own
    assert preflight._is_here("127.0.0.1") and preflight._is_here("localhost")
    assert not preflight._is_here("192.0.2.1")  # TEST-NET-1: never this host's


def test_a_build_lock_left_by_a_killed_op_build_is_removed_and_a_fresh_one_kept(tmp_path):
    # torch's FileBaton waits forever on a `lock` file: every later job hung at "starting DeepSpeed"
    old = tmp_path / "deepspeed_shm_comm" / "lock"
    new = tmp_path / "cpu_adam" / "lock"
    for lock in (old, new):
        lock.parent.mkdir()
        lock.touch()
    import os

    os.utime(old, (1000.0, 1000.0))
    removed = dist.clear_stale_build_locks({"TORCH_EXTENSIONS_DIR": str(tmp_path)}, now=1000.0 + dist.STALE_LOCK_S + 1)
    assert removed == [str(old)] and not old.exists() and new.exists()


# ---- $HPC_LAUNCH_PREFLIGHT_TIMEOUT: a value that is no time is the gate's own refusal ------------


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "-inf", "1e999", "ten", "1e7"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_by_name(value):
    with pytest.raises(PreflightError) as err:
        preflight._timeout({protocol.ENV_PREFLIGHT_TIMEOUT: value})
    assert protocol.ENV_PREFLIGHT_TIMEOUT in err.value.message and "seconds" in err.value.message
    assert err.value.exit_code == protocol.EXIT_PREFLIGHT


def test_a_timeout_of_seconds_is_taken_and_none_is_the_default():
    assert preflight._timeout({protocol.ENV_PREFLIGHT_TIMEOUT: "600"}) == 600.0
    assert preflight._timeout({protocol.ENV_PREFLIGHT_TIMEOUT: "2.5"}) == 2.5
    assert preflight._timeout({}) == protocol.PREFLIGHT_TIMEOUT_S
    assert preflight._timeout({protocol.ENV_PREFLIGHT_TIMEOUT: " "}) == protocol.PREFLIGHT_TIMEOUT_S


def test_the_gate_refuses_a_nan_timeout_before_it_waits_for_anyone():
    from hpc_launch.train.rank_info import RankInfo

    env = {protocol.ENV_PREFLIGHT_TIMEOUT: "nan", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    with pytest.raises(PreflightError, match="HPC_LAUNCH_PREFLIGHT_TIMEOUT"):
        preflight.gate(RankInfo(1, 2, 1, 2, "test"), backend="gloo", env=env)
