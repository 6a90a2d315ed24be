"""sbatch reads `#SBATCH --parti=big` as `--partition=big` (getopt_long takes any unambiguous prefix
of a long option): the Slurm dialect keys a directive the same way, from a table of sbatch's long
options. Here the real sbatch answers for both: the premise, and the table, letter by letter."""

from __future__ import annotations

import re
import string
import subprocess

import pytest

from hpc_launch.dialects.slurm_options import SBATCH_LONG_OPTIONS

pytestmark = [pytest.mark.scheduler, pytest.mark.beside]


def _sbatch(*args: str) -> subprocess.CompletedProcess:
    # --test-only first and the probed option last: an option that takes a value finds none and
    # is refused, so nothing is ever queued
    return subprocess.run(["sbatch", "--test-only", "--wrap=true", *args], capture_output=True, text=True, timeout=60)


def test_sbatch_reads_an_abbreviated_long_option_as_the_option(testbed):
    assert "invalid partition" in _sbatch("--parti=nosuch").stderr.lower()  # read as --partition
    assert _sbatch("--parti=debug").returncode == 0
    assert "ambiguous" in _sbatch("--nod=1").stderr  # --nodefile, --nodelist, --nodes


def test_the_dialects_table_is_sbatchs_own(testbed):
    for letter in string.ascii_lowercase:
        ours = {o for o in SBATCH_LONG_OPTIONS if o.startswith(letter)}
        err = _sbatch(f"--{letter}").stderr
        listed = re.search(r"possibilities: (.*)", err)
        if listed:
            assert set(re.findall(r"'--([a-z0-9-]+)'", listed.group(1))) == ours, letter
        elif "unrecognized option" in err:
            assert not ours, letter
        else:  # one option starts with the letter: sbatch took it (and found no value for it)
            assert len(ours) == 1, (letter, err)
