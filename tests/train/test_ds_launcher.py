"""hpc_launch.ds_launcher: DeepSpeed's single-node launcher, ended as soon as it returns. What the
ranks print reaches the log, a failing rank's code is the job's, and success is 0."""

from __future__ import annotations

import subprocess
import time

import pytest

from ds_launch import child_env, launcher_cmd

pytestmark = pytest.mark.train


def _launch(tmp_path, body: str):
    rank = tmp_path / "rank.py"
    rank.write_text(body)
    argv = launcher_cmd([str(rank)])
    return subprocess.run(argv, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=120)


def test_success_is_zero_and_every_line_is_there(tmp_path):
    # one write per line: print() writes its words one by one, and two ranks' words interleave
    line = "os.write(1, f\"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}\\n\".encode())"
    r = _launch(tmp_path, f"import os\n{line}\n")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    ranks = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
    assert ranks == ["rank 0 of 2", "rank 1 of 2"], r.stdout[-3000:]
    assert r.stdout.count("exits successfully") == 2  # the launcher's own log lines (stdout), flushed before it ends


def test_a_failing_ranks_code_is_the_launchers(tmp_path):
    r = _launch(tmp_path, "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(7)\ntime.sleep(30)\n")
    assert r.returncode == 7, r.stderr[-2000:]
    assert "exits with return code = 7" in r.stdout


def test_the_launcher_ends_at_once_after_its_last_rank(tmp_path):
    """DeepSpeed's loop looks at its ranks once a second and sleeps a second more after the last one
    ended (1-2 s at the end of every job); its sleeps now end when a rank exits."""
    rank = 'import os, time\nos.write(1, f"ended {time.time()}\\n".encode())\n'
    r = _launch(tmp_path, rank)
    returned = time.time()
    assert r.returncode == 0, r.stderr[-2000:]
    ended = [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("ended ")]
    assert len(ended) == 2, r.stdout[-2000:]
    assert returned - max(ended) < 0.9, returned - max(ended)  # before: at least the final 1-s sleep
