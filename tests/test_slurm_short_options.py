"""sbatch's short options as its getopt reads them (issue 28): a value attached to the letter
(`-t99-00:00:00`, `-N9999`, `-pdebug`) or letters bundled before it (`-HN9999`) set the same
thing as `--time=`, `--nodes=`, `--partition=`, so they meet the same checks. The table was asked
of the real sbatch 22.05.8 on the testbed (slurm_options.py says how)."""

from __future__ import annotations

import pytest

from hpc_launch import dialects
from hpc_launch.dialects import slurm_options
from test_validation import _refusal


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("-t99-00:00:00", ["-t99-00:00:00", "use --walltime"]),
        ("-N9999", ["-N9999", "use --nodes"]),
        ("-pdebug", ["-pdebug", "use --queue"]),
        ("-HN9999", ["-HN9999", "use --nodes"]),  # -H (--hold) takes no value: N is the next option
        ("-vt=5", ["use --walltime"]),  # getopt's value is "=5"
        ("-Q -t 99:00:00", ["use --walltime"]),
    ],
)
def test_a_short_option_with_its_value_attached_meets_the_options_checks(line, words):
    said = _refusal(cluster="frontier", group="g1", directives=[line])
    for word in words:
        assert word in said, (word, said)


def test_sbatch_reads_a_word_of_short_options_as_getopt_does():
    read = slurm_options.short_options
    assert read("-N9999") == [("--nodes", "9999")]
    assert read("-HvN5") == [("--hold", None), ("--verbose", None), ("--nodes", "5")]
    assert read("-kN5") == [("--no-kill", "N5")]  # -k's value is optional: the rest is it (sbatch says so)
    assert read("-J") == [("--job-name", None)]  # the value is the next word
    assert read("--nodes=2") == [] and read("-") == [] and read("-f") == []  # not short options sbatch takes
    slurm = dialects.get("slurm")
    assert sorted(slurm.directive_keys("-HN9999")) == ["--hold", "--nodes"]
    assert slurm.directive_key("-pdebug") == "--partition"
    assert slurm.directive_key("-t 5") == "-t" and slurm.directive_key("-o x.log") == "-o"  # as before
    assert slurm.merge_directives(["--partition=batch", "--nodes=2"], ["-pdebug"]) == ["-pdebug", "--nodes=2"]


def test_other_short_options_still_pass():
    from hpc_launch.site import profiles
    from hpc_launch.spec import resolve, spec_from

    from hpc_launch.render import render

    spec = spec_from(
        {}, dict(cluster="frontier", workdir="/w", group="g1", directives=["-Jmine", "-Hk", "-dafterok:5"])
    )
    text = render(resolve(spec, profiles.load("frontier")), stamp="s").text
    assert "#SBATCH -Jmine" in text and "#SBATCH -Hk" in text and "#SBATCH -dafterok:5" in text
