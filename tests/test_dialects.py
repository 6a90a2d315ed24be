"""Every dialect's build-command / parse-output pair, against REAL scheduler output recorded on
the testbed (tests/golden/sched, see its README) and, for Cobalt, outputs reconstructed from
ALCF's documentation (tests/golden/cobalt/README.md). Outputs recorded by other projects are in
tests/test_elsewhere_outputs.py. The `scheduler` tests at the end ask the testbed itself."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from hpc_launch import dialects
from hpc_launch.dialects.gridengine import GridEngine
from hpc_launch.errors import SchedulerError
from hpc_launch.states import JobState
from hpc_launch.transport import CommandResult
from pbs_fixtures import Replay

SCHED = Path(__file__).parent / "golden" / "sched"
COBALT = Path(__file__).parent / "golden" / "cobalt"


def read(name: str) -> str:
    return (SCHED / name).read_text()


def first_id(text: str, pattern: str) -> str:
    return re.search(pattern, text, re.M).group(1)


# ---- submit output -------------------------------------------------------------------------


def test_parse_submit_outputs():
    assert (
        dialects.get("slurm").parse_submit(read("slurm_sbatch_parsable.txt"))
        == read("slurm_sbatch_parsable.txt").strip().split(";")[0]
    )
    plain = read("slurm_sbatch.txt")
    assert dialects.get("slurm").parse_submit(plain) == first_id(plain, r"Submitted batch job (\d+)")
    assert dialects.get("pbspro").parse_submit(read("pbswrap_qsub.txt")) == read("pbswrap_qsub.txt").strip()
    sge = read("sge_qsub.txt")
    assert dialects.get("gridengine").parse_submit(sge) == first_id(sge, r"Your job (\d+)")
    assert dialects.get("gridengine").parse_submit(read("sge_qsub_terse.txt")) == read("sge_qsub_terse.txt").strip()
    assert dialects.get("cobalt").parse_submit((COBALT / "qsub.txt").read_text()) == "266815"
    assert dialects.get("cobalt").parse_submit((COBALT / "qsub_with_warning.txt").read_text()) == "266815"


@pytest.mark.parametrize(
    "out,expected",
    [
        ("1234.pbs1\n", "1234.pbs1"),  # ABCI 3.0 (docs)
        ("2421495.opbs\n", "2421495.opbs"),  # Miyabi (user scripts)
        ("349710.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov\n", "349710.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"),
    ],
)
def test_real_pbs_pro_job_ids_from_site_docs(out, expected):
    d = dialects.get("pbspro")
    assert d.parse_submit(out) == expected
    assert d.job_num(expected) == expected.split(".")[0]


def test_grid_engine_array_and_abci_outputs():
    d = dialects.get("gridengine")
    assert d.parse_submit('Your job 12345 ("run.sh") has been submitted\n') == "12345"  # ABCI 2.0 docs
    assert d.parse_submit('Your job-array 42.1-10:1 ("arr") has been submitted\n') == "42"


def test_unparseable_submit_output_is_a_one_line_error():
    with pytest.raises(SchedulerError) as err:
        dialects.get("slurm").parse_submit("sbatch: error: something odd\nmore\n")
    assert "\n" not in str(err.value) and "hpc-launch list" in str(err.value)


def test_transient_errors_are_recognised_but_refusals_are_not():
    d = dialects.get("slurm")
    assert d.is_transient("sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")
    assert d.is_transient("qsub: cannot connect to server pbs1 (errno=15010)")
    assert not d.is_transient(read("slurm_sbatch_error_too_many_nodes.stderr.txt"))


# ---- status output ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,state",
    [
        ("slurm_squeue_running.txt", JobState.RUNNING),
        ("slurm_squeue_pending.txt", JobState.QUEUED),
        ("slurm_squeue_completed.txt", JobState.DONE),
        ("slurm_squeue_failed.txt", JobState.FAILED),
        ("slurm_squeue_cancelled.txt", JobState.CANCELLED),
    ],
)
def test_slurm_squeue_states(name, state):
    text = read(name)
    job = text.split("|", 1)[0].strip()
    info = dialects.get("slurm").parse_status(text, [job])[job]
    assert info.state == state


def test_slurm_one_query_for_many_jobs():
    text = read("slurm_squeue_fmt_all.txt")
    rows = [l.split("|") for l in text.splitlines()]
    # our own format has 3 fields; rebuild those rows from the wide recording
    ours = "\n".join(f"{r[0]}|{r[2]}|{r[3]}" for r in rows)
    ids = [r[0] for r in rows]
    got = dialects.get("slurm").parse_status(ours, ids)
    assert set(got) == set(ids)
    words = {r[0]: r[2] for r in rows}
    for job, info in got.items():
        assert info.raw == words[job]
    argv = dialects.get("slurm").status_argv(ids)
    assert argv[0] == "squeue" and argv.count("squeue") == 1 and ("--jobs=" + ",".join(ids)) in argv


def test_slurm_unknown_job_means_gone_not_error():
    assert dialects.get("slurm").parse_status(read("slurm_squeue_unknown.txt"), ["999999"]) == {}


@pytest.mark.parametrize(
    "name,active,state",
    [
        ("pbswrap_qstat_f_running.txt", True, JobState.RUNNING),
        ("pbswrap_qstat_f_queued.txt", True, None),
        ("pbswrap_qstat_f_finished.txt", False, None),
        ("pbswrap_qstat_f_deleted.txt", False, None),
    ],
)
def test_pbs_wrapper_qstat_f(name, active, state):
    text = read(name)
    job = first_id(text, r"^Job Id:\s*(\S+)")
    info = dialects.get("pbspro").parse_status(text, [job])[job]
    assert info.active is active
    if state:
        assert info.state == state


def test_pbs_pro_finished_job_with_exit_status():
    # real PBS Pro `qstat -f -x` (history) shape, from the OpenPBS qstat(1B) attribute names
    text = (
        "Job Id: 1234.pbs1\n    Job_Name = train\n    job_state = F\n    Exit_status = 0\n\n"
        "Job Id: 1235.pbs1\n    job_state = F\n    Exit_status = -29\n\nJob "
        "Id: 1236.pbs1\n    job_state = F\n    Exit_status = 271\n    substate = 91\n\n"
        "Job Id: 1237.pbs1\n    job_state = F\n    Exit_status = 271\n    substate = 93\n"
    )
    got = dialects.get("pbspro").parse_status(text, ["1234.pbs1", "1235.pbs1", "1236.pbs1", "1237.pbs1"])
    assert got["1234.pbs1"].state == JobState.DONE
    assert got["1235.pbs1"].state == JobState.TIMEOUT
    assert got["1236.pbs1"].state == JobState.CANCELLED  # 91: a delete request ended it
    assert got["1237.pbs1"].state == JobState.FAILED  # SIGTERM from someone else
    assert got["1237.pbs1"].comment == "killed by SIGTERM, not by qdel"


def test_torque_signal_exit_leaves_it_to_the_exit_code_file():
    # Torque's `C` has no substate: 271 is a qdel or MoM's walltime SIGTERM alike, so the job is
    # over but how is for the exit-code file and MoM's kill line in the log (jobs/state.py)
    text = "Job Id: 7.torque\n\tjob_state = C\n\texit_status = 271\n"
    info = dialects.get("pbspro").parse_status(text, ["7.torque"])["7.torque"]
    assert (info.state, info.ended, info.active, info.exit_code) == (JobState.UNKNOWN, True, False, 271)


def test_pbs_query_falls_back_for_torque_wrappers():
    # Slurm's qstat wrapper (the testbed) rejects -x (rc 2, "Unknown option: x"): query() asks
    # again without it. Real PBS Pro with history off is in tests/test_pbspro_observed.py.
    d = dialects.get("pbspro")
    refused = CommandResult(2, read("pbswrap_qstat_x_unsupported.txt"), read("pbswrap_qstat_x_unsupported.stderr.txt"))
    run = (
        Replay()
        .add(["qstat", "-f", "-x", "19", "21"], refused)
        .add(
            ["qstat", "-f", "19", "21"],
            CommandResult(0, read("pbswrap_qstat_f_running.txt") + read("pbswrap_qstat_f_finished.txt"), ""),
        )
    )
    got = d.query(run, ["19", "21"])
    assert [c[:3] for c in run.calls] == [["qstat", "-f", "-x"], ["qstat", "-f", "19"]]
    assert got["19"].state == JobState.RUNNING and got["19"].active
    assert got["21"].ended and not got["21"].active  # `C` without an exit status: the exit-code file decides
    # a job the wrapper has forgotten: rc 153 and nothing said, which only means "gone"
    gone = (
        Replay()
        .add(["qstat", "-f", "-x", "999999"], refused)
        .add(["qstat", "-f", "999999"], CommandResult(153, read("pbswrap_qstat_unknown.txt"), ""))
    )
    assert d.query(gone, ["999999"]) == {}


def test_grid_engine_qstat_table():
    text = read("sge_qstat.txt")
    rows = {l.split()[0]: l.split()[4] for l in text.splitlines()[2:] if l.strip()}
    got = dialects.get("gridengine").parse_status(text, list(rows))
    for job, word in rows.items():
        expected = JobState.RUNNING if word == "r" else JobState.QUEUED if word.endswith("qw") else None
        if expected:
            assert got[job].state == expected, (job, word)


@pytest.mark.parametrize(
    "name,state,comment",
    [
        ("sge_qacct_done.txt", JobState.DONE, ""),
        ("sge_qacct_failed.txt", JobState.FAILED, ""),
        # job 11 was qdel'd while running: failed 100 with SIGKILL, and no deleted_by line in 8.1.9;
        # Grid Engine's own limit kills are failed 37 (the h_rt kill below)
        (
            "sge_qacct_killed.txt",
            JobState.CANCELLED,
            "Grid Engine: failed 100: assumedly after job (SIGKILL: a qdel, or a kill -9 from outside)",
        ),
        (
            "sge_qacct_timeout.txt",
            JobState.TIMEOUT,
            "Grid Engine: failed 37: qmaster enforced h_rt, h_cpu, or h_vmem limit",
        ),
    ],
)
def test_grid_engine_accounting(name, state, comment):
    path = SCHED / name
    if not path.exists():
        pytest.fail(f"{name} missing: re-record with testbed/record-golden.sh")
    run = Replay().add(["qacct", "-j", "9"], CommandResult(0, path.read_text(), ""))
    info = dialects.get("gridengine").accounting(run, "9")
    assert (info.state, info.comment) == (state, comment)
    assert not info.active


def test_grid_engine_accounting_without_a_record():
    run = Replay().add(
        ["qacct", "-j", "999999"], CommandResult(1, read("sge_qacct_unknown.txt"), read("sge_qacct_unknown.stderr.txt"))
    )
    assert dialects.get("gridengine").accounting(run, "999999") is None


@pytest.mark.parametrize(
    "category, wallclock, state",
    [
        ("-l h_rt=5", "6s", JobState.TIMEOUT),
        ("-l h_vmem=1G", "3s", JobState.FAILED),  # 37 is also the h_vmem/h_cpu kill: not a timeout
        ("-l h_rt=600,h_vmem=1G", "12", JobState.FAILED),  # well within h_rt: the memory limit
        ("-l h_rt=0:10:00,h_vmem=1G", "600.2", JobState.TIMEOUT),
    ],
)
def test_grid_engine_limit_kill_is_timeout_only_for_h_rt(category, wallclock, state):
    text = (
        read("sge_qacct_timeout.txt")
        .replace("category     -l h_rt=5", f"category     {category}")
        .replace("ru_wallclock 6s", f"ru_wallclock {wallclock}")
    )
    assert GridEngine.parse_accounting(text).state == state


@pytest.mark.parametrize(
    "deleted_by, exit_status, state, why",
    [
        (None, "137                  (Killed)", JobState.CANCELLED, "SIGKILL: a qdel"),  # SGE 8.1.9
        ("NONE", "137                  (Killed)", JobState.FAILED, "deleted_by NONE: not a qdel"),  # Univa
        (None, "143                  (Terminated)", JobState.FAILED, "not qdel's SIGKILL"),
    ],
)
def test_grid_engine_signal_kill_is_a_cancel_only_for_qdels_signal(deleted_by, exit_status, state, why):
    text = read("sge_qacct_killed.txt").replace("137                  (Killed)", exit_status)
    if deleted_by:
        text = text.replace("exit_status", f"deleted_by   {deleted_by}\nexit_status")
    info = GridEngine.parse_accounting(text)
    assert info.state == state and why in info.comment


def test_grid_engine_exiting_letter_is_still_running():
    # `x` (EXITING_SYM, source/common/symbols.h) is the one letter job_get_state_string writes
    # that sge_status(5) does not list: the job is ending, not gone
    info = dialects.get("gridengine").parse_status("job-ID prior name user state\n--\n 5 0 n u rx\n", ["5"])["5"]
    assert info.state == JobState.RUNNING and info.active


def test_grid_engine_deleted_by_is_a_cancel():
    # Univa/Altair qacct has `deleted_by` (ABCI 2.0's docs show it): a qdel is then certain
    text = read("sge_qacct_killed.txt").replace("exit_status", "deleted_by   alice\nexit_status")
    info = GridEngine.parse_accounting(text)
    assert info.state == JobState.CANCELLED and info.comment == "deleted by alice"


def test_grid_engine_status_is_one_xml_query():
    d = dialects.get("gridengine")
    assert d.status_argv(["11", "12"]) == ["qstat", "-xml"]
    got = d.parse_status(read("sge_qstat_xml.txt"), ["11", "12", "13", "99"])
    assert {j: i.state for j, i in got.items()} == {
        "11": JobState.RUNNING,
        "12": JobState.QUEUED,
        "13": JobState.QUEUED,
    }
    # the table it replaces says the same
    assert {j: i.state for j, i in d.parse_status(read("sge_qstat.txt"), ["11", "12", "13"]).items()} == {
        j: i.state for j, i in got.items()
    }
    assert d.parse_status(read("sge_qstat_empty.txt"), ["11"]) == {}


def test_grid_engine_array_tasks_are_one_job():
    table = (
        "job-ID  prior   name       user         state submit/start "
        "at     queue                          slots ja-task-ID\n"
        "-----------------------------------------------------------------------------------------------------------------\n"
        "     42 0.50000 arr        root         r     11/23/2026 00:43:31 all.q@vm                           1 1\n"
        "     42 0.00000 arr        root         qw    11/23/2026 00:43:30                                    1 2-4:1\n"
    )
    info = dialects.get("gridengine").parse_status(table, ["42"])["42"]
    assert info.state == JobState.RUNNING


@pytest.mark.parametrize(
    "dialect, out",
    [
        ("slurm", "5|WEIRD_NEW_STATE|None\n"),
        ("gridengine", "<job_info><job_list><JB_job_number>5</JB_job_number><state>X</state></job_list></job_info>"),
        (
            "gridengine",
            "job-ID  prior   name       user         state submit/start "
            "at\n------\n      5 0.5 n u Xq 11/23/2026 00:43:31\n",
        ),
        ("cobalt", "JobID   State\n=====\n5   teleporting\n"),
    ],
)
def test_an_unknown_word_never_ends_an_active_job(dialect, out):
    info = dialects.get(dialect).parse_status(out, ["5"])["5"]
    assert info.state == JobState.UNKNOWN and info.active and not info.ended


def test_slurm_reason_is_the_comment():
    d = dialects.get("slurm")
    assert d.parse_status(read("slurm_squeue_pending.txt"), ["17"])["17"].comment == "Resources"
    assert d.parse_status(read("slurm_squeue_running.txt"), ["16"])["16"].comment == ""
    held = d.parse_status("7|PENDING|ReqNodeNotAvail, UnavailableNodes:pod3\n", ["7"])["7"]
    assert held.comment == "ReqNodeNotAvail, UnavailableNodes:pod3" and not held.never_runs


@pytest.mark.parametrize(
    "reason, never",
    [
        ("DependencyNeverSatisfied", True),
        ("QOSMaxWallDurationPerJobLimit", True),
        ("AssocMaxNodesPerJobLimit", True),
        ("QOSMaxJobsPerUserLimit", False),  # a count of running jobs: it starts once others end
        ("Priority", False),
        ("Dependency", False),
    ],
)
def test_slurm_reasons_that_never_start(reason, never):
    info = dialects.get("slurm").parse_status(f"7|PENDING|{reason}\n", ["7"])["7"]
    assert info.never_runs is never and info.active and reason in info.comment


@pytest.mark.parametrize(
    "word, state",
    [
        ("OUT_OF_MEMORY", JobState.FAILED),
        ("OOM", JobState.FAILED),
        ("PREEMPTED", JobState.QUEUED),
        ("SPECIAL_EXIT", JobState.QUEUED),
        ("REVOKED", JobState.QUEUED),
        ("DEADLINE", JobState.TIMEOUT),
        ("CANCELLED+", JobState.CANCELLED),
        ("CANCELLED by 1001", JobState.CANCELLED),
    ],
)
def test_slurm_words_that_need_a_second_look(word, state):
    info = dialects.get("slurm").parse_status(f"7|{word}|None\n", ["7"])["7"]
    assert info.state == state
    if word in ("OUT_OF_MEMORY", "OOM"):
        assert info.comment == "out of memory (Slurm: OUT_OF_MEMORY)"  # the job's life tells OOM from a cancel with it


def test_slurm_accounting_reads_our_sacct_line():
    from hpc_launch.dialects.slurm import Slurm

    run = Replay().add(Slurm.accounting_argv("15"), CommandResult(0, "15|FAILED|3:0\n", ""))
    info = dialects.get("slurm").accounting(run, "15")
    assert (info.state, info.exit_code) == (JobState.FAILED, 3)


def test_cobalt_qstat():
    got = dialects.get("cobalt").parse_status((COBALT / "qstat.txt").read_text(), ["266815", "266816", "266817", "1"])
    assert got["266815"].state == JobState.RUNNING
    assert got["266816"].state == JobState.QUEUED
    assert got["266817"].state == JobState.QUEUED
    assert "1" not in got
    argv = dialects.get("cobalt").status_argv(["266815"])
    assert argv[:3] == ["env", "QSTAT_HEADER=JobID:State", "qstat"]


def test_cobalt_long_form_and_dep_fail():
    # `qstat -l` prints `JobID: N` / `State: word` lines (what psij-python's Cobalt executor reads)
    out = "JobID: 266815\n    State    : running\nJobID: 266816\n    State    : dep_fail\n"
    got = dialects.get("cobalt").parse_status(out, ["266815", "266816"])
    assert got["266815"].state == JobState.RUNNING
    assert got["266816"].never_runs and got["266816"].active  # stays queued until deleted
    assert (
        "user_hold" == dialects.get("cobalt").parse_status((COBALT / "qstat.txt").read_text(), ["266817"])["266817"].raw
    )


def test_node_list_variables_live_on_the_dialects():
    assert dialects.get("slurm").nodefile_vars == ("SLURM_JOB_NODELIST",)
    assert dialects.get("gridengine").nodefile_vars == ("PE_HOSTFILE", "SGE_JOB_HOSTLIST")
    assert dialects.get("cobalt").nodefile_vars == ("COBALT_NODEFILE",)
    assert dialects.get("slurm").nodes_from_env({}) is None
    source, hosts = dialects.get("slurm").nodes_from_env({"SLURM_JOB_NODELIST": "a[1-2] b"})
    assert source == "$SLURM_JOB_NODELIST" and list(hosts) == ["a1", "a2", "b"]


def test_cobalt_submit_command():
    argv = dialects.get("cobalt").submit_argv("/w/job.sh", program=["qsub-gpu"])
    assert argv == ["qsub-gpu", "--mode", "script", "/w/job.sh"]


def test_cancel_commands():
    assert dialects.get("slurm").cancel_argv("5") == ["scancel", "-v", "5"]  # -v: says when the job had ended
    assert dialects.get("pbspro").cancel_argv("5.pbs1") == ["qdel", "5.pbs1"]
    assert dialects.get("gridengine").cancel_argv("5") == ["qdel", "5"]
    assert dialects.get("cobalt").cancel_argv("5") == ["qdel", "5"]
    assert dialects.get("none").cancel_argv("5")[-1] == "5"  # a process group: tests/test_local_jobs.py


def test_no_scheduler_status_ignores_reused_pids():
    out = "  101   101 Ss   bash /w/.hpc-launch/train-1.sh\n  102   102 Ss+  /usr/bin/vim notes\n"
    got = dialects.get("none").parse_status(out, ["101", "102", "103"])
    assert list(got) == ["101"] and got["101"].state == JobState.RUNNING


@pytest.mark.parametrize(
    "dialect, rc, out, err, sent, already",
    [
        ("slurm", 0, read("slurm_scancel.txt"), "", True, False),  # recorded without -v: nothing said, taken
        ("slurm", 0, "", "scancel: error: Kill job error on job id 5: Access/permission denied\n", False, False),
        ("gridengine", 1, read("sge_qdel_unknown.txt"), "", False, True),
        ("gridengine", 0, read("sge_qdel.txt"), "", True, False),
    ],
)
def test_cancel_outcomes_recorded(dialect, rc, out, err, sent, already):
    outcome = dialects.get(dialect).parse_cancel(rc, out, err)
    assert (outcome.sent, outcome.already_ended) == (sent, already)


def test_slurm_query_of_a_forgotten_job_is_empty():
    d = dialects.get("slurm")
    run = Replay().add(
        d.status_argv(["999999"]),
        CommandResult(1, read("slurm_squeue_unknown.txt"), read("slurm_squeue_unknown.stderr.txt")),
    )
    assert d.query(run, ["999999"]) == {}


# ---- on the testbed: the real schedulers --------------------------------------------------------


def _testbed_run(sge: bool = False):
    from hpc_launch.transport import LocalTransport

    env = {
        "SGE_ROOT": os.environ.get("SGE_ROOT", "/var/lib/gridengine"),
        "SGE_CELL": os.environ.get("SGE_CELL", "default"),
    }
    if sge:
        sge_bin = os.environ.get("HPC_TESTBED_SGE_BIN", "/opt/hpc-testbed/sge/bin")
        env["PATH"] = f"{sge_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    transport = LocalTransport()
    return lambda argv: transport.run(argv, env=env, timeout=60)


def _workdir() -> str:
    base = Path(os.environ.get("HPC_TESTBED_DIR", "/tmp/hpc-testbed")) / "work"
    assert base.is_dir(), "the testbed is not up: testbed/install.sh && testbed/up.sh"
    return subprocess.run(
        ["mktemp", "-d", f"{base}/dialects.XXXXXX"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _wait(what, fn, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.scheduler
def test_slurm_accounting_and_cancel_on_the_testbed():
    d, run, work = dialects.get("slurm"), _testbed_run(), _workdir()
    job = d.parse_submit(run(["sbatch", "-D", work, "-o", f"{work}/f-%j.out", "--wrap", "exit 3"]).out)
    _wait("the job to end", lambda: (i := d.query(run, [job]).get(job)) is not None and not i.active)
    # slurmdbd: the record squeue forgets after MinJobAge. slurmctld hands it the job's end on its
    # own time: CI saw sacct still say RUNNING after squeue had the job ended, on a busy machine
    acct = _wait("the sacct record of the end", lambda: (a := d.accounting(run, job)) and a.state.terminal and a)
    assert (acct.state, acct.exit_code) == (JobState.FAILED, 3)
    r = run(d.cancel_argv(job))  # scancel exits 0 here too; -v makes it say the job had ended
    outcome = d.parse_cancel(r.rc, r.out, r.err)
    assert r.rc == 0 and outcome.already_ended and not outcome.sent
    assert d.accounting(run, "999999999") is None


@pytest.mark.scheduler
@pytest.mark.beside
def test_grid_engine_error_state_reason_and_accounting_on_the_testbed():
    d, run, work = dialects.get("gridengine"), _testbed_run(sge=True), _workdir()
    Path(work, "j.sh").write_text("#!/bin/bash\nexit 0\n")
    bad = d.parse_submit(run(["qsub", "-wd", "/nonexistent/dir", "-N", "eqw", f"{work}/j.sh"]).out)
    good = d.parse_submit(run(["qsub", "-wd", work, "-N", "ok", "-j", "y", f"{work}/j.sh"]).out)
    try:
        info = _wait("the error state", lambda: (i := d.query(run, [bad]).get(bad)) is not None and i.never_runs and i)
        assert info.active and "can't chdir to /nonexistent/dir" in info.comment
        r = run(d.cancel_argv(bad))
        assert d.parse_cancel(r.rc, r.out, r.err).sent
        acct = _wait("the qacct record", lambda: d.accounting(run, good))
        assert (acct.state, acct.exit_code) == (JobState.DONE, 0)
        r = run(d.cancel_argv(good))  # long gone: qdel says it does not exist
        assert d.parse_cancel(r.rc, r.out, r.err).already_ended
    finally:
        run(["qdel", bad])
