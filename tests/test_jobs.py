"""The job's life (hpc_launch/jobs.py): every state decision and the cancel path, in milliseconds.

The scheduler's answers come from a scripted dialect (what the dialect parsed) and a fake
transport that holds the exit-code files; the dialects' own parsing is tested against recorded
outputs in test_dialects.py and test_pbspro_observed.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import pytest

from hpc_launch import dialects, jobs
from hpc_launch.dialects.base import CancelOutcome, Dialect, StatusInfo
from hpc_launch.records import JobRecord, JobStore
from hpc_launch.states import JobState
from hpc_launch.transport import CommandResult

from fakes import OK, FakeTransport


class ScriptedDialect(Dialect):
    """Answers status queries from a list of prepared answers (one per query)."""

    name = "scripted"
    submit_program = "qsub"

    def __init__(self):
        self.answers: List[Dict[str, StatusInfo]] = []
        self.accounting_answer: Optional[StatusInfo] = None
        self.cancel_result = CommandResult(0, "", "")
        self.ran: List[List[str]] = []

    def query(self, run, job_ids):
        run(["qstat"] + list(job_ids))
        return self.answers.pop(0) if len(self.answers) > 1 else (self.answers[0] if self.answers else {})

    def accounting(self, run, job_id):
        return self.accounting_answer

    def cancel_argv(self, job_id):
        return ["qdel", job_id]

    def parse_submit(self, out):
        return out.strip()

    def depend_flags(self, job_id):
        return ["-W", f"depend=afterany:{job_id}"]

    def status_argv(self, job_ids):
        return ["qstat", *job_ids]

    def parse_status(self, out, job_ids):
        return {}  # `query` answers from the script above

    def parse_cancel(self, rc, out, err):
        if rc == 0:
            return CancelOutcome(sent=True)
        if "finished" in err:
            return CancelOutcome(sent=False, already_ended=True, message=err.strip())
        return CancelOutcome(sent=False, message=err.strip())


def _fake(dialect: ScriptedDialect) -> FakeTransport:
    """qdel answered by the scripted dialect's cancel_result; everything else rc 0."""
    return FakeTransport(lambda argv: dialect.cancel_result if argv[0] == "qdel" else OK)


@pytest.fixture
def scripted(monkeypatch):
    d = ScriptedDialect()
    monkeypatch.setitem(dialects._DIALECTS, "scripted", d)
    return d


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "jobs.sqlite")


def _record(store, **kw) -> JobRecord:
    rec = JobRecord(
        job_id=kw.pop("job_id", "42"),
        cluster="c",
        dialect=kw.pop("dialect", "scripted"),
        host="localhost",
        name="train",
        workdir="/w",
        script_path="/w/.hpc-launch/train.sh",
        log_path="/w/train.o42",
        exit_path="/w/train.o42.exitcode",
        submit_time=1.0,
        **kw,
    )
    store.add(rec)
    return store.get(rec.job_id, "c")


def _refresh(store, rec, transport) -> JobRecord:
    return jobs.refresh(store, [rec], lambda host: transport)[0]


def test_running_job_keeps_the_schedulers_state_and_comment(scripted, store):
    t = _fake(scripted)
    scripted.answers = [
        {"42": StatusInfo(JobState.QUEUED, raw="Q", comment="Not Running: Insufficient amount of resource: ngpus")}
    ]
    got = _refresh(store, _record(store), t)
    assert (got.state, got.comment) == ("queued", "Not Running: Insufficient amount of resource: ngpus")


def test_an_unknown_state_word_never_ends_or_restarts_a_job(scripted, store):
    t = _fake(scripted)
    scripted.answers = [{"42": StatusInfo(JobState.UNKNOWN, raw="Z")}]
    got = _refresh(store, _record(store, state="running"), t)
    assert got.state == "running" and got.end_time is None


