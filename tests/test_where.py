"""`where` (issue 19): when and where the same job would start on several clusters, asked BEFORE
submitting. Slurm's answers are the testbed's `sbatch --test-only` (tests/golden/sched/
slurm_sbatch_test_only_*, see its README); a fake `sbatch` on PATH replays them to the real CLI."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from hpc_launch import cli
from hpc_launch.dialects.base import WouldStart
from hpc_launch.dialects.slurm import Slurm
from hpc_launch.errors import SchedulerError
from hpc_launch.records import JobStore, default_path

SCHED = Path(__file__).parent / "golden" / "sched"
PROFILES = Path(__file__).parent / "e2e" / "profiles"
IDLE_AT = 1795663540  # 2026-11-26T03:25:40 UTC: the pods were free
BUSY_AT = 1795663664  # 2026-11-26T03:27:44 UTC: once the exclusive 3-node job's 2 minutes were up


def _answer(name: str):
    return (SCHED / f"{name}.txt").read_text(), (SCHED / f"{name}.stderr.txt").read_text()


# ---- Slurm: sbatch --test-only ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, at",
    [("slurm_sbatch_test_only_idle_epoch", IDLE_AT), ("slurm_sbatch_test_only_busy_epoch", BUSY_AT)],
)
def test_slurm_reads_when_and_where_the_job_would_start(name, at):
    said = Slurm().parse_test_submit(0, *_answer(name))
    assert (said.at, said.hosts, said.queue, said.error) == (at, "pod[1-2]", "debug", "")


def test_slurm_default_time_format_is_read_as_local_time(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the testbed's clock, where the files were recorded
    time.tzset()
    try:
        said = Slurm().parse_test_submit(0, *_answer("slurm_sbatch_test_only_busy"))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert said.at == BUSY_AT


def test_slurm_refusal_is_the_schedulers_reason_in_one_line():
    said = Slurm().parse_test_submit(1, *_answer("slurm_sbatch_test_only_too_many_nodes"))
    assert (said.at, said.error) == (None, "Node count specification invalid")


def test_slurm_answer_it_cannot_read_is_an_error_not_a_guess():
    with pytest.raises(SchedulerError, match="cannot read sbatch --test-only"):
        Slurm().parse_test_submit(0, "", "sbatch: something new\n")


def test_slurm_asks_in_epoch_seconds_with_the_jobs_submit_flags():
    argv = Slurm().test_submit_argv("/tmp/x.sh", submit_flags=["--account=a"])
    assert argv == ["env", "SLURM_TIME_FORMAT=%s", "sbatch", "--test-only", "--account=a", "/tmp/x.sh"]


# ---- the real CLI against a fake sbatch replaying the testbed's answers ----------------------


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch):
    """`sbatch` on PATH: logs its environment's time format and arguments, keeps a copy of the
    script it was given and the script's path, and replays the recording named in `answer`."""
    log, seen, answer = tmp_path / "calls", tmp_path / "seen.sh", tmp_path / "answer"
    answer.write_text("slurm_sbatch_test_only_busy_epoch 0")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURM_TIME_FORMAT $*" >> {log}\n'
        "for last; do :; done\n"
        f'cp "$last" {seen}; echo "$last" > {seen}.path\n'
        f"read -r name rc < {answer}\n"
        f'cat {SCHED}/"$name".txt; cat {SCHED}/"$name".stderr.txt >&2 2>/dev/null\n'
        'exit "$rc"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(PROFILES))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return log, seen, answer, work


def _cli(capsys, *argv, code=0):
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    assert exit_.value.code == code, err
    return out


