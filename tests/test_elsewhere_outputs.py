"""Scheduler outputs recorded by other projects and documentation (tests/golden/elsewhere, see its
README for each file's source), plus the forms we recorded on our testbed to cover them.
One case per recorded output. Hostfiles are also checked with DeepSpeed's own reader."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest

from hpc_launch import dialects
from hpc_launch import hostfile as hf
from hpc_launch import nodelist as nl
from hpc_launch.dialects.gridengine import GridEngine
from hpc_launch.dialects.slurm import Slurm
from hpc_launch.errors import HostfileError, SchedulerError
from hpc_launch.states import JobState
from hpc_launch.transport import CommandResult
from pbs_fixtures import Replay, load

HERE = Path(__file__).parent / "golden" / "elsewhere"
SLURM = dialects.get("slurm")
SGE = dialects.get("gridengine")


def read(name: str) -> str:
    return (HERE / name).read_text()


def result(name: str, rc: int = 0) -> CommandResult:
    err = HERE / name.replace(".txt", ".stderr.txt")
    return CommandResult(rc, read(name), err.read_text() if err.exists() else "")


@pytest.fixture(scope="module")
def ds_parse():
    import deepspeed.launcher.runner as runner  # installed by scripts/setup-dev.sh

    return lambda text: runner._parse_hostfile(text.splitlines(keepends=True))


# ---- sbatch answers: every real form gives the id, garbage never does ---------------------------


@pytest.mark.parametrize(
    "name, job_id",
    [
        ("slurm_faq_sbatch.txt", "65541"),
        ("dask_jobqueue_sbatch_prefixed.txt", "654321"),
        ("dask_jobqueue_sbatch_parsable_cluster.txt", "654321"),
        ("slurm_sbatch_c_multicluster.txt", "654321"),
        ("submitit_sbatch.txt", "5610208"),
    ],
)
def test_sbatch_answers(name, job_id):
    assert SLURM.parse_submit(read(name)) == job_id


@pytest.mark.parametrize(
    "garbage",
    [
        "sbatch: error: Batch job submission failed: Invalid account 12345\n",
        "Submitted batch job\n",
        "Submitted batch job 12345 on cluster\n",
        "Submitted batch job 12x\n",
        "12345 jobs in queue\n",
        "sbatch: Submitted batch job 12345 extra\n",
        "",
    ],
)
def test_sbatch_garbage_is_never_an_id(garbage):
    with pytest.raises(SchedulerError, match="could not find the job id"):
        SLURM.parse_submit(garbage)


# ---- sacct (Slurm accounting) -------------------------------------------------------------------


def test_submitit_sacct_steps_and_array_tasks_are_not_the_job():
    text = read("submitit_sacct.txt")
    info = Slurm.parse_accounting(text, "5610980")
    assert info.state == JobState.RUNNING and info.active  # the job's own row, not the `.0` step's "RUNING"
    assert Slurm.parse_accounting(text, "20956421") is None  # only tasks `_0`, `_[2-4%25]`: no verdict


def test_torchx_sacct_heterogeneous_components_are_not_the_job():
    assert Slurm.parse_accounting(read("torchx_sacct_het.txt"), "176") is None


def test_torchx_sacct_with_a_header_in_another_order():
    info = Slurm.parse_accounting(read("torchx_sacct_running.txt"), "54")
    assert info.state == JobState.RUNNING and info.exit_code == 0


@pytest.mark.parametrize(
    "name, job_id, state, code, comment",
    [
        ("testbed_slurm_sacct_done.txt", "82", JobState.DONE, 0, ""),
        ("testbed_slurm_sacct_failed.txt", "83", JobState.FAILED, 3, ""),
        ("testbed_slurm_sacct_cancelled_running.txt", "84", JobState.CANCELLED, 0, "cancelled by uid 0"),
        ("testbed_slurm_sacct_timeout.txt", "85", JobState.TIMEOUT, 0, ""),
        ("testbed_slurm_sacct_cancelled_held.txt", "86", JobState.CANCELLED, 0, "cancelled by uid 0"),
        ("testbed_slurm_sacct_killed.txt", "87", JobState.FAILED, 137, ""),  # ExitCode 0:9
    ],
)
def test_slurm_accounting_recorded(name, job_id, state, code, comment):
    run = Replay().add(Slurm.accounting_argv(job_id), result(name))
    info = SLURM.accounting(run, job_id)
    assert (info.state, info.exit_code, info.comment) == (state, code, comment)


def test_slurm_accounting_unknown_job_is_no_answer():
    run = Replay().add(Slurm.accounting_argv("999999"), result("testbed_slurm_sacct_unknown.txt"))
    assert SLURM.accounting(run, "999999") is None
    off = Replay().add(
        Slurm.accounting_argv("5"), CommandResult(1, "", "sacct: error: Slurm accounting storage is disabled\n")
    )
    assert SLURM.accounting(off, "5") is None


# ---- squeue: our form, the compact form, psij-python's -O form -----------------------------------

EXPECTED_SQUEUE = {
    "82": JobState.DONE,
    "83": JobState.FAILED,
    "84": JobState.RUNNING,
    "85": JobState.RUNNING,
    "86": JobState.QUEUED,
    "87": JobState.FAILED,
}


@pytest.mark.parametrize(
    "name", ["testbed_slurm_squeue_ours.txt", "testbed_slurm_squeue_compact.txt", "testbed_slurm_squeue_psij.txt"]
)
def test_squeue_forms(name):
    got = SLURM.parse_status(read(name), list(EXPECTED_SQUEUE))
    assert {j: i.state for j, i in got.items()} == EXPECTED_SQUEUE
    assert got["86"].comment == "JobHeldUser" and got["87"].comment == "JobLaunchFailure"
    assert got["84"].comment == "" and got["83"].comment == ""  # None / NonZeroExitCode say nothing new


def test_every_squeue_state_code_is_mapped_in_both_forms():
    rows = [line.split() for line in read("squeue_1_state_codes.txt").splitlines()]
    assert len(rows) == 24
    for short, long in rows:
        a = SLURM.parse_status(f"1|{long}|None\n", ["1"])["1"]
        b = SLURM.parse_status(f"1|{short}|None\n", ["1"])["1"]
        assert a.state != JobState.UNKNOWN and (a.state, a.comment) == (b.state, b.comment), (short, long)


# ---- scancel -v: a job that had already ended says so ---------------------------------------------


@pytest.mark.parametrize(
    "name, sent, already",
    [
        ("testbed_slurm_scancel_v_running.txt", True, False),
        ("testbed_slurm_scancel_v_held.txt", True, False),
        ("testbed_slurm_scancel_v_completed.txt", False, True),
        ("testbed_slurm_scancel_v_unknown.txt", False, True),
    ],
)
def test_scancel_outcomes(name, sent, already):
    r = result(name)
    outcome = SLURM.parse_cancel(r.rc, r.out, r.err)
    assert (outcome.sent, outcome.already_ended) == (sent, already)
    assert SLURM.cancel_argv("84") == ["scancel", "-v", "84"]


# ---- Slurm hostlists ------------------------------------------------------------------------------


def test_space_separated_hostlist_is_every_host(ds_parse):
    value = read("slurm_hostlist_spaces.txt").strip()
    slurm_says = read("testbed_scontrol_hostnames_spaces.txt").split()
    assert nl.expand_slurm_nodelist(value) == slurm_says == ["node1", "node2", "node3", "node4", "node5", "node12"]
    text = hf.build(env={"SLURM_JOB_NODELIST": value}, prefer="slurm", slots=4)
    assert ds_parse(text) == OrderedDict((h, 4) for h in slurm_says)
    assert ds_parse(hf.build(env={}, hosts=value, slots=4)) == OrderedDict((h, 4) for h in slurm_says)


@pytest.mark.parametrize("line", read("submitit_nodelists.tsv").splitlines())
def test_submitit_nodelists(line):
    nodelist, hosts = line.split("\t")
    assert nl.expand_slurm_nodelist(nodelist) == hosts.split()
    _, found = SLURM.nodes_from_env({"SLURM_JOB_NODELIST": nodelist})
    assert list(found) == hosts.split()


@pytest.mark.parametrize("nodelist", read("submitit_nodelists_invalid.txt").splitlines())
def test_submitit_invalid_nodelists_are_errors(nodelist):
    with pytest.raises(HostfileError):
        SLURM.nodes_from_env({"SLURM_JOB_NODELIST": nodelist})


# ---- DeepSpeed's own hostfiles as --nodefile ----------------------------------------------------


def test_deepspeed_hostfile_keeps_its_slots(ds_parse):
    path = str(HERE / "deepspeed_hostfile_good.txt")
    expected = OrderedDict([("worker-1", 2), ("worker-2", 2), ("localhost", 1), ("123.23.12.10", 2)])
    assert ds_parse(read("deepspeed_hostfile_good.txt")) == expected  # what DeepSpeed reads in it
    assert ds_parse(hf.build(env={}, nodefile=path)) == expected


@pytest.mark.parametrize(
    "name, words",
    [
        ("deepspeed_hostfile_bad_duplicate.txt", "worker-1 twice"),
        ("deepspeed_hostfile_bad_whitespace.txt", "cannot read line 2"),
        ("deepspeed_hostfile_bad_mixed.txt", "cannot read line 3"),
        ("deepspeed_hostfile_empty.txt", "empty"),
    ],
)
def test_hostfiles_deepspeed_refuses_are_errors(name, words, ds_parse):
    with pytest.raises(ValueError):
        ds_parse(read(name))
    with pytest.raises(HostfileError, match=words):
        hf.build(env={}, nodefile=str(HERE / name))


def test_a_bare_host_is_a_one_host_node_file(ds_parse):
    # DeepSpeed refuses `missingslots` as a hostfile line; as a node file (PBS's form) it is a host
    assert ds_parse(hf.build(env={}, nodefile=str(HERE / "deepspeed_hostfile_noslots.txt"))) == OrderedDict(
        [("missingslots", 1)]
    )


# ---- Grid Engine ------------------------------------------------------------------------------------

STATES_20_23 = {
    "20": ("r", JobState.RUNNING),
    "21": ("hqw", JobState.QUEUED),
    "22": ("Eqw", JobState.QUEUED),
    "23": ("s", JobState.QUEUED),
}


@pytest.mark.parametrize(
    "name",
    [
        "testbed_sge_qstat_states.txt",
        "testbed_sge_qstat_ext.txt",
        "testbed_sge_qstat_u_all_ext.txt",
        "testbed_sge_qstat_r.txt",
        "testbed_sge_qstat_f.txt",
        "testbed_sge_qstat_urg.txt",
        "testbed_sge_qstat_pri.txt",
        "testbed_sge_qstat_xml_states.txt",
        "testbed_sge_qstat_ext_xml.txt",
    ],
)
def test_grid_engine_qstat_forms(name):
    got = SGE.parse_status(read(name), list(STATES_20_23))
    assert {j: (i.raw, i.state) for j, i in got.items()} == STATES_20_23
    assert got["22"].never_runs and not got["21"].never_runs
    assert "held" in got["21"].comment and "suspended" in got["23"].comment


def test_reading_the_fifth_word_is_wrong_under_ext():
    # Parsl's grid_engine.py reads parts[4]: under -ext that is the user, not the state
    row = next(line for line in read("testbed_sge_qstat_ext.txt").splitlines() if line.split()[:1] == ["20"])
    assert row.split()[4] == "root"
    assert SGE.parse_status(read("testbed_sge_qstat_ext.txt"), ["20"])["20"].state == JobState.RUNNING


def test_abci_qstat_with_jclass_column():
    got = SGE.parse_status(read("abci_qstat.txt"), ["12345"])
    assert got["12345"].state == JobState.RUNNING and got["12345"].raw == "r"


def test_deleting_job_is_still_running():
    info = SGE.parse_status(read("testbed_sge_qstat_deleting.txt"), ["20"])["20"]
    assert info.raw == "dr" and info.state == JobState.RUNNING and info.active and "deleted" in info.comment


def test_error_state_reason_from_qstat_j():
    run = (
        Replay()
        .add(SGE.status_argv(["22"]), CommandResult(0, read("testbed_sge_qstat_xml_states.txt"), ""))
        .add(["qstat", "-j", "22"], CommandResult(0, read("testbed_sge_qstat_j_error.txt"), ""))
    )
    info = SGE.query(run, ["22"])["22"]
    assert info.never_runs and info.active
    assert info.comment == (
        "error state (Eqw): error: can't chdir to /nonexistent/dir: No such file or directory; "
        "it waits for you: fix that, then `qmod -cj 22` queues it again"
    )


def test_error_state_in_plain_qstat_says_it_needs_the_user():
    # a site whose qstat answers the plain table (real, job 22 `qsub -wd /nonexistent/dir`):
    # not just "queued", which waits forever, but the error, its reason and the user's fix
    run = (
        Replay()
        .add(SGE.status_argv(["22"]), CommandResult(0, read("testbed_sge_qstat_states.txt"), ""))
        .add(["qstat", "-j", "22"], CommandResult(0, read("testbed_sge_qstat_j_error.txt"), ""))
    )
    info = SGE.query(run, ["22", "21"])
    assert info["22"].never_runs and info["22"].raw == "Eqw"
    assert "can't chdir to /nonexistent/dir" in info["22"].comment and "`qmod -cj 22`" in info["22"].comment
    assert not info["21"].never_runs and "qmod" not in info["21"].comment  # hqw: held, not an error


@pytest.mark.parametrize("table", ["testbed_sge_qstat_eqw_output.txt", "testbed_sge_qstat_xml_eqw_output.txt"])
def test_error_state_from_an_unwritable_output_file(table):
    # recorded 2026-11-27: `qsub -o /nonexistent/out.log -j y e.sh` (job 4) went to Eqw
    assert SGE.parse_submit(read("testbed_sge_qsub_eqw_output.txt")) == "4"
    run = (
        Replay()
        .add(SGE.status_argv(["4"]), CommandResult(0, read(table), ""))
        .add(["qstat", "-j", "4"], CommandResult(0, read("testbed_sge_qstat_j_eqw_output.txt"), ""))
    )
    info = SGE.query(run, ["4"])["4"]
    assert (info.raw, info.state, info.never_runs, info.active) == ("Eqw", JobState.QUEUED, True, True)
    assert info.comment == (
        'error state (Eqw): error: can\'t open output file "/nonexistent/out.log": No such file or directory; '
        "it waits for you: fix that, then `qmod -cj 4` queues it again"
    )


@pytest.mark.parametrize("category, word", [line.split() for line in read("sge_status_5_states.txt").splitlines()])
def test_every_documented_grid_engine_state(category, word):
    info = SGE.parse_status(
        f"<job_info><job_list><JB_job_number>7</JB_job_number><state>{word}</state></job_list></job_info>", ["7"]
    )["7"]
    if category == "finished":
        assert info.ended and not info.active
        return
    expected = {
        "pending": JobState.QUEUED,
        "running": JobState.RUNNING,
        "suspended": JobState.QUEUED,
        "error": JobState.QUEUED,
    }
    if category == "deleting":  # as the same word without the d, and still active until gone
        assert info.state == SGE.parse_status(f"7 0 n u {word.replace('d', '')}\n", ["7"])["7"].state
    else:
        assert info.state == expected[category]
    assert info.active and info.never_runs == (category == "error")
    if category == "suspended" or word.replace("d", "") in ("s", "S", "T", "Rs", "RS", "RT"):
        assert "suspended" in info.comment
    if category == "error":  # the word as qstat printed it (Ehqw: also held), not always "Eqw"
        assert info.comment == f"error state ({word})"


def test_pe_hostfile_recorded(tmp_path, ds_parse):
    (tmp_path / "pe").write_text(read("testbed_sge_pe_hostfile.txt"))
    assert ds_parse(hf.build(env={"PE_HOSTFILE": str(tmp_path / "pe")}, prefer="gridengine")) == OrderedDict(
        [("vm", 2)]
    )
    # by content too, whatever names the file
    assert ds_parse(hf.build(env={}, nodefile=str(tmp_path / "pe"))) == OrderedDict([("vm", 2)])


@pytest.mark.parametrize(
    "name, rc, sent, already",
    [
        ("testbed_sge_qdel_running.txt", 0, True, False),
        ("testbed_sge_qdel_held.txt", 0, True, False),
        ("testbed_sge_qdel_error.txt", 0, True, False),
        ("testbed_sge_qdel_suspended.txt", 0, True, False),
        ("testbed_sge_qdel_finished.txt", 1, False, True),
        ("abci_qdel.txt", 0, True, False),
    ],
)
def test_qdel_outcomes(name, rc, sent, already):
    outcome = SGE.parse_cancel(rc, read(name), "")
    assert (outcome.sent, outcome.already_ended) == (sent, already)


@pytest.mark.parametrize(
    "name, state, code",
    [
        # qdel'd running and suspended jobs: failed 100 with SIGKILL and no deleted_by (8.1.9 has none)
        ("testbed_sge_qacct_deleted_running.txt", JobState.CANCELLED, 137),
        ("testbed_sge_qacct_deleted_suspended.txt", JobState.CANCELLED, 137),
        ("abci_qacct.txt", JobState.DONE, 0),
    ],
)
def test_qacct_records(name, state, code):
    run = Replay().add(GridEngine.accounting_argv("1"), CommandResult(0, read(name), ""))
    info = SGE.accounting(run, "1")
    assert (info.state, info.exit_code) == (state, code)
    if state == JobState.CANCELLED:
        assert "failed 100: assumedly after job" in info.comment


def test_qacct_of_a_job_that_never_ran_is_no_answer():
    run = Replay().add(GridEngine.accounting_argv("21"), result("testbed_sge_qacct_deleted_pending.txt", rc=1))
    assert SGE.accounting(run, "21") is None


def test_abci_qsub():
    assert SGE.parse_submit(read("abci_qsub.txt")) == "12345"


# ---- what the schedulers' own sources say they print (tests/golden/published) ------------------

PUBLISHED = Path(__file__).parent / "golden" / "published"


def published(name: str) -> list:
    return [line.split("\t") for line in (PUBLISHED / name).read_text().splitlines()]


@pytest.mark.parametrize("word, machine_states", published("cobalt_qstat_states.tsv"))
def test_published_cobalt_words(word, machine_states):
    info = dialects.get("cobalt").parse_status(f"JobID   State\n=====\n5   {word}\n", ["5"])["5"]
    if machine_states == "Terminal":  # over, without saying how: the exit-code file decides
        assert info.ended and not info.active
        return
    waiting = "Ready" in machine_states or "Hold" in machine_states or machine_states == "Preempted"
    assert info.state == (JobState.QUEUED if waiting else JobState.RUNNING) and info.active
    assert info.never_runs == (word == "dep_fail")


@pytest.mark.parametrize("exit_status, comment", published("openpbs_limit_kill_comments.tsv"))
def test_published_pbs_limit_kills(exit_status, comment):
    pbs = dialects.get("pbspro")
    expected = JobState.TIMEOUT if comment.endswith("walltime") else JobState.FAILED
    recorded = load("049").out  # the walltime kill, substate 93
    for code in (exit_status, "271"):  # the code PBS sets, and a SIGTERM exit beside the same comment
        text = recorded.replace("Exit_status = -29", f"Exit_status = {code}").replace(
            "exceeded \n\tresource walltime", comment.split(" and ", 1)[1].replace("exceeded ", "exceeded \n\t")
        )
        info = pbs.parse_status(text, ["85.pbshead"])["85.pbshead"]
        assert (info.state, info.active, info.comment) == (expected, False, comment)


@pytest.mark.parametrize("line", [words[0] for words in published("sge_qacct_failed_lines.txt")])
def test_published_grid_engine_failed_codes(line):
    # job 11's record (qdel'd while running: exit 137, no deleted_by), with each `failed` line
    killed = (Path(__file__).parent / "golden" / "sched" / "sge_qacct_killed.txt").read_text()
    text = killed.replace("failed       100 : assumedly after job", line)
    code, why = int(line.split()[1]), line.split(":", 1)[1].strip()
    info = GridEngine.parse_accounting(text)
    expected = {100: JobState.CANCELLED, 37: JobState.TIMEOUT}.get(code, JobState.FAILED)  # 37 with no h_vmem/h_cpu
    assert (info.state, info.active, info.exit_code) == (expected, False, 137)
    assert info.comment.startswith(f"Grid Engine: failed {code}: {why}")