@pytest.mark.parametrize(
    "code, cancel_asked, state",
    [
        (b"0\n", False, "done"),
        (b"3\n", False, "failed"),
        (b"143\n", False, "failed"),  # SIGTERM nobody asked for: walltime, preemption, admin
        (b"143\n", True, "cancelled"),
        (b"137\n", False, "failed"),  # unrequested SIGKILL: the OOM killer, not a cancel
        (b"137\n", True, "cancelled"),
        (None, False, "failed"),  # died without its exit trap
        (None, True, "cancelled"),
    ],
)
def test_a_job_the_scheduler_forgot_is_decided_by_its_exit_code_file(scripted, store, code, cancel_asked, state):
    t = _fake(scripted)
    if code is not None:
        t.files["/w/train.o42.exitcode"] = code
    scripted.answers = [{}]
    extra = {"cancel_requested_at": 5.0} if cancel_asked else {}
    got = _refresh(store, _record(store, state="running", extra=extra), t)
    assert got.state == state
    assert got.end_time is not None


def test_an_unrequested_sigkill_says_it_was_probably_memory(scripted, store):
    t = _fake(scripted)
    t.files["/w/train.o42.exitcode"] = b"137\n"
    scripted.answers = [{}]
    got = _refresh(store, _record(store, state="running"), t)
    assert got.exit_code == 137 and "out-of-memory" in got.comment


def test_no_exit_file_asks_the_schedulers_accounting(scripted, store):
    t = _fake(scripted)
    scripted.answers = [{}]
    scripted.accounting_answer = StatusInfo(JobState.TIMEOUT, 137, "qacct", comment="h_rt limit")
    got = _refresh(store, _record(store, state="running"), t)
    assert (got.state, got.exit_code) == ("timeout", 137)


def test_scheduler_says_ended_without_exit_status_then_the_file_decides(scripted, store):
    t = _fake(scripted)
    t.files["/w/train.o42.exitcode"] = b"0\n"
    scripted.answers = [{"42": StatusInfo(JobState.UNKNOWN, raw="C", ended=True)}]
    assert _refresh(store, _record(store, state="running"), t).state == "done"


def test_the_schedulers_final_word_wins_and_keeps_its_exit_status(scripted, store):
    t = _fake(scripted)
    scripted.answers = [{"42": StatusInfo(JobState.TIMEOUT, -29, "F", comment="exceeded resource walltime")}]
    got = _refresh(store, _record(store, state="running"), t)
    assert (got.state, got.exit_code, got.comment) == ("timeout", -29, "exceeded resource walltime")


def test_never_runs_ends_a_follow_with_the_schedulers_reason(scripted, store):
    t = _fake(scripted)
    scripted.answers = [
        {
            "42": StatusInfo(
                JobState.QUEUED, raw="Q", comment="Can Never Run: Not enough total nodes available", never_runs=True
            )
        }
    ]
    rec = _record(store)
    seen = []
    poll = jobs.state_poller(t, rec, store, on_comment=seen.append)
    with pytest.raises(jobs.NeverRuns, match="Not enough total nodes"):
        poll()
    assert seen == ["Can Never Run: Not enough total nodes available"]
    assert store.get("42", "c").comment.startswith("Can Never Run")


def test_an_error_state_ends_a_follow_naming_the_users_fix(tmp_path, store):
    # Grid Engine's Eqw, as the testbed's real qstat and `qstat -j` answered it
    here = Path(__file__).parent / "golden" / "elsewhere"
    answers = {
        "qstat -xml": (here / "testbed_sge_qstat_states.txt").read_text(),
        "qstat -j 22": (here / "testbed_sge_qstat_j_error.txt").read_text(),
    }
    t = FakeTransport(lambda argv: CommandResult(0, answers.get(" ".join(argv), ""), ""))
    rec = _record(store, job_id="22", dialect="gridengine")
    starts: List[JobRecord] = []
    with pytest.raises(jobs.NeverRuns) as err:
        jobs.state_poller(t, rec, store, on_start=starts.append)()
    assert "can't chdir to /nonexistent/dir" in str(err.value) and "`qmod -cj 22`" in str(err.value)
    assert "fewer nodes" not in err.value.hint and "hpc-launch cancel 22" in err.value.hint
    # no "waiting to start: no estimate ..." line before it, and status's `starts` column says so
    assert starts == []
    assert jobs.state.start_words(store.get("22", "c")) == "not as it is (the scheduler says why)"


def test_terminal_records_are_not_asked_again(scripted, store):
    t = _fake(scripted)
    scripted.answers = [{}]
    _refresh(store, _record(store, state="done", exit_code=0), t)
    assert t.ran == []


# ---- waiting for jobs to end --------------------------------------------------------------


