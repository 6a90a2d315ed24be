"""Where and when a queued job will start (issue 19): the scheduler's own estimate and its
pending reason in plain words, in `status` and while `logs -f` waits. Slurm's answers are the
testbed's (tests/golden/sched/slurm_squeue_start*.txt, see its README), PBS Pro's the recorded
qstat -f of tests/golden/pbspro-observed; a fake `squeue` on PATH replays them to the real CLI."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from hpc_launch import cli, dialects, follow
from hpc_launch.dialects.pbspro import PBSPro, parse_full
from hpc_launch.dialects.slurm import Slurm, reason_words
from hpc_launch.jobs.state import START_KEY, span_words, start_words
from hpc_launch.records import JobRecord, JobStore
from hpc_launch.states import JobState

GOLDEN = Path(__file__).parent / "golden"
SCHED = GOLDEN / "sched"
ESTIMATE_216 = 1795662039  # 2026-11-26T03:00:39 UTC, job 216's start in slurm_squeue_start*.txt


def _recorded(path: Path) -> str:
    """A pbspro-observed file's stdout section."""
    return path.read_text().split("--- stdout ---\n", 1)[1].split("\n--- stderr ---", 1)[0]


# ---- Slurm: squeue --start -------------------------------------------------------------------


def test_slurm_reads_the_start_time_and_says_why_each_job_waits():
    got = Slurm.parse_start((SCHED / "slurm_squeue_start_epoch.txt").read_text(), ["215", "216", "217", "218"])
    assert set(got) == {"216", "217", "218"}  # 215 runs: --start lists pending jobs only
    assert got["216"].at == ESTIMATE_216 and got["216"].reason == "Resources: waiting for nodes"
    assert got["217"].at is None and got["217"].reason.startswith("Dependency: waiting for the job it depends on")
    assert got["218"].at is None and got["218"].reason.startswith("JobHeldUser: held by its owner")


def test_slurm_default_time_format_is_read_as_local_time(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the testbed's clock, where the file was recorded
    time.tzset()
    try:
        got = Slurm.parse_start((SCHED / "slurm_squeue_start.txt").read_text(), ["216"])
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert got["216"].at == ESTIMATE_216


def test_slurm_asks_once_for_all_queued_jobs_in_epoch_seconds():
    asked = []

    def run(argv):
        asked.append(argv)
        return type("R", (), {"rc": 1, "out": "", "err": (SCHED / "slurm_squeue_start_unknown.stderr.txt").read_text()})

    assert Slurm().start_estimates(run, ["999999"]) == {}  # a job gone meanwhile: no estimate, no error
    assert asked == [
        ["env", "SLURM_TIME_FORMAT=%s", "squeue", "--start", "--noheader", "--format=%i|%S|%r", "--jobs=999999"]
    ]


@pytest.mark.parametrize(
    "code, words",
    [
        ("Priority", "Priority: waiting for higher-priority jobs"),
        ("BeginTime", "BeginTime: its --begin time has not come (a requeued job: Slurm's pause before it runs again)"),
        ("ReqNodeNotAvail, UnavailableNodes:pod1", "ReqNodeNotAvail, UnavailableNodes:pod1: a node it needs is down"),
        ("QOSMaxJobsPerUserLimit", "QOSMaxJobsPerUserLimit: the QOS's per-user limit is reached"),
        ("AssocGrpGRES", "AssocGrpGRES: your account's (association's) group limit is reached"),
        ("SomethingNew", "SomethingNew"),  # a code we have no words for is shown as Slurm said it
        ("None", "None"),
    ],
)
def test_slurm_reason_codes_in_plain_words(code, words):
    assert reason_words(code).startswith(words)


# ---- PBS Pro: qstat -f ---------------------------------------------------------------------


def test_pbs_queued_job_gives_its_comment_and_no_invented_estimate():
    [(job, attrs)] = parse_full(_recorded(GOLDEN / "pbspro-observed/048-qstat-f-queued-waiting.txt"))
    info = PBSPro().job_info(attrs)
    assert info.state == JobState.QUEUED and info.estimated_start is None
    assert info.comment == "Not Running: Insufficient amount of resource: ncpus (R: 32 A: 28 T: 32)"


def test_pbs_reads_the_backfill_estimate():
    text = _recorded(GOLDEN / "pbspro-observed/048-qstat-f-queued-waiting.txt")
    # the recorded server computed none; the line as a site's qstat -f prints it (day padded)
    text = text.replace("    etime =", "    estimated.start_time = Mon Apr  3 23:38:32 2017\n    etime =")
    [(job, attrs)] = parse_full(text)
    info = PBSPro().job_info(attrs)
    assert info.estimated_start == time.mktime((2017, 4, 3, 23, 38, 32, 0, 0, -1))


# ---- the words: status's column and the follower's line -------------------------------------


def _rec(job_id="216", dialect="slurm", state="queued", **start) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        cluster="tb",
        dialect=dialect,
        host="localhost",
        name="train",
        workdir="/w",
        script_path="/w/train.sh",
        log_path=f"/w/train.o{job_id}",
        exit_path=f"/w/train.o{job_id}.exitcode",
        submit_time=1.0,
        state=state,
        extra={START_KEY: start} if start else {},
    )