def test_where_asks_slurm_and_says_pbs_has_no_estimate(fake_sbatch, capsys, monkeypatch):
    log, seen, _, work = fake_sbatch
    monkeypatch.setattr(time, "time", lambda: BUSY_AT - 2 * 3600 - 600)
    out = _cli(capsys, "where", "-c", "tb-slurm", "-c", "abci", "-n", "2", "-P", "gxx")
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0].split()[:2] == ["tb-slurm", "debug"]
    assert lines[0].endswith("starts in 2h10m on pod[1-2]"), lines[0]
    assert lines[1].split()[:2] == ["abci", "rt_HF"]
    assert "max 128 nodes" in lines[1] and lines[1].endswith("no estimate without submitting (PBS Professional)")

    [asked] = log.read_text().splitlines()  # abci was not asked: PBS has no test command
    assert asked.startswith("%s --test-only ") and "--parsable" not in asked
    assert "#SBATCH --nodes=2" in seen.read_text()  # the very script submit would send
    assert not Path(Path(str(seen) + ".path").read_text().strip()).exists()  # its temporary file is gone
    assert list(work.iterdir()) == []  # nothing written where the job would run
    assert not default_path().exists() or JobStore().list() == []  # nothing recorded


def test_where_shows_each_clusters_refusal_and_goes_on(fake_sbatch, capsys):
    _, _, answer, _ = fake_sbatch
    answer.write_text("slurm_sbatch_test_only_too_many_nodes 1")
    got = json.loads(_cli(capsys, "where", "-c", "tb-slurm,polaris", "-t", "2h", "--json", code=2))
    assert [a["cluster"] for a in got] == ["tb-slurm", "polaris"]
    assert got[0]["refused"].startswith("sbatch --test-only: Node count specification invalid")
    assert "--walltime 02:00:00 is above" in got[1]["refused"] and "use --walltime" in got[1]["refused"]


def test_where_with_one_cluster_that_takes_it_exits_zero(fake_sbatch, capsys):
    got = json.loads(_cli(capsys, "where", "-c", "tb-slurm,local", "-n", "2", "--json"))
    assert got[0]["estimated_start"] == BUSY_AT and got[0]["hosts"] == "pod[1-2]"
    assert got[1]["refused"].startswith("local runs on this machine only")


def test_where_says_which_cluster_could_not_be_asked(fake_sbatch, capsys):
    _, _, answer, _ = fake_sbatch
    answer.write_text("slurm_sbatch_parsable 0")  # an answer that is not --test-only's
    out = _cli(capsys, "where", "-c", "tb-slurm", code=3)
    assert out.startswith("tb-slurm  could not ask: cannot read sbatch --test-only's answer"), out


# ---- submit validates first (sbatch --test-only on the written script), then submits once -----


@pytest.fixture
def fake_slurm_submit(tmp_path, monkeypatch):
    """`sbatch` on PATH: `--test-only` replays the recording named in `answer`; a real submit
    prints a --parsable id. Every call is logged, so the test can count the submissions."""
    log, answer = tmp_path / "calls", tmp_path / "answer"
    answer.write_text("slurm_sbatch_test_only_idle_epoch 0")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case " $* " in *" --test-only "*) ;; *) echo 4242; exit 0 ;; esac\n'
        f"read -r name rc < {answer}\n"
        f'cat {SCHED}/"$name".txt; cat {SCHED}/"$name".stderr.txt >&2 2>/dev/null\n'
        'exit "$rc"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(PROFILES))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return log, answer, work


@pytest.mark.parametrize(
    "name, said",
    [
        ("slurm_sbatch_test_only_bad_partition", "Invalid partition name specified"),
        ("slurm_sbatch_test_only_time_limit", "Requested time limit is invalid (missing or exceeds some limit)"),
        ("slurm_sbatch_test_only_too_many_nodes", "Node count specification invalid"),
    ],
)
def test_submit_refused_by_the_check_queues_nothing_and_says_the_schedulers_reason(
    fake_slurm_submit, capsys, name, said
):
    log, answer, work = fake_slurm_submit
    answer.write_text(f"{name} 1")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "-c", "tb-slurm", "-n", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 3 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"hpc-launch: error: sbatch --test-only refused the job, so nothing was submitted: {said}")
    assert "hpc-launch clusters show tb-slurm" in line and "HPC_LAUNCH_SUBMIT_CHECK=0" in line
    [asked] = log.read_text().splitlines()  # the check only: no submit command ran
    assert asked.startswith("--test-only ") and asked.endswith(".sh")
    assert [p for p in work.rglob("*") if p.is_file()] == []  # the script and capsule are gone again
    assert not default_path().exists() or JobStore().list() == []


