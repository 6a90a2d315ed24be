"""The watchdog's rules on what the ranks publish (hpc_launch/train/watchdog.py), without a job: which rank
stopped first, when a job counts as hung, who is a straggler."""

from __future__ import annotations

from hpc_launch.train.watchdog import Limits, Progress, hang_bound, stalled, stragglers

NOW = 10_000.0


def _p(rank, step, at, *, beat=NOW, work=0.02, busy=False, host=None):
    return Progress(rank, host or f"pod{rank + 1}", step, at, work, beat, busy, 1000 + rank, step)


def test_progress_travels_through_the_store_as_one_line():
    p = _p(2, 41, 1234.5, work=0.0315, busy=True, host="x3001c0s13b0n0.hsn.cm.polaris.alcf.anl.gov")
    assert Progress.decode(2, p.encode()) == Progress(2, p.host, 41, 1234.5, 0.0315, NOW, True, 1002, 41)


def test_a_stopped_process_is_named_by_its_stale_heartbeat_even_at_the_same_step():
    # SIGSTOP after step 40: the others finished step 40 too and wait in step 41's all-reduce
    ranks = [_p(0, 40, NOW - 30), _p(1, 40, NOW - 31, beat=NOW - 29), _p(2, 40, NOW - 30)]
    assert stalled(ranks, NOW, bound=20).rank == 1


def test_an_alive_rank_stuck_in_its_own_code_is_the_one_behind():
    ranks = [_p(0, 40, NOW - 30), _p(1, 39, NOW - 35), _p(2, 40, NOW - 30)]
    assert stalled(ranks, NOW, bound=20).rank == 1


def test_no_hang_within_the_bound_before_the_first_step_or_while_checkpointing():
    assert stalled([_p(0, 40, NOW - 5), _p(1, 40, NOW - 5)], NOW, bound=20) is None
    assert stalled([_p(0, 0, NOW - 500), _p(1, 0, NOW - 500)], NOW, bound=20) is None  # still starting
    assert stalled([_p(0, 40, NOW - 500, busy=True), _p(1, 40, NOW - 500)], NOW, bound=20) is None


def test_a_process_stopped_while_checkpointing_or_starting_is_still_named():
    # the progress rule pauses there; a frozen heartbeat does not
    ranks = [
        _p(0, 40, NOW - 500, busy=True),
        _p(1, 40, NOW - 500, busy=True, beat=NOW - 25),
        _p(2, 40, NOW - 500, busy=True),
    ]
    assert stalled(ranks, NOW, bound=20).rank == 1
    assert stalled([_p(0, 0, NOW - 60), _p(1, 0, NOW - 60, beat=NOW - 21)], NOW, bound=20).rank == 1
    assert stalled([_p(0, 0, NOW - 60), _p(1, 0, NOW - 60, beat=NOW - 19)], NOW, bound=20) is None


def test_the_bound_follows_the_measured_step_time_above_a_floor():
    limits = Limits(floor_s=60, factor=20)
    assert hang_bound([], limits, []) == 60
    assert hang_bound([], limits, [0.5, 0.6, 0.5]) == 60  # 20 x 0.5 s < the floor
    assert hang_bound([], limits, [10.0, 12.0, 11.0]) == 220  # slow steps: 20 x the median


def test_a_rank_slower_than_the_median_by_the_factor_is_a_straggler_and_only_it():
    work = {0: 0.020, 1: 0.046, 2: 0.021}
    slow = stragglers(work, factor=1.5)
    assert list(slow) == [1] and round(slow[1], 1) == 2.2
    assert stragglers(work, factor=3.0) == {}
    assert stragglers({0: 0.02}, factor=1.5) == {}  # one rank: no one to compare with
    assert stragglers({0: 0.02, 1: 0.0, 2: 0.05}, factor=1.5) == {}  # a rank not measured yet is no median


def test_limits_from_the_environment_with_sane_defaults():
    assert Limits.from_env({}) == Limits(300.0, 20.0, 1.5)
    assert Limits.from_env({"HPC_LAUNCH_HANG_S": "15", "HPC_LAUNCH_STRAGGLER_FACTOR": "2"}) == Limits(15.0, 20.0, 2.0)
    assert Limits.from_env({"HPC_LAUNCH_HANG_S": "soon"}).floor_s == 300.0
