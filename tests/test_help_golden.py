"""`--help` of every command and subcommand, and the one-line errors of the fast path's commands,
byte for byte (issue 30: the option table must not change what a user reads). One process writes
them all at a fixed width; HPC_LAUNCH_UPDATE_GOLDEN=1 rewrites tests/golden/help/ (read the diff)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envutil import scheduler_env_cleared

GOLDEN = Path(__file__).parent / "golden" / "help"
UPDATE = os.environ.get("HPC_LAUNCH_UPDATE_GOLDEN") == "1"

# each command line is run through main() in the same process: its stdout, stderr and exit code
SUBMIT = ["submit", "--cluster", "abci", "--group", "g1", "--login", "local", "--dry-run"]
ERRORS = [
    ["hostfile", "--hosts", "a", "--slots", "0"],
    ["hostfile"],
    ["hostfile", "--hosts", "a", "--slots", "x"],
    ["hostfile", "--from", "nope"],
    ["hostfile", "--hots", "a"],
    ["submit", "--cluster", "nope", "--dry-run"],
    ["submit", "--cluster", "", "--dry-run"],
    [*SUBMIT, "--stage-data", "rel/dir"],
    [*SUBMIT, "--no-stage", "--stage-env"],
    [*SUBMIT, "-e", "NOEQUALS"],
    [*SUBMIT, "--train-args", "'unclosed"],
    [*SUBMIT, "--nodes", "two"],
    [*SUBMIT, "-g", "grp"],
    [*SUBMIT, "--nodez", "2"],
    [*SUBMIT, "--hosts", "n[3-1]"],
]

PROBE = r"""
import contextlib, io, json, sys
from hpc_launch.cli import main, _typer_app
from typer.main import get_command

def commands(group, prefix):
    for name in sorted(group.commands):
        sub = group.commands[name]
        yield prefix + [name]
        if hasattr(sub, "commands"):
            yield from commands(sub, prefix + [name])

def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return {"argv": argv, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}

errors = [run(argv) for argv in json.loads(sys.argv[1])]
helps = [run(["--help"])] + [run(argv + ["--help"]) for argv in commands(get_command(_typer_app()), [])]
sys.__stdout__.write(json.dumps({"help": helps, "errors": errors}))
"""


def _answers(tmp_path):
    env = scheduler_env_cleared()
    for key in list(env):
        if key.startswith("HPC_LAUNCH_") or key in ("NO_COLOR", "FORCE_COLOR", "TERM", "PYTHONPROFILEIMPORTTIME"):
            env.pop(key)
    env.update(
        COLUMNS="100",
        LINES="50",
        HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"),
        HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"),
    )
    argv = [sys.executable, "-c", PROBE, json.dumps(ERRORS)]
    r = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _text(answer) -> str:
    return f"$ hpc-launch {' '.join(answer['argv'])}\n[exit {answer['rc']}]\n{answer['stdout']}{answer['stderr']}"


def test_help_and_fast_path_errors_are_unchanged(tmp_path):
    answers = _answers(tmp_path)
    files = {}
    for answer in answers["help"]:
        name = "-".join(a for a in answer["argv"] if a != "--help") or "hpc-launch"
        files[f"{name}.txt"] = _text(answer)
    files["errors.txt"] = "\n".join(_text(a).replace(str(tmp_path), "TMP") for a in answers["errors"])
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (GOLDEN / name).write_text(text, encoding="utf-8")
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(files), "a command came or went: rewrite the goldens"
    for name, text in files.items():
        assert (GOLDEN / name).read_text(encoding="utf-8") == text, (
            f"{name} changed (HPC_LAUNCH_UPDATE_GOLDEN=1 to accept)"
        )
