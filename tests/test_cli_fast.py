"""The fast path of `hostfile` and `submit --dry-run` (hpc_launch/cli/fast.py, issue 18): the same
stdout, stderr and exit code as typer for every command line, typer itself only where the fast
parser is unsure, and no typer, click or rich imported when it is sure."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli

STAMP = re.compile(r"\d{8}-\d{6}-\d{3}")  # a dry-run's script name: the time it was rendered
# prints, at exit, which path ran: typer is imported exactly when the command line went to typer
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.__stderr__.write('PATH=%s\\n' % ('typer' if 'typer' in sys.modules else 'fast')))\n"
    "sys.argv[0] = 'hpc-launch'\n"
    "from hpc_launch.cli import main\n"
    "main(sys.argv[1:])\n"
)


@pytest.fixture
def env(tmp_path):
    env = scheduler_env_cleared()
    for key in list(env):
        if key.startswith("HPC_LAUNCH_") or key in ("PYTHONPROFILEIMPORTTIME",):
            env.pop(key)
    env.update(HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"), HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"))
    return env


def run(argv, env, cwd, fast=True):
    """(exit code, stdout, stderr, the path that ran). The fast path in a process of its own: whether it
    imported typer is the question. typer's own answer (HPC_LAUNCH_NO_FAST) in this one (tests/inproc.py):
    its imports are no question, and each of its starts cost a subprocess ~0.3 s."""
    if not fast:
        from hpc_launch.cli import fast as fast_module

        real, asked = fast_module.fast_runner, []
        fast_module.fast_runner = lambda args: asked.append(real(args)) or asked[-1]
        try:
            r = run_cli(argv, env=dict(env, HPC_LAUNCH_NO_FAST="1"), cwd=cwd)
        finally:
            fast_module.fast_runner = real
        path = "fast" if any(runner is not None for runner in asked) else "typer"
        return r.returncode, STAMP.sub("STAMP", r.stdout), STAMP.sub("STAMP", r.stderr), path
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    *err, path = r.stderr.splitlines(keepends=True)
    return r.returncode, STAMP.sub("STAMP", r.stdout), STAMP.sub("STAMP", "".join(err)), path.strip().split("=", 1)[1]


# (command line, the path the fast run takes, extra environment). {nodes}: a PBS node file.
SUBMIT = ["submit", "--cluster", "abci", "--group", "g1", "--login", "local"]
TABLE = [
    (["hostfile", "--hosts", "a,b", "--slots", "8"], "fast", {}),
    (["hostfile", "--hosts=n[1-3],m", "--slots=2"], "fast", {}),
    (["hostfile", "--slots", "2", "--slots", "3", "--hosts", "a"], "fast", {}),  # repeated: the last wins
    (["hostfile", "--hosts", "a", "--slots", " 4"], "fast", {}),  # int() takes the space, as click does
    (["hostfile", "--hosts", "a", "--slots", "\u0663"], "fast", {}),  # ARABIC-INDIC DIGIT THREE: int() reads it
    (["hostfile", "--hosts", "nœud1,b"], "fast", {}),
    (["hostfile", "--hosts", "-a"], "fast", {}),  # a value that starts with -: an error from the core
    (["hostfile", "-ib@c", "--hosts", "a,b,c"], "fast", {}),  # short option, value attached
    (["hostfile", "-x", "a", "--hosts", "a,b"], "fast", {}),
    (["hostfile", "--hosts", "a", "--slots", "0"], "fast", {}),  # the core's one-line error
    (["hostfile", "--hosts", "a", "--"], "fast", {}),
    (["hostfile", "--from", "pbspro", "--slots", "8"], "fast", {"PBS_NODEFILE": "{nodes}"}),
    (["hostfile", "--nodefile", "{nodes}"], "fast", {}),
    (["hostfile", "--cluster", "abci", "--hosts", "a,b"], "fast", {}),
    (["hostfile"], "fast", {}),  # no node list: the core's error
    (["hostfile", "--hosts", "a", "--slots", "x"], "typer", {}),  # not an int
    (["hostfile", "--from", "nope"], "typer", {}),  # a bad value (OptionError): typer's message
    (["hostfile", "--from"], "typer", {}),  # the value is missing
    (["hostfile", "--hots", "a"], "typer", {}),  # misspelled
    (["hostfile", "--host", "a"], "typer", {}),  # abbreviated
    (["hostfile", "--help"], "typer", {}),
    (["hostfile", "-h"], "typer", {}),
    (["hostfile", "--hosts", "a", "extra"], "typer", {}),
    (["hostfile", "--hosts", "a", "--", "extra"], "typer", {}),
    (
        ["hostfile", "--hosts", "a"],
        "typer",
        {"_HPC_LAUNCH_COMPLETE": "bash_complete", "COMP_WORDS": "hpc-launch ho", "COMP_CWORD": "1"},
    ),
    ([*SUBMIT, "--nodes", "9", "--dry-run"], "fast", {}),
    (
        [
            "submit",
            "-c",
            "abci",
            "-n2",
            "-P",
            "g1",
            "--login=local",
            "--dry-run",
            "-e",
            "A=1",
            "-e",
            "B=ü x",
            "--train-args",
            "--epochs 2 --note 'a b'",
            "-d",
            "-l place=scatter",
            "--name",
            "ü-job",
        ],
        "fast",
        {},
    ),
    ([*SUBMIT, "--dry-run", "--dry-run", "--walltime", "-1"], "fast", {}),  # a value starting with -
    ([*SUBMIT, "--dry-run", "--nodes", "-3"], "fast", {}),
    ([*SUBMIT, "--dry-run", "--name", "--help"], "fast", {}),  # an option's value, as click takes it
    (["submit", "--cluster", "nope", "--dry-run"], "fast", {}),  # the core's one-line error
    ([*SUBMIT, "--dry-run", "--stage-env", "--venv", "/v"], "fast", {}),
    ([*SUBMIT, "--dry-run", "--stage-data", "rel/dir"], "fast", {}),  # the core's one-line error
    ([*SUBMIT, "--dry-run", "--no-stage", "--stage-env"], "typer", {}),  # OptionError: typer's message
    ([*SUBMIT, "--dry-run", "-e", "NOEQUALS"], "typer", {}),
    ([*SUBMIT, "--dry-run", "--train-args", "'unclosed"], "typer", {}),
    ([*SUBMIT, "--dry-run", "--nodes", "two"], "typer", {}),
    ([*SUBMIT, "--dry-run", "--nodez", "2"], "typer", {}),
    ([*SUBMIT, "--dry-run", "-fa"], "typer", {}),  # bundled short flags
    ([*SUBMIT, "--dry-run=yes"], "typer", {}),
    ([*SUBMIT, "--dry-run", "-"], "typer", {}),
    (["submit", "--help"], "typer", {}),
    (["--version"], "typer", {}),
    ([], "typer", {}),
]


@pytest.mark.parametrize("argv,path,extra", TABLE, ids=[" ".join(row[0]) or "(none)" for row in TABLE])
def test_fast_and_typer_answer_alike(env, tmp_path, argv, path, extra):
    nodes = tmp_path / "nodes"
    nodes.write_text("".join(f"x{n:04d}c0s0b0n0\n" * 4 for n in range(50)))
    argv = [a.replace("{nodes}", str(nodes)) for a in argv]
    env.update({k: v.replace("{nodes}", str(nodes)) for k, v in extra.items()})
    fast = run(argv, env, tmp_path)
    full = run(argv, env, tmp_path, fast=False)
    assert full[3] == "typer"
    assert fast[3] == path, f"expected the {path} path: {fast}"
    assert fast[:3] == full[:3]


def test_a_dry_run_through_the_fast_path_prints_the_script(env, tmp_path):
    rc, out, err, path = run([*SUBMIT, "--nodes", "9", "--dry-run"], env, tmp_path)
    assert (rc, path) == (0, "fast"), err
    assert out.startswith("#!") and "#PBS" in out and "qsub" in err


def test_the_fast_path_imports_no_typer_click_or_rich(env, tmp_path):
    code = (
        "import sys; sys.argv[0] = 'hpc-launch'\n"
        "from hpc_launch.cli import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "heavy = ('typer', 'click', 'rich', 'shellingham', 'inspect')\n"
        "sys.__stderr__.write('IMPORTED=' + ' '.join(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    for argv, allowed in (
        (["hostfile", "--hosts", "a,b", "--slots", "8"], set()),
        # the core's own dataclasses import inspect; the face adds nothing
        ([*SUBMIT, "--nodes", "9", "--dry-run"], {"inspect"}),
    ):
        r = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=tmp_path, capture_output=True, text=True)
        imported = set(r.stderr.rsplit("IMPORTED=", 1)[1].split())
        assert imported <= allowed, f"{argv[0]}: {sorted(imported)}"


def test_the_fast_commands_are_built_from_the_rows_the_fast_path_reads():
    """The typer command and the fast parser read the same rows (hpc_launch/options.py): each
    typer option is its row's flags, multiplicity and default, and every row is of a kind the
    fast parser takes (no argument), so no generated copy can go stale."""
    from typer.main import get_command

    from hpc_launch import options
    from hpc_launch.cli import _typer_app
    from hpc_launch.cli.fast import FAST_COMMANDS, KINDS

    group = get_command(_typer_app())
    for name in FAST_COMMANDS:
        rows = list(options.of(name))
        assert all(row.kind in KINDS for row in rows), name
        params = group.commands[name].params  # type: ignore[attr-defined]
        typed = [(p.name, tuple(p.opts), bool(p.multiple), p.default, p.is_flag) for p in params]
        assert typed == [(r.name, r.flags, r.many, r.default, r.kind == "flag") for r in rows], name


def test_a_command_with_an_argument_goes_to_typer():
    from hpc_launch import options
    from hpc_launch.cli.fast import parse

    assert parse(list(options.of("rerun")), ["JOB"]) is None
    assert parse(list(options.of("rerun")), []) is None


def test_parse_follows_clicks_parser():
    from hpc_launch.cli.fast import parse

    from hpc_launch.options import Option

    params = [
        Option("n", ("--n", "-n"), "N", "", kind="int"),
        Option("e", ("--e", "-e"), "E", "", many=True),
        Option("f", ("--f", "-f"), None, "", kind="flag"),
    ]
    assert parse(params, []) == {"n": None, "e": [], "f": False}
    assert parse(params, ["-n3", "--e=a=b", "-e", "-x", "-f", "--n", "4"]) == {"n": 4, "e": ["a=b", "-x"], "f": True}
    assert parse(params, ["-e", "--"]) == {"n": None, "e": ["--"], "f": False}
    for unsure in (["-fn3"], ["--f=1"], ["--n"], ["--n", "x"], ["--nn", "3"], ["x"], ["--", "x"], ["-"], [""]):
        assert parse(params, unsure) is None, unsure
    assert os.environ.get("HPC_LAUNCH_NO_FAST") is None
