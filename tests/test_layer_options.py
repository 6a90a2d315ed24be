"""--no-preflight and --stop-signal (hpc_launch/spec.py): the variables every rank reads, in the
job script as --env values are (so each launcher hands them on), and a bad signal refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

REPO = Path(__file__).resolve().parents[1]


def _script(**given) -> str:
    spec = JobSpec(cluster="slurm", nodes=2, script="mine.py", workdir="/work/p", **given)
    return render(resolve(spec, profiles.load("slurm"), cwd="/work/p"), stamp="20260101-000000-000").text


def test_the_gate_is_on_and_usr1_the_default_unless_asked():
    text = _script()
    assert "HPC_LAUNCH_PREFLIGHT" not in text and "HPC_LAUNCH_STOP_SIGNAL" not in text


@pytest.mark.parametrize("given,name", [("usr2", "SIGUSR2"), ("SIGHUP", "SIGHUP"), (" xcpu ", "SIGXCPU")])
def test_no_preflight_and_the_stop_signal_reach_the_ranks_environment(given, name):
    text = _script(preflight=False, stop_signal=given)
    assert "export HPC_LAUNCH_PREFLIGHT=0\n" in text
    assert f"export HPC_LAUNCH_STOP_SIGNAL={name}\n" in text


@pytest.mark.parametrize("bad", ["KILL", "STOP", "TERM", "INT", "9", "USR3", ""])
def test_a_signal_a_rank_cannot_stop_on_is_refused_with_the_choices(bad):
    if bad == "":
        with pytest.raises(SpecError, match="--stop-signal is empty"):
            from hpc_launch.spec import spec_from

            spec_from({}, {"stop_signal": ""})
        return
    with pytest.raises(SpecError, match=r"use one of USR1, USR2, HUP, URG, XCPU"):
        _script(stop_signal=bad)


def test_the_command_line_options_reach_the_script():
    r = subprocess.run(
        [sys.executable, "-c", "from hpc_launch.cli import main; main()", "submit", "-c", "slurm",
         "--script", "mine.py", "--dry-run", "--no-preflight", "--stop-signal", "USR2"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "export HPC_LAUNCH_PREFLIGHT=0\n" in r.stdout and "export HPC_LAUNCH_STOP_SIGNAL=SIGUSR2\n" in r.stdout
