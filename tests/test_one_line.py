"""hpc_launch.one_line: a rank's line in one write. Under `python -u` print() writes a line's text
and its newline in two calls, and two ranks writing to one stream (mpirun, srun and pdsh merge them)
glue each other's lines together; a CI run lost a rank's STAGE-PROBE line that way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from hpc_launch.one_line import say, say_ours

REPO = Path(__file__).resolve().parent.parent
WRITER = """
import sys
from hpc_launch.one_line import say
how, tag = sys.argv[1], sys.argv[2]
for i in range(2000):
    line = f"{tag} line {i} " + "x" * 60
    print(line, file=sys.stderr, flush=True) if how == "print" else say(line)
"""


def _two_ranks_on_one_pipe(how: str) -> list:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    read, write = os.pipe()
    ranks = [subprocess.Popen([sys.executable, "-u", "-c", WRITER, how, tag], stderr=write, env=env) for tag in "AB"]
    os.close(write)
    with os.fdopen(read) as merged:
        lines = merged.read().splitlines()
    assert [rank.wait(timeout=60) for rank in ranks] == [0, 0]
    return lines


def test_two_ranks_lines_on_one_stream_stay_whole():
    lines = _two_ranks_on_one_pipe("say")
    whole = re.compile(r"^[AB] line \d+ x{60}$")
    assert len(lines) == 4000 and all(whole.match(line) for line in lines), [x for x in lines if not whole.match(x)][:3]


def test_a_line_goes_out_in_one_write_after_what_the_stream_holds(tmp_path, monkeypatch):
    writes = []
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(bytes(data)) or real_write(fd, data))
    with open(tmp_path / "out", "w", encoding="utf-8") as stream:
        stream.write("pending ")  # held by the stream: it goes first
        say("a line: é", stream)
    assert writes == ["a line: é\n".encode()]
    assert (tmp_path / "out").read_text(encoding="utf-8") == "pending a line: é\n"


def test_a_stream_without_a_descriptor_gets_the_line_too(capsys):
    say_ours("note: captured")
    assert capsys.readouterr().err == "[hpc-launch] note: captured\n"
