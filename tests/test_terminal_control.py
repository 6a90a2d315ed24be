"""Terminal control sequences (ESC, OSC, C1) quoted from a scheduler or a bad-host reason never
reach the user's terminal (issue 33): one sanitiser, terminal.visible, at the display boundary."""

from __future__ import annotations

import time

import pytest

from hpc_launch import cli
from hpc_launch.records import JobRecord, JobStore

# an OSC that retitles the terminal, a CSI that clears the screen, a one-byte C1 CSI, a BEL
HOSTILE = "a\x1b]0;owned\x07b\x1b[2J\x1b[31mc\x9b31md\re"


def _no_control(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\x9b\r"), repr(text)


def test_the_sanitiser_keeps_text_and_shows_control_as_escapes():
    from hpc_launch.terminal import visible

    assert visible("plain\ttext\nline 2") == "plain\ttext\nline 2"
    assert visible(HOSTILE) == "a\\x1b]0;owned\\x07b\\x1b[2J\\x1b[31mc\\x9b31md\\x0de"


def test_a_schedulers_comment_in_status_is_shown_inert(tmp_path, monkeypatch, capsys):
    store = JobStore()
    rec = JobRecord("5", "slurm", "slurm", "localhost", "t", "/w", "/w/s.sh", "/w/t.o5", "/w/t.o5.x", time.time())
    rec.state, rec.comment = "done", f"Reason={HOSTILE}"
    store.add(rec)
    with pytest.raises(SystemExit):
        cli.main(["list"])
    out, err = capsys.readouterr()
    assert "owned" in out
    _no_control(out + err)


def test_a_bad_host_reason_is_shown_inert_by_hosts_and_the_summary(tmp_path, capsys):
    from hpc_launch.follow import summary_block
    from hpc_launch.states import JobState

    JobStore().add_bad_hosts("slurm", {"n3": f"preflight: {HOSTILE}"}, "5", 3600)
    with pytest.raises(SystemExit):
        cli.main(["hosts"])
    out, err = capsys.readouterr()
    assert "n3" in out
    _no_control(out + err)
    rec = JobRecord("5", "slurm", "slurm", "localhost", "t", "/w", "/w/s.sh", "/w/t.o5", "/w/t.o5.x", time.time())
    rec.extra = {"bad_hosts": {"n3": f"preflight: {HOSTILE}"}}
    from hpc_launch.terminal import visible

    _no_control(visible(summary_block(rec, "", JobState.FAILED, 78)))


def test_an_error_quoting_a_scheduler_is_one_inert_line(capsys):
    from hpc_launch.cli.printing import err, say

    err(f"sbatch refused the job: {HOSTILE}")
    say(f"the scheduler says: {HOSTILE}")
    got = capsys.readouterr().err
    _no_control(got)
    assert len(got.splitlines()) == 2
