"""Hostile values never change what a rendered script does.

Property: for any name, env value, training argument, script path or work dir, either the
input is refused with a one-line SpecError, or the script (a) is valid bash and (b) when run
with stub launchers, hands every value to the launcher byte for byte and runs nothing else.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

PAYLOADS = [
    "$(touch MARK)",
    "`touch MARK`",
    "; touch MARK",
    "' ; touch MARK ; '",
    '" ; touch MARK ; "',
    "\ntouch MARK\n",
    "$((1+1))",
    "${HOME}",
    "a b\tc",
    "--",
    "-x",
    "&& touch MARK",
    "| touch MARK",
    "> MARK",
    "\\",
    "'",
    '"',
    "$",
    "!",
    "*",
    "~",
    "#PBS -q evil",
    "\n#PBS -q evil",
]
HOSTILE_CHARS = "ab $`'\"\\;|&<>()\n\t*?~!#{}[]=-"

hostile = st.one_of(st.sampled_from(PAYLOADS), st.text(alphabet=HOSTILE_CHARS, min_size=0, max_size=24))

STUB = """#!/bin/bash
out="$STUB_OUT"
for a in "$@"; do printf '%s\\0' "$a"; done > "$out.argv"
printf '%s' "${CHECK_VAR-unset}" > "$out.env"
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    d = tmp_path_factory.mktemp("stubs")
    stub_text = {
        "hostname": "#!/bin/sh\necho stubhost\n",
        # `python -u -m hpc_launch.ds_launcher ...` (the local launch line) records its argv; any
        # other python call (the entrypoint's lookup) answers where the entrypoint is
        "python": STUB.replace(
            'out="$STUB_OUT"',
            'out="$STUB_OUT"\nif [ "${3-}" != hpc_launch.ds_launcher ]; '
            "then echo /site-packages/hpc_launch/train_entry.py; exit 0; fi",
        ),
    }
    for name, text in stub_text.items():
        p = d / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    (d / "venv" / "bin").mkdir(parents=True)
    (d / "venv" / "bin" / "activate").write_text("# a stand-in virtualenv: activation changes nothing\n")
    return d


def _run_local(spec: JobSpec, stubs: Path, tmp: Path):
    spec.venv = str(stubs / "venv")
    job = resolve(spec, profiles.load("local"), cwd=str(tmp))
    script = render(job, stamp="t").text
    path = tmp / "job.sh"
    path.write_text(script)
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_OUT": str(tmp / "stub"), "HPC_LAUNCH_JOB_ID": "7", "HOME": str(tmp)}
    run = subprocess.run(["bash", str(path)], cwd=tmp, env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    argv = (tmp / "stub.argv").read_bytes().split(b"\0")[:-1]
    return [a.decode() for a in argv], (tmp / "stub.env").read_text()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arg=hostile, value=hostile)
def test_train_args_and_env_values_arrive_verbatim(arg, value, stubs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inj")
    mark = tmp / "PWNED"
    arg, value = arg.replace("MARK", str(mark)), value.replace("MARK", str(mark))
    if "\0" in arg or "\0" in value:
        return
    spec = JobSpec(cluster="local", nodes=1, train_args=["--note", arg], env={"CHECK_VAR": value}, workdir=str(tmp))
    argv, env_seen = _run_local(spec, stubs, tmp)
    assert not mark.exists(), "an injected command ran"
    assert argv[-2:] == ["--note", arg]
    assert env_seen == value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=hostile)
def test_user_script_path_is_one_argument(script, stubs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inj")
    mark = tmp / "PWNED"
    script = script.replace("MARK", str(mark)) or "x.py"
    spec = JobSpec(cluster="local", nodes=1, script=script, train_args=[], workdir=str(tmp))
    argv, _ = _run_local(spec, stubs, tmp)
    assert not mark.exists()
    # `~` and `~/...` mean the home directory, as in the shell (the job's HOME is tmp here)
    expected = str(tmp) + script[1:] if script == "~" or script.startswith("~/") else script
    assert argv[-1] == expected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sub=st.text(alphabet="ab $`'\";&()*", min_size=1, max_size=12))
def test_hostile_workdir_is_entered_not_executed(sub, stubs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inj")
    work = tmp / sub.replace("/", "_")
    work.mkdir(exist_ok=True)
    spec = JobSpec(cluster="local", nodes=1, train_args=["ok"], workdir=str(work))
    argv, _ = _run_local(spec, stubs, work)
    assert argv[-1] == "ok"
    assert (work / "hostfile_7").read_text() == "localhost slots=2\n"


@settings(max_examples=80, deadline=None)
@given(name=hostile, group=hostile, queue=hostile, directive=hostile)
def test_directive_values_are_refused_or_stay_single_lines(name, group, queue, directive):
    spec = JobSpec(
        cluster="abci",
        nodes=1,
        name=name or "x",
        group=group or "g",
        queue=queue or None,
        directives=[directive] if directive else [],
        workdir="/w",
    )
    try:
        job = resolve(spec, profiles.load("abci"))
        text = render(job, stamp="t").text
    except SpecError as exc:
        assert "\n" not in str(exc)
        return
    # the only PBS directives are the header block, each one line, none injected
    lines = text.splitlines()
    end = next(i for i, l in enumerate(lines) if i > 0 and not l.startswith("#PBS"))
    header = lines[1:end]
    assert all(l.startswith("#PBS ") for l in header)
    assert not any(l.startswith("#PBS") for l in lines[len(header) + 1 :])
    assert "#PBS -q evil" not in text.replace("#PBS -q rt_HF", "")
