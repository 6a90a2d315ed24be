"""The dialect contract (hpc_launch/dialects/base.py, `Dialect`): what the job's life relies on,
checked for every registered dialect and for a new one written as an outside contributor would."""

from __future__ import annotations

import re
from typing import List

import pytest

from hpc_launch import dialects, doctor, profiles
from hpc_launch.dialects.base import Dialect, last_matching_line
from hpc_launch.jobs import run_submit
from hpc_launch.prepare import prepare
from hpc_launch.spec import JobSpec
from hpc_launch.transport import LocalTransport

SCHEDULERS = [d for d in dialects.all_dialects() if d.has_scheduler]


class StdinScheduler(Dialect):
    """An LSF-shaped dialect: `bsub < script`, `-W` is a run limit and not keyed by a resource."""

    name = "lsf-like"
    submit_program = "sh"
    script_on_stdin = True

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^Job <(\d+)> is submitted", "bsub").group(1)

    def depend_flags(self, job_id: str) -> List[str]:
        return ["-w", f"ended({job_id})"]


def test_a_script_on_stdin_reaches_the_scheduler_on_stdin_and_not_in_argv(tmp_path):
    lsf = StdinScheduler()
    argv = lsf.submit_argv(
        ".hpc-launch/train-1.sh", submit_flags=["-c", "cat > got.sh; echo 'Job <7> is submitted to queue <normal>.'"]
    )
    assert ".hpc-launch/train-1.sh" not in argv
    job_id = run_submit(LocalTransport(), argv, str(tmp_path), lsf, script_text="#!/bin/bash\necho hi\n")
    assert job_id == "7"
    assert (tmp_path / "got.sh").read_text() == "#!/bin/bash\necho hi\n"


def test_a_dialect_that_takes_the_script_as_an_argument_gets_no_stdin(tmp_path):
    slurm = dialects.get("slurm")
    assert not slurm.script_on_stdin
    # `read` fails at once on an empty stdin: nothing was fed
    argv = ["sh", "-c", "if read line; then echo fed; else echo 5; fi"]
    assert run_submit(LocalTransport(), argv, str(tmp_path), slurm, script_text="#!/bin/bash\n") == "5"


@pytest.mark.parametrize("dialect", SCHEDULERS, ids=lambda d: d.name)
def test_a_held_submission_names_its_predecessor_and_keeps_the_script_last(dialect):
    argv = dialect.submit_argv(".hpc-launch/x.sh", submit_flags=["-N", "x"], depend_on="123.server")
    plain = dialect.submit_argv(".hpc-launch/x.sh", submit_flags=["-N", "x"])
    held = dialect.depend_flags("123.server")
    assert argv[-1] == ".hpc-launch/x.sh" and plain[-1] == ".hpc-launch/x.sh"
    assert any("123.server" in word for word in held)
    assert [w for w in argv if w not in held] == plain


@pytest.mark.parametrize("cluster", ["abci", "abci2", "slurm", "thetagpu"])
def test_each_chain_link_is_built_by_the_dialect_not_by_word_positions(cluster):
    prepared = prepare(
        JobSpec(cluster=cluster, nodes=1, group="g", chain=3, workdir="/w", venv="/v", login="local"), cwd="/w"
    )
    script = prepared.script
    link = script.link(3)
    assert link.script_name == script.script_name.replace(".sh", "-link3.sh")
    assert script.script_name not in link.text.replace(link.script_name, "")
    held = link.held_submit_argv("41")
    dialect = dialects.get(profiles.load(cluster).dialect)
    assert held[-1] == link.script_relpath
    assert all(flag in held for flag in dialect.depend_flags("41"))
    assert "# then link 3: " in prepared.submit_display()


def test_a_directive_key_is_the_dialects_own_rule():
    pbs, lsf = dialects.get("pbspro"), StdinScheduler()
    # PBS: `-W depend=` and `-W group_list=` are different directives; `-l walltime` replaces `-l walltime`
    assert pbs.directive_key("-W group_list=g") != pbs.directive_key("-W depend=afterany:1")
    assert pbs.merge_directives(["-l walltime=1:00:00", "-l select=1"], ["-l walltime=2:00:00"]) == [
        "-l walltime=2:00:00",
        "-l select=1",
    ]
    # an LSF run limit `-W 10:00` is one key, whatever its value: the user's replaces the default
    assert lsf.merge_directives(["-W 10:00", "-n 4"], ["-W 20:00"]) == ["-W 20:00", "-n 4"]


def test_slurm_keys_a_long_option_by_the_prefix_sbatch_reads_it_by():
    slurm = dialects.get("slurm")
    assert slurm.directive_key("--parti=big") == "--partition" and slurm.directive_keys("--ti=1") == ["--ti"]
    assert slurm.directive_key("--nod=1") == "--nod"  # ambiguous: sbatch refuses it itself
    assert slurm.directive_key("--time-m=5") == "--time-min" and slurm.directive_key("--time=5") == "--time"
    assert slurm.merge_directives(["--partition=batch", "--nodes=2"], ["--parti=debug"]) == [
        "--parti=debug",
        "--nodes=2",
    ]


def test_doctor_reads_each_schedulers_failure_wording_from_its_dialect():
    keys = {c.key for c in doctor.CAUSES}
    for d in dialects.all_dialects():
        for key, patterns in d.failure_wording.items():
            assert key in keys, f"{d.name}: {key} is no doctor cause"
            cause = next(c for c in doctor.CAUSES if c.key == key)
            for pattern in patterns:
                re.compile(pattern)
                assert pattern in cause.patterns
    assert doctor.diagnose("=>> PBS: job killed: walltime 65 exceeded limit 60\n").top.cause.key == "walltime"
    assert (
        doctor.diagnose(
            "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
        ).top.cause.key
        == "walltime"
    )


@pytest.mark.parametrize("dialect", dialects.all_dialects(), ids=lambda d: d.name)
def test_each_dialect_says_whether_it_can_validate_a_job_without_queueing_it(dialect):
    """`where` and `submit`'s check (hpc_launch/jobs/where.py) use the test command where there is
    one; a dialect without one says so by returning None, and names none in messages."""
    argv = dialect.test_submit_argv("/tmp/x.sh", submit_flags=["-N", "x"])
    if argv is None:
        assert dialect.test_submit_name == ""
        return
    assert dialect.has_scheduler and dialect.test_submit_name.split()[0] == dialect.submit_program
    assert argv[-1] == "/tmp/x.sh" and argv[-3:-1] == ["-N", "x"]  # the job's own flags, the script last


def test_the_schedulers_that_validate_before_queueing_are_slurm_and_grid_engine():
    able = sorted(d.name for d in dialects.all_dialects() if d.test_submit_argv("x.sh") is not None)
    assert able == ["gridengine", "slurm"]  # PBS Professional's and Cobalt's qsub have no such mode