def test_words_say_when_and_why():
    now = ESTIMATE_216 - (2 * 3600 + 10 * 60)
    rec = _rec(at=ESTIMATE_216, reason="Resources: waiting for nodes")
    assert start_words(rec, now=now) == "in 2h10m (Resources: waiting for nodes)"
    assert start_words(rec, now=ESTIMATE_216 + 5).startswith("any moment")
    assert start_words(_rec(at=None, reason="Dependency: x")) == "not estimated yet (Dependency: x)"
    assert start_words(_rec(state="running", at=ESTIMATE_216, reason="r")) == ""  # started: nothing to say
    assert [span_words(s) for s in (40, 300, 7200, 93600)] == ["40s", "5m", "2h", "1d2h"]


def test_grid_engine_says_it_gives_no_estimate():
    assert not dialects.get("gridengine").supports(dialects.StartEstimates)
    assert start_words(_rec(dialect="gridengine")) == "no estimate from Grid Engine"


# ---- the real CLI against a fake squeue replaying the testbed's answers ---------------------


@pytest.fixture
def fake_squeue(tmp_path, monkeypatch):
    """`squeue` on PATH: --start prints the recorded answer (epoch form only when asked for it),
    a status query the states of jobs 215-218; every call is logged."""
    log, status, start = tmp_path / "calls", tmp_path / "status.txt", tmp_path / "start.txt"
    status.write_text("215|RUNNING|None\n216|PENDING|Resources\n217|PENDING|Dependency\n218|PENDING|JobHeldUser\n")
    start.write_text((SCHED / "slurm_squeue_start_epoch.txt").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "squeue"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURM_TIME_FORMAT $*" >> {log}\n'
        'case " $* " in\n'
        f'  *" --start "*) [ "$SLURM_TIME_FORMAT" = "%s" ] && cat {start} || cat {SCHED}/slurm_squeue_start.txt ;;\n'
        f"  *) cat {status} ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log, start


def _cli(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    assert exit_.value.code == 0, err
    return out


def test_status_shows_when_and_why_with_one_start_query(fake_squeue, capsys):
    log, _ = fake_squeue
    store = JobStore()
    for job, state in (("215", "running"), ("216", "queued"), ("217", "queued")):
        store.add(_rec(job, state=state))
    got = {j["job_id"]: j for j in json.loads(_cli(capsys, "status", "--json"))}
    assert (got["216"]["estimated_start"], got["216"]["pending_reason"]) == (
        ESTIMATE_216,
        "Resources: waiting for nodes",
    )
    assert got["217"]["estimated_start"] is None and got["217"]["pending_reason"].startswith("Dependency:")
    assert (got["215"]["estimated_start"], got["215"]["pending_reason"]) == (None, "")
    starts = [line for line in log.read_text().splitlines() if "--start" in line]
    [asked] = starts  # one call, for the queued jobs only, times in epoch seconds
    head, _, ids = asked.partition(" --jobs=")
    assert head == "%s --start --noheader --format=%i|%S|%r" and sorted(ids.split(",")) == ["216", "217"]

    table = _cli(capsys, "status", "216")
    assert "starts" in table.splitlines()[0] and "(Resources: waiting for nodes)" in table


def test_status_forgets_the_estimate_once_the_job_runs(fake_squeue, capsys):
    store = JobStore()
    store.add(_rec("216", at=ESTIMATE_216, reason="Resources: waiting for nodes"))
    log, start = fake_squeue
    start.write_text("")
    (log.parent / "status.txt").write_text("216|RUNNING|None\n")
    [job] = json.loads(_cli(capsys, "status", "--json", "216"))
    assert (job["state"], job["estimated_start"], job["pending_reason"]) == ("running", None, "")
    assert START_KEY not in store.get("216", "tb").extra
    assert "--start" not in log.read_text()  # nothing queued: no estimate asked for


def test_follow_prints_the_start_line_only_when_it_changes(fake_squeue, monkeypatch, capsys):
    _, start = fake_squeue
    store = JobStore()
    store.add(_rec("216"))
    answers = [
        "216|1795662039|Resources\n",
        "216|1795662041|Resources\n",  # moved by seconds: the same to a reader
        "216|1795665639|Resources\n",  # an hour later
        "216|N/A|Priority\n",
    ]

    def fake_follow(transport, path, *, state, **kw):
        for answer in answers:
            start.write_text(answer)
            assert state() == JobState.QUEUED
        return JobState.DONE

    monkeypatch.setattr(follow, "follow", fake_follow)
    follow.follow_job(store.get("216", "tb"), store=store)
    lines = [line for line in capsys.readouterr().err.splitlines() if "waiting to start" in line]
    assert len(lines) == 3
    assert lines[0].endswith("(Resources: waiting for nodes)")
    assert (
        lines[2] == "hpc-launch: 216: waiting to start: not estimated yet (Priority: waiting for higher-priority jobs)"
    )


@pytest.mark.parametrize("start", ["2026-13-45T99:99:99", "0000-00-00T00:00:00", "9" * 30, "2026-11-26T03:00"])
def test_a_start_time_squeue_gives_that_cannot_be_read_is_no_estimate_not_a_traceback(start):
    got = Slurm.parse_start(f"216|{start}|Resources\n", ["216"])
    assert got["216"].at is None and got["216"].reason == "Resources: waiting for nodes"
    rec = JobRecord("216", "slurm", "slurm", "localhost", "t", "/w", "", "", "", 0.0, state="queued")
    rec.extra = {START_KEY: {"at": got["216"].at, "reason": got["216"].reason}}
    assert start_words(rec) == "not estimated yet (Resources: waiting for nodes)"
