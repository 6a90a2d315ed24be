"""Following logs while something else writes them, here and over a real sshd."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from hpc_launch.errors import SchedulerError
from hpc_launch.logs import MAX_STATE_FAILURES, LogTail, follow, read_exit_code
from hpc_launch.protocol import POLL, Backoff
from hpc_launch.states import JobState
from hpc_launch.transport import LocalTransport


# `server`, `shared_ssh` and `transport` (local and ssh) come from conftest.py.


def test_logtail_handles_absent_file_split_multibyte_and_truncation(transport, tmp_path):
    path = tmp_path / "job.log"
    tail = LogTail(transport, str(path))
    assert tail.read_new() == "" and not tail.exists
    data = "loss ✓ é\n".encode()
    cut = data.index("✓".encode()) + 1  # in the middle of a 3-byte character
    with open(path, "wb") as fh:
        fh.write(data[:cut])
        fh.flush()
        first = tail.read_new()
        fh.write(data[cut:])
        fh.flush()
        second = tail.read_new()
    assert first == "loss " and first + second == "loss ✓ é\n"
    assert tail.read_new() == ""
    path.write_bytes(b"new run\n")  # truncated and rewritten, shorter than before
    assert tail.read_new() == "new run\n"


def test_follow_streams_a_growing_file_from_another_process(transport, tmp_path):
    path = tmp_path / "job.log"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                "time.sleep(0.6)\n"  # the job is still queued: no log yet
                "with open(sys.argv[1], 'a') as f:\n"
                "    for i in range(5):\n"
                "        f.write(f'line {i}\\n'); f.flush(); time.sleep(0.15)\n"
            ),
            str(path),
        ]
    )
    states = []
    waits = []
    received = []

    def state():
        states.append(time.monotonic())
        return JobState.DONE if writer.poll() is not None else JobState.RUNNING

    final = follow(transport, str(path), state=state, write=received.append, on_wait=waits.append, poll_interval=0.05)
    assert final is JobState.DONE
    assert "".join(received) == "".join(f"line {i}\n" for i in range(5))
    assert len(received) > 1  # streamed as it came, not read once at the end
    assert waits and waits == sorted(waits) and waits[0] >= 0
    # The scheduler was asked far less often than the file was polled (every 50 ms).
    span = states[-1] - states[0]
    assert len(states) <= span / 0.9 + 2


def test_follow_returns_after_final_drain_of_lines_written_at_the_end(tmp_path):
    path = tmp_path / "job.log"
    path.write_text("start\n")
    ended = threading.Event()

    def state():
        if not ended.is_set():
            with open(path, "a") as fh:
                fh.write("last words\n")  # written just as the job ends
            ended.set()
            return JobState.FAILED
        return JobState.FAILED

    received = []
    assert (
        follow(LocalTransport(), str(path), state=state, write=received.append, poll_interval=0.01) is JobState.FAILED
    )
    assert "".join(received) == "start\nlast words\n"


def test_follow_state_queries_back_off_while_nothing_changes(tmp_path, monkeypatch):
    calls = []
    stop = threading.Event()
    threading.Timer(2.5, stop.set).start()

    def state():
        calls.append(time.monotonic())
        return JobState.QUEUED

    assert follow(
        LocalTransport(),
        str(tmp_path / "never.log"),
        state=state,
        write=print,
        poll_interval=0.05,
        stop=stop,
        poll=Backoff(0.1, POLL.factor, 1.0),
    )  # POLL, ten times faster is JobState.QUEUED
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert 5 <= len(calls) <= 9  # 0, .1, .25, .48, .81, 1.3, 2.1 s ... instead of 50 polls
    assert gaps[-1] > 3 * gaps[0] and max(gaps) < 1.0 + 0.2


def test_follow_asks_the_scheduler_at_once_when_the_job_wrote_its_exit_file(tmp_path):
    """The backed-off pace spares the scheduler while the job runs; once the job script has
    written its exit-code file, the follow asks at once instead of up to `poll.most` later."""
    log, exit_file = tmp_path / "job.log", tmp_path / "job.log.exitcode"
    log.write_text("training\n")
    calls = []

    def state():
        calls.append(time.monotonic())
        return JobState.DONE if exit_file.exists() else JobState.RUNNING

    threading.Timer(0.5, lambda: exit_file.write_text("0 job.sh\n")).start()
    started = time.monotonic()
    final = follow(
        LocalTransport(),
        str(log),
        state=state,
        write=lambda s: None,
        poll_interval=0.02,
        poll=Backoff(0.05, 100.0, 1000.0),  # asks at 0, 0.05, 5.05, 505 s ... while the job runs
        ended=exit_file.exists,
    )
    assert final is JobState.DONE
    assert time.monotonic() - started < 4.0, calls  # not at the next backed-off query, 5 s in
    assert len(calls) == 3  # 0, 0.05, and once the exit file was there


def test_follow_survives_a_failed_state_query_but_not_many(tmp_path, monkeypatch):
    path = tmp_path / "job.log"
    path.write_text("x\n")
    answers = iter([SchedulerError("qstat: timeout"), JobState.DONE])

    def flaky():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert (
        follow(
            LocalTransport(),
            str(path),
            state=flaky,
            write=lambda s: None,
            poll_interval=0.01,
            poll=Backoff(0.05, 1.5, 1.0),
        )
        is JobState.DONE
    )
    broken_calls = []

    def broken():
        broken_calls.append(1)
        raise SchedulerError("qstat: cannot connect to server")

    with pytest.raises(SchedulerError):
        follow(
            LocalTransport(),
            str(path),
            state=broken,
            write=lambda s: None,
            poll_interval=0.01,
            poll=Backoff(0.05, 1.5, 1.0),
        )
    assert len(broken_calls) == MAX_STATE_FAILURES


@pytest.mark.parametrize(
    "content,expected",
    [
        (None, None),
        (b"", None),
        (b"0\n", 0),
        (b"137", 137),
        (b"  1 \n", 1),
        (b"-1\n", -1),
        (b"garbage\n", None),
        (b"\x00\xff", None),
    ],
)
def test_read_exit_code(transport, tmp_path, content, expected):
    path = tmp_path / "job.exit"
    if content is not None:
        path.write_bytes(content)
    assert read_exit_code(transport, str(path)) == expected


def test_after_the_trainings_last_line_the_end_is_watched_at_the_logs_pace(tmp_path):
    """`ended()` is asked every `poll.first` seconds while the job trains; once the log holds the
    trainer's "training finished:" line, at every log poll: the eval and the ranks' exit take
    seconds, and a second's wait to notice the exit file was a third of the main job's end."""
    log, exit_file = tmp_path / "job.log", tmp_path / "job.log.exitcode"
    log.write_text("[hpc-train] step=1 loss=1\n")
    asked = []

    def ended():
        asked.append(time.monotonic())
        return exit_file.exists()

    def finish():
        with open(log, "a") as fh:
            fh.write("training finished: steps=1 wall_s=0.1 ended_at=1795680114.250\n")
        time.sleep(0.3)
        exit_file.write_text("0 job.sh 1795680115.000000\n")

    threading.Timer(0.3, finish).start()
    started = time.monotonic()
    final = follow(
        LocalTransport(),
        str(log),
        state=lambda: JobState.DONE if exit_file.exists() else JobState.RUNNING,
        write=lambda s: None,
        poll_interval=0.02,
        poll=Backoff(20.0, 1.5, 60.0),  # ended() every 20 s while the job trains
        ended=ended,
    )
    assert final is JobState.DONE
    assert time.monotonic() - started < 5.0, asked  # not at the next 20-s check
    assert len(asked) >= 5  # once at the start, then at the log's pace


@pytest.mark.parametrize(
    "content,expected",
    [("0 job.sh 1795680115.123456\n", 1795680115.123456), ("0 job.sh\n", None), ("0 job.sh x\n", None), ("", None)],
)
def test_the_exit_file_says_when_the_script_ended(tmp_path, content, expected):
    from hpc_launch.logs import read_exit_time

    path = tmp_path / "job.exit"
    path.write_text(content)
    assert read_exit_time(LocalTransport(), str(path)) == expected
    assert read_exit_time(LocalTransport(), str(tmp_path / "absent")) is None
    assert read_exit_code(LocalTransport(), str(path)) == (0 if content else None)  # the code reads as before


# ---- a live log (`tee -a NAME.oNUM.live`) an earlier job with the same name and number left ----


def _job_line(script: str) -> str:
    when = "2026-11-27T07:00:00+0900"
    return f"[hpc-launch] job 7.opbs on mg0001 at {when}, 1 node(s) x 4 rank(s), t=1.0, script {script}\n"


@pytest.mark.parametrize(
    "earlier",
    [
        "old step 1 loss 9\nold step 2 loss 8\n",  # no job line: an older hpc-launch, or not ours at all
        "old step 1 loss 9\nold step 2 lo",  # cut mid-line: this job's line lands on the same line
        _job_line("train-old.sh") + ("old step loss 9\n" * 70000),  # more than the first MiB read
    ],
)
def test_a_live_log_shows_nothing_before_this_jobs_own_line(tmp_path, earlier):
    from hpc_launch.transport import LocalTransport

    log = tmp_path / "train.o7.live"
    log.write_text(earlier)
    tail = LogTail(LocalTransport(), str(log), "train-new.sh")
    assert tail.read_new() == "" and not tail.exists  # only an earlier job's lines: not there yet
    with log.open("a") as fh:
        fh.write(_job_line("train-new.sh") + "new step 1\n")
    assert tail.read_new() == _job_line("train-new.sh") + "new step 1\n"
    with log.open("a") as fh:
        fh.write("new step 2\n")
    assert tail.read_new() == "new step 2\n"


def test_logs_of_a_job_whose_live_log_holds_an_earlier_job_first(tmp_path):
    from hpc_launch.jobs import read_whole_log
    from hpc_launch.records import JobRecord

    log = tmp_path / "train.o7.live"
    log.write_text("old step 1 loss 9\n" + _job_line("train-new.sh") + "new step 1\n")
    rec = JobRecord(
        job_id="7.opbs",
        cluster="miyabi",
        dialect="pbspro",
        host="localhost",
        name="train",
        workdir=str(tmp_path),
        script_path=str(tmp_path / ".hpc-launch" / "train-new.sh"),
        log_path=str(log),
        exit_path=str(tmp_path / "train.o7.exitcode"),
        submit_time=1.0,
    )
    assert read_whole_log(rec) == _job_line("train-new.sh") + "new step 1\n"


def test_the_waiting_line_counts_from_when_the_job_was_queued(monkeypatch, tmp_path):
    # seen on a real PBS server: `logs -f` of a job queued 57 s said "queued for 5 s"
    import sys
    import time

    import rich.console

    from hpc_launch import follow as follow_mod
    from hpc_launch.records import JobRecord, JobStore

    shown = []

    class Status:
        def update(self, text):
            shown.append(text)

        def start(self):
            pass

        def stop(self):
            pass

    class Console:
        def __init__(self, **kw):
            pass

        def status(self, text):
            return Status()

    def fake_follow(transport, path, *, state, on_wait, **kw):
        on_wait(5.0)  # the follow itself began 5 s ago
        return JobState.DONE

    store = JobStore(tmp_path / "jobs.sqlite")
    store.add(
        JobRecord(
            job_id="84.pbshead",
            cluster="pbs",
            dialect="pbspro",
            host="localhost",
            name="w",
            workdir=str(tmp_path),
            script_path=str(tmp_path / "w.sh"),
            log_path=str(tmp_path / "w.o84"),
            exit_path=str(tmp_path / "w.o84.exitcode"),
            submit_time=time.time() - 57,
            state="done",
            exit_code=0,
        )
    )
    monkeypatch.setattr(rich.console, "Console", Console)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(follow_mod, "follow", fake_follow)
    follow_mod.follow_job(store.get("84.pbshead", "pbs"), store=store)
    [line] = [text for text in shown if "queued for" in text]
    assert "queued for 57 s" in line or "queued for 58 s" in line, line