def test_submit_that_passes_the_check_is_submitted_once(fake_slurm_submit, capsys):
    log, _, work = fake_slurm_submit
    out = _cli(capsys, "submit", "-c", "tb-slurm", "-n", "2")
    assert out.strip() == "4242"
    checked, submitted = log.read_text().splitlines()
    assert checked.startswith("--test-only ") and submitted.startswith("--parsable ")
    assert checked.split()[-1] == submitted.split()[-1]  # the same script, as the submit names it
    assert [r.job_id for r in JobStore().list()] == ["4242"]


def test_submit_check_can_be_turned_off(fake_slurm_submit, capsys, monkeypatch):
    log, answer, _ = fake_slurm_submit
    answer.write_text("slurm_sbatch_test_only_bad_partition 1")  # would refuse: it is not asked
    monkeypatch.setenv("HPC_LAUNCH_SUBMIT_CHECK", "0")
    assert _cli(capsys, "submit", "-c", "tb-slurm").strip() == "4242"
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["--parsable"]


def test_submit_no_check_submits_without_asking(fake_slurm_submit, capsys):
    log, answer, _ = fake_slurm_submit
    answer.write_text("slurm_sbatch_test_only_bad_partition 1")  # would refuse: it is not asked
    assert _cli(capsys, "submit", "-c", "tb-slurm", "--no-check").strip() == "4242"
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["--parsable"]


def test_an_answer_the_check_cannot_read_is_said_and_the_submit_goes_on(fake_slurm_submit, capsys):
    log, answer, _ = fake_slurm_submit
    answer.write_text("slurm_sbatch_parsable 0")  # not --test-only's answer
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "-c", "tb-slurm"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0 and out.strip() == "4242"
    assert "note: submitting unchecked: cannot read sbatch --test-only's answer" in err
    assert len(log.read_text().splitlines()) == 2


# ---- Grid Engine: qsub -w v (verify without submitting; no start time) ------------------------


def test_grid_engine_verifies_without_submitting_and_gives_no_time():
    from hpc_launch.dialects.gridengine import GridEngine

    ge = GridEngine()
    assert ge.test_submit_argv("x.sh", submit_flags=["-N", "a"]) == ["qsub", "-w", "v", "-N", "a", "x.sh"]
    assert ge.parse_test_submit(0, *_answer_or_empty("sge_qsub_verify_ok")) == WouldStart()
    said = ge.parse_test_submit(1, *_answer_or_empty("sge_qsub_verify_too_many_slots"))
    assert said.error == 'Job 147 cannot run in PE "smp" because it only offers 0 slots'
    said = ge.parse_test_submit(1, *_answer_or_empty("sge_qsub_verify_unknown_queue"))
    assert said.error == 'Job was rejected because job requests unknown queue "nope.q"'
    with pytest.raises(SchedulerError, match="cannot read qsub -w v's answer"):
        ge.parse_test_submit(0, 'Your job 5 ("x") has been submitted\n', "")


def _answer_or_empty(name: str):
    err = SCHED / f"{name}.stderr.txt"
    return (SCHED / f"{name}.txt").read_text(), err.read_text() if err.exists() else ""


def test_a_check_that_cannot_run_is_said_and_the_submit_speaks_for_itself(tmp_path, monkeypatch, capsys):
    """No sbatch on PATH (a login node without Slurm): the check says it could not run, and the
    submit command's own failure is the error, not a "refusal" by a scheduler never asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "mktemp", "mkdir", "cat", "rm", "env", "find", "rmdir", "dirname", "cp", "chmod"):
        found = next((Path(d) / tool for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / tool).exists()), None)
        if found:
            (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(PROFILES))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "-c", "tb-slurm"])
    _, err = capsys.readouterr()
    assert exit_.value.code == 3
    assert "note: submitting unchecked: cannot run sbatch --test-only on localhost" in err
    assert "refused the job, so nothing was submitted" not in err