@pytest.mark.parametrize("has_scheduler,waited", [(True, (1.5, 2.25)), (False, (0.3, 0.45))])
def test_a_wait_for_jobs_with_no_scheduler_asks_every_few_tenths(scripted, store, monkeypatch, has_scheduler, waited):
    """A scheduler's controller is spared (POLL: 1.5 s, then more); where there is none (local,
    pods) a query is a `ps` and a job ends in seconds: asked from 0.3 s (before: 1.5 s there too)."""
    from hpc_launch.sweep_jobs import watch

    monkeypatch.setattr(scripted, "has_scheduler", has_scheduler)
    t = _fake(scripted)
    running = {"42": StatusInfo(JobState.RUNNING, raw="R")}
    scripted.answers = [running, running, {"42": StatusInfo(JobState.DONE, 0, "F")}]
    slept: List[float] = []
    (ended,) = watch(store, [_record(store, state="running")], lambda host: t, write=lambda s: None, sleep=slept.append)
    assert ended.state == "done"
    assert slept == pytest.approx(list(waited))


# ---- cancel -------------------------------------------------------------------------------


def test_cancel_of_a_job_that_already_finished_reports_how_it_ended_and_sends_nothing(scripted, store):
    t = _fake(scripted)
    t.files["/w/train.o42.exitcode"] = b"0\n"
    scripted.answers = [{}]
    result = jobs.cancel(store, _record(store, state="queued"), t, sleep=lambda s: None)
    assert result.state == JobState.DONE and result.exit_code == 0
    assert "had already ended: done with exit code 0" in result.message
    assert not any(a[0] == "qdel" for a in t.ran)
    assert store.get("42", "c").state == "done"


def test_cancel_records_the_end_the_scheduler_reports_afterwards(scripted, store):
    t = _fake(scripted)
    scripted.answers = [
        {"42": StatusInfo(JobState.RUNNING, raw="R")},  # before the request
        {"42": StatusInfo(JobState.RUNNING, raw="R", comment="terminated")},  # qdel is asynchronous
        {"42": StatusInfo(JobState.CANCELLED, 271, "F")},
    ]
    result = jobs.cancel(store, _record(store, state="running"), t, sleep=lambda s: None)
    assert ["qdel", "42"] in t.ran
    assert (result.state, result.exit_code) == (JobState.CANCELLED, 271)
    rec = store.get("42", "c")
    assert (rec.state, rec.exit_code) == ("cancelled", 271)


def test_cancel_confirms_an_end_that_follows_the_signal_within_a_tenth_of_a_second(scripted, store):
    """A local job ends ~0.1 s after cancel's TERM (its script's exit trap): the confirmation waits no
    longer than that, not the half second and then second of a scheduler's confirmation."""
    t = _fake(scripted)
    scripted.answers = [
        {"42": StatusInfo(JobState.RUNNING, raw="R")},  # before the request
        {"42": StatusInfo(JobState.RUNNING, raw="R")},  # right after it: the trap still runs
        {"42": StatusInfo(JobState.CANCELLED, 143, "F")},
    ]
    slept: List[float] = []
    result = jobs.cancel(store, _record(store, state="running"), t, sleep=slept.append)
    assert result.state == JobState.CANCELLED
    assert sum(slept) <= 0.1, slept


def test_cancel_that_races_the_jobs_own_end_keeps_the_real_outcome(scripted, store):
    """scancel/qdel of a job that completed in between: the job is done, not cancelled."""
    t = _fake(scripted)
    scripted.cancel_result = CommandResult(35, "", "qdel: Job has finished 42.pbs")
    t.files_after = {}
    scripted.answers = [{"42": StatusInfo(JobState.RUNNING, raw="R")}, {}]
    rec = _record(store, state="running")
    t.files["/w/train.o42.exitcode"] = b"0\n"  # written as the job ended, just before qdel
    result = jobs.cancel(store, rec, t, sleep=lambda s: None)
    assert result.state == JobState.DONE
    assert "had already ended" in result.message
    assert store.get("42", "c").state == "done"


