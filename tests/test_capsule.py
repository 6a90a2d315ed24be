"""A job's capsule (hpc_launch/capsule.py): the job runs the code that was submitted, not what the
work dir holds when it starts, and each start records what it found where it ran.

Real jobs on `local` (the job script and DeepSpeed's launcher run here), real git, the real probe
run by two real Pythons with different packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inproc import run_cli

from envutil import scheduler_env_cleared
from hpc_launch import capsule, capsule_probe, capsule_read


def _tree(root: Path, files: dict) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_snapshot_takes_what_the_script_can_import_and_nothing_else(tmp_path):
    _tree(
        tmp_path,
        {
            "train.py": "import helper\n",
            "helper.py": "X = 1\n",
            "ds.json": "{}\n",
            "models/__init__.py": "",
            "models/net.py": "",
            "utils/data.py": "",  # a package, a namespace dir
            ".git/hooks/x.py": "",
            "__pycache__/helper.cpython-311.pyc": "",
            "venv/pyvenv.cfg": "",
            "venv/lib/site.py": "",
            "notes.md": "",
            "big.json": "x" * (capsule.MAX_CONFIG_BYTES + 1),
        },
    )
    files, whole = capsule.snapshot(str(tmp_path / "train.py"))
    assert whole
    assert files[0].rel == "train.py"  # the script first: the job runs code/<its name>
    assert sorted(f.rel for f in files) == [
        "ds.json",
        "helper.py",
        "models/__init__.py",
        "models/net.py",
        "train.py",
        "utils/data.py",
    ]


def test_a_script_among_too_many_files_is_taken_alone_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(capsule, "MAX_FILES", 5)
    _tree(tmp_path, {"train.py": "", **{f"m{i}.py": "" for i in range(10)}})
    files, whole = capsule.snapshot(str(tmp_path / "train.py"))
    assert not whole and [f.rel for f in files] == ["train.py"]

    from hpc_launch.prepare import prepare
    from hpc_launch.spec import JobSpec

    notes: list = []
    prepared = prepare(
        JobSpec(cluster="local", script=str(tmp_path / "train.py"), workdir=str(tmp_path / "w")), note=notes.append
    )
    assert len(prepared.uploads) == 1 and "imports the modules beside it from where they are" in notes[0]
    assert f"export PYTHONPATH={tmp_path}" in prepared.script.text  # ... and the job can still import them


def _submit(hpc_launch_bin, cwd: Path, *args: str) -> str:
    env = scheduler_env_cleared()
    env.update(
        HPC_LAUNCH_STATE_DIR=os.environ["HPC_LAUNCH_STATE_DIR"],
        HPC_LAUNCH_CONFIG_DIR=os.environ["HPC_LAUNCH_CONFIG_DIR"],
    )
    r = run_cli([*args], env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_a_job_runs_the_submitted_code_after_the_files_were_edited(hpc_launch_bin, tmp_path):
    code, work = tmp_path / "code", tmp_path / "work"
    # the script waits for the test's signal, then imports its neighbour: by then both files changed
    _tree(
        code,
        {
            "train.py": "import os, sys, time\n"
            "while not os.path.exists('go'):\n    time.sleep(0.05)\n"
            # one write per line: two ranks print at once
            "import helper\nline = f\"ran {sys.argv[0].split('/')[-1]} helper {helper.X} script v1\\n\"\n"
            "os.write(1, line.encode())\n",
            "helper.py": "X = 'submitted'\n",
        },
    )
    _git(code, "init", "-q")
    _git(code, "add", ".")
    _git(code, "commit", "-qm", "v1")
    (code / "helper.py").write_text("X = 'submitted'  # uncommitted\n")
    out = _submit(
        hpc_launch_bin,
        tmp_path,
        "submit",
        "--cluster",
        "local",
        "--script",
        "code/train.py",
        "--workdir",
        "work",
        "--name",
        "cap",
    )
    job = out.strip().splitlines()[0]
    (code / "helper.py").write_text("X = 'edited after submit'\n")
    (code / "train.py").write_text("print('the edited script ran')\n")
    (work / "go").touch()
    exit_file = work / f"cap.o{job}.exitcode"
    deadline = time.monotonic() + 90
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    log = (work / f"cap.o{job}").read_text()
    assert exit_file.read_text().split()[0] == "0", log[-2000:]
    assert log.count("ran train.py helper submitted script v1") == 2, log[-2000:]  # both ranks
    assert "edited" not in log

    shown = json.loads(_submit(hpc_launch_bin, tmp_path, "show", job, "--json"))
    m = shown["manifest"]
    assert m["code"]["kind"] == "snapshot" and m["code"]["source"] == str(code)
    assert {f["path"] for f in m["code"]["files"]} == {"train.py", "helper.py"}
    assert m["code"]["git"]["commit"] == _git(code, "rev-parse", "HEAD") and m["code"]["git"]["changed"] == [
        "helper.py"
    ]
    assert "+X = 'submitted'  # uncommitted" in (Path(shown["path"]) / "git.diff").read_text()
    assert m["profile"]["name"] == "local" and m["cluster"] == "local"
    [run] = shown["runs"]
    assert run["job_id"] == job and run["python"] == sys.version.split()[0]
    assert any(p.lower().startswith("hpc-launch==") for p in run["packages"])
    text = _submit(hpc_launch_bin, tmp_path, "show", job)
    assert (
        "code      2 file(s) from" in text and "1 file(s) changed: git.diff" in text and f"run 1     job {job}" in text
    )


def test_a_later_start_in_another_environment_names_what_changed(tmp_path):
    """The probe as the job runs it (a copy, by file path), by this venv's Python and then by a
    Python with other packages: the second start's log line names them."""
    probe = tmp_path / "probe.py"
    probe.write_text(capsule.probe_source())
    # another environment: a bare virtualenv of the same interpreter, none of this one's packages
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    other_python = str(tmp_path / "bare" / "bin" / "python")
    first = subprocess.run(
        [sys.executable, str(probe), str(tmp_path), "101"],
        capture_output=True,
        text=True,
        env={**os.environ, "HPC_LAUNCH_MODULES": "Currently Loaded Modules:\ncuda/12.4\nnccl/2.21\n"},
    )
    assert (
        first.returncode == 0
        and "capsule: job 101 recorded" in first.stdout
        and "modules cuda/12.4 nccl/2.21" in first.stdout
    )
    again = subprocess.run(
        [sys.executable, str(probe), str(tmp_path), "102"],
        capture_output=True,
        text=True,
        env={**os.environ, "HPC_LAUNCH_MODULES": "Currently Loaded Modules:\ncuda/12.4\nnccl/2.21\n"},
    )
    assert "job 102 runs what job 101 ran" in again.stdout
    moved = subprocess.run(
        [other_python, "-I", str(probe), str(tmp_path), "103"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HPC_LAUNCH_MODULES": "cuda/12.6\n"},
    )
    assert moved.returncode == 0, moved.stderr
    assert "warning: Python packages changed since job 101: -" in moved.stdout and "-torch==" in moved.stdout
    assert "modules changed since job 101: cuda/12.4 nccl/2.21 -> cuda/12.6" in moved.stdout
    assert "the shipped entrypoint's code differs from job 101's" in moved.stdout  # no hpc-launch there at all
    runs = [json.loads(line) for line in (tmp_path / capsule_probe.RUNS).read_text().splitlines()]
    assert [r["job_id"] for r in runs] == ["101", "102", "103"]


def test_packages_are_this_environments_names_and_versions_read_from_the_headers_alone():
    """What importlib.metadata says of each distribution, and a long description that repeats the
    fields (a README quoting a METADATA file) changes nothing."""
    from importlib import metadata

    expected = {f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]}
    assert capsule_probe.packages() == sorted(expected, key=str.lower) and "msgspec==" in " ".join(expected)
    text = "Metadata-Version: 2.1\nName: real-pkg\nVersion: 1.2.3\nSummary: x\n\nName: impostor\nVersion: 9\n"
    assert capsule_probe.name_and_version(text) == ("real-pkg", "1.2.3")
    assert capsule_probe.name_and_version("Name: crlf\r\nVersion: 2\r\n\r\nVersion: 9\r\n") == ("crlf", "2")
    assert capsule_probe.name_and_version("") == (None, None)


