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


def test_the_short_option_table_is_sbatchs_own(testbed):
    """Each letter as the real sbatch takes it: with a value, without, or not at all."""
    from hpc_launch.dialects.slurm_options import SBATCH_SHORT_FLAGS, SBATCH_SHORT_WITH_VALUE

    for letter in string.ascii_letters:
        err = subprocess.run(
            ["sbatch", f"-{letter}"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
        said = err.stdout + err.stderr
        if "requires an argument" in said:
            assert letter in SBATCH_SHORT_WITH_VALUE, (letter, said)
        elif "invalid option" in said:
            assert letter not in SBATCH_SHORT_WITH_VALUE and letter not in SBATCH_SHORT_FLAGS, (letter, said)
        else:  # taken without a value: a flag, or -k whose value is optional
            assert letter in SBATCH_SHORT_FLAGS or letter == "k", (letter, said)


def test_sbatch_reads_attached_and_bundled_short_options_as_the_dialect_does(testbed):
    assert "invalid partition" in _sbatch("-pnosuch").stderr.lower()  # -p with its value attached
    assert "More processors requested than permitted" in _sbatch("-HN9999").stderr  # -H, then -N 9999
    assert "Invalid --no-kill specification" in _sbatch("-kN5").stderr  # -k's optional value is N5