def test_cancel_of_a_grid_engine_job_in_eqw_says_it_never_ran(scripted, store):
    """qdel of a job in Eqw: qacct keeps the failed start with exit_status 0 (the recorded failed
    record, its failed line that of sge_status(5) 26), which is no exit code of the job's own."""
    from hpc_launch.dialects.gridengine import GridEngine

    qacct = (Path(__file__).parent / "golden" / "sched" / "sge_qacct_failed.txt").read_text()
    qacct = qacct.replace("failed       0    ", "failed       26  : opening input/output file").replace(
        "exit_status  3 ", "exit_status  0 "
    )
    t = _fake(scripted)
    scripted.answers = [{"42": StatusInfo(JobState.QUEUED, raw="Eqw", never_runs=True)}, {}]
    scripted.accounting_answer = GridEngine.parse_accounting(qacct)
    result = jobs.cancel(store, _record(store, state="queued"), t, sleep=lambda s: None)
    assert (result.state, result.exit_code) == (JobState.CANCELLED, None)
    assert result.message == "job 42 cancelled before it ran (Grid Engine: failed 26: opening input/output file)"
    rec = store.get("42", "c")
    assert (rec.state, rec.exit_code) == ("cancelled", None)


def test_a_refused_cancel_is_an_error_and_leaves_the_record_as_it_was(scripted, store):
    t = _fake(scripted)
    scripted.cancel_result = CommandResult(159, "", "qdel: Unauthorized Request  42.pbs")
    scripted.answers = [{"42": StatusInfo(JobState.RUNNING, raw="R")}]
    with pytest.raises(Exception, match="Unauthorized"):
        jobs.cancel(store, _record(store, state="running"), t, sleep=lambda s: None)
    rec = store.get("42", "c")
    assert rec.state == "running" and "cancel_requested_at" not in rec.extra


def test_cancel_that_is_not_confirmed_in_time_says_so(scripted, store):
    t = _fake(scripted)
    scripted.answers = [{"42": StatusInfo(JobState.RUNNING, raw="R")}]
    result = jobs.cancel(store, _record(store, state="running"), t, confirm_s=0.0, sleep=lambda s: None)
    assert result.state == JobState.RUNNING and "still reports it running" in result.message
    assert store.get("42", "c").extra.get("cancel_requested_at")


def test_a_job_pbs_killed_for_walltime_is_a_timeout_even_when_pbs_has_forgotten_it(store):
    """PBS Pro with job history off (its default) forgets the job at once; the SIGTERM trap
    wrote 143. MoM's line in the log (pbspro-observed 050) tells it was the walltime."""
    t = _fake(ScriptedDialect())
    t.files["/w/train.o42.exitcode"] = b"143 train.sh\n"
    t.files["/w/train.o42"] = b"[hpc-train] step=3\n=>> PBS: job killed: walltime 12 exceeded limit 5\n"
    rec = JobRecord(
        job_id="42.pbs",
        cluster="c",
        dialect="pbspro",
        host="localhost",
        name="train",
        workdir="/w",
        script_path="/w/.hpc-launch/train.sh",
        log_path="/w/train.o42",
        exit_path="/w/train.o42.exitcode",
        submit_time=1.0,
        state="running",
    )
    store.add(rec)
    t.run = lambda argv, **kw: CommandResult(153, "", "qstat: Unknown Job Id 42.pbs\n")
    got = jobs.refresh(store, [store.get("42.pbs", "c")], lambda h: t)[0]
    assert (got.state, got.exit_code) == ("timeout", 143)
    assert "walltime" in got.comment


# ---- submission: exactly one job, recorded, whatever the scheduler's answer -----------------

from hpc_launch.errors import SchedulerError, TransportError  # noqa: E402