def test_a_capsule_that_is_gone_is_one_line_that_says_where_it_was(tmp_path):
    from hpc_launch.errors import SpecError
    from hpc_launch.records import JobRecord
    from hpc_launch.transport import LocalTransport

    rec = JobRecord(
        job_id="7",
        cluster="local",
        dialect="none",
        host="localhost",
        name="t",
        workdir=str(tmp_path),
        script_path=str(tmp_path / "t.sh"),
        log_path=str(tmp_path / "t.o7"),
        exit_path=str(tmp_path / "t.o7.exitcode"),
        submit_time=time.time(),
        state="done",
        extra={"capsule": str(tmp_path / "gone")},
    )
    with pytest.raises(SpecError, match=r"capsule .*/gone is gone"):
        capsule_read.load(rec, LocalTransport())
    rec.extra = {}
    with pytest.raises(SpecError, match="has no capsule"):
        capsule_read.load(rec, LocalTransport())


def test_a_private_file_beside_the_script_stays_private_in_the_capsule_and_is_named(tmp_path, monkeypatch):
    """A 0600 config beside --script (a token) must not become readable by others in the capsule,
    and the user is told, in one line, which files only they can read went along."""
    from hpc_launch.jobs import submit
    from hpc_launch.prepare import prepare
    from hpc_launch.spec import JobSpec

    _tree(tmp_path / "code", {"train.py": "import helper\n", "helper.py": "", "token.json": '{"t": "s3cr3t"}\n'})
    (tmp_path / "code" / "token.json").chmod(0o600)
    (tmp_path / "code" / "helper.py").chmod(0o640)
    _git(tmp_path / "code", "init", "-q")
    _git(tmp_path / "code", "add", ".")
    _git(tmp_path / "code", "commit", "-qm", "v1")
    (tmp_path / "code" / "token.json").write_text('{"t": "n3w-s3cr3t"}\n')  # the diff holds it now
    qsub = tmp_path / "bin" / "qsub"
    qsub.parent.mkdir()
    qsub.write_text("#!/bin/sh\necho 7.server\n")
    qsub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{qsub.parent}:{os.environ['PATH']}")
    (tmp_path / "w").mkdir()
    spec = JobSpec(
        cluster="abci",
        nodes=1,
        group="g1",
        script=str(tmp_path / "code" / "train.py"),
        workdir=str(tmp_path / "w"),
        login="local",
    )
    notes: list = []
    prepared = prepare(spec, note=notes.append)
    submit(prepared, sleep=lambda s: None)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "w").rglob("code/*")}
    assert modes == {"train.py": 0o644, "helper.py": 0o640, "token.json": 0o600}
    assert [n for n in notes if "token.json" in n] == [
        f"only you can read token.json beside --script: the job's capsule keeps it 0600 "
        f"(move it out of {tmp_path / 'code'} if the job does not need it)"
    ]
    diff = next((tmp_path / "w").rglob("git.diff"))
    assert "n3w-s3cr3t" in diff.read_text() and diff.stat().st_mode & 0o777 == 0o600