class SubmitAnswers:
    """`sbatch` answered from a list; `squeue --me` shows the jobs "created" so far."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.created = []
        self.submits = 0

    def __call__(self, argv):
        if argv[0] == "squeue":
            return CommandResult(0, "".join(f"{j}|{cmd}\n" for j, cmd in self.created), "")
        self.submits += 1
        answer = self.answers.pop(0)
        if answer.get("creates"):
            self.created.append((answer["creates"], "/home/u/w/.hpc-launch/train-1.sh"))
        if answer.get("raise"):
            raise answer["raise"]
        return CommandResult(answer.get("rc", 0), answer.get("out", ""), answer.get("err", ""))


def SubmitTransport(answers) -> FakeTransport:  # noqa: N802  (reads as the transport it makes)
    return FakeTransport(SubmitAnswers(answers), host="login")


def _lost(msg="connection dropped"):
    exc = TransportError(msg)
    exc.maybe_ran = True
    return exc


SLURM = dialects.get("slurm")
TIMEOUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"


def test_a_timeout_after_the_job_was_created_records_that_job_and_submits_nothing_more():
    t = SubmitTransport([{"creates": "101", "rc": 1, "err": TIMEOUT}])
    assert (
        jobs.run_submit(
            t, ["sbatch", "x"], "/home/u/w", SLURM, script_relpath=".hpc-launch/train-1.sh", sleep=lambda s: None
        )
        == "101"
    )
    assert t.answer.submits == 1


def test_a_timeout_that_created_nothing_is_retried():
    t = SubmitTransport([{"rc": 1, "err": TIMEOUT}, {"creates": "102", "out": "102\n"}])
    assert (
        jobs.run_submit(
            t, ["sbatch", "x"], "/home/u/w", SLURM, script_relpath=".hpc-launch/train-1.sh", sleep=lambda s: None
        )
        == "102"
    )
    assert t.answer.submits == 2


def test_a_lost_connection_asks_the_scheduler_before_saying_anything():
    t = SubmitTransport([{"creates": "103", "raise": _lost()}])
    assert jobs.run_submit(t, ["sbatch", "x"], "/home/u/w", SLURM, script_relpath=".hpc-launch/train-1.sh") == "103"
    t = SubmitTransport([{"raise": _lost()}])
    with pytest.raises(TransportError, match="may or may not exist"):
        jobs.run_submit(t, ["sbatch", "x"], "/home/u/w", SLURM, script_relpath=".hpc-launch/train-1.sh")
    assert t.answer.submits == 1  # never re-sent


def test_an_unreadable_answer_of_a_created_job_is_still_recorded():
    t = SubmitTransport([{"creates": "104", "out": "sbatch: Job 104 queued (site banner)\n"}])
    assert jobs.run_submit(t, ["sbatch", "x"], "/home/u/w", SLURM, script_relpath=".hpc-launch/train-1.sh") == "104"


def test_a_clear_refusal_is_not_retried():
    t = SubmitTransport([{"rc": 1, "err": "sbatch: error: invalid partition specified: nope"}])
    with pytest.raises(SchedulerError, match="refused the job: sbatch: error: invalid partition"):
        jobs.run_submit(t, ["sbatch", "x"], "/home/u/w", SLURM, script_relpath=".hpc-launch/train-1.sh")
    assert t.answer.submits == 1


def test_pbs_finds_its_submission_by_the_script_qsub_was_given():
    from pbs_fixtures import load

    fx = load("014-qstat-f-never-runs")  # Submit_arguments = -q rt_HF ... sleep60.sh
    run = lambda argv: fx.result  # noqa: E731
    assert dialects.get("pbspro").find_submitted(run, "sleep60.sh") == "65.pbshead"
    assert dialects.get("pbspro").find_submitted(run, "other.sh") is None


def test_reading_a_job_runs_the_named_after_steps_in_order(scripted, store, monkeypatch):
    """`status`, `list -r` and `logs -f` read through refresh: a job that has just ended goes
    through AFTER_ENDING (its `extra` written after them), every read through AFTER_READING."""
    from hpc_launch.jobs import state

    assert [name for name, _ in state.AFTER_ENDING] == [
        "record the hosts it found bad",
        "keep the chain's waiting links off them",
    ]
    assert [name for name, _ in state.AFTER_READING] == ["relay notifications"]
    ran = []

    def ending(name):
        def step(store, rec, got, transport, extra):
            ran.append((name, rec.job_id, got.state.value))
            extra[name] = True

        return step

    monkeypatch.setattr(state, "AFTER_ENDING", (("a", ending("a")), ("b", ending("b"))))
    monkeypatch.setattr(
        state, "AFTER_READING", (("r", lambda store, recs, t: ran.append(("r", [r.job_id for r in recs]))),)
    )
    t = _fake(scripted)
    scripted.answers = [{"42": StatusInfo(JobState.RUNNING, raw="R")}]
    got = _refresh(store, _record(store, state="queued"), t)
    assert got.state == "running" and ran == [("r", ["42"])]  # not ended: no ending steps
    scripted.answers = [{"42": StatusInfo(JobState.DONE, 0, raw="F")}]
    got = _refresh(store, got, t)
    assert ran[1:] == [("a", "42", "done"), ("b", "42", "done"), ("r", ["42"])]
    assert got.extra["a"] and got.extra["b"]
