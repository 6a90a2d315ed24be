"""A job the user made a PBS array (`submit --directive "-J 1-2"`): one record with the array's
id (`20[].pbshead`), while each subjob writes its own log and exit file (`NAME.o20.1`, 157 in
tests/golden/pbspro-observed). `logs` shows each subjob's log, headed; `logs ID[i]` one; `-f`
follows them in turn. The scheduler here is a fake `qstat` on PATH answering as the real server
does with job history off (142-143: the finished array is `Unknown Job Id`)."""

from __future__ import annotations

import os
import stat

import pytest

from hpc_launch import cli
from hpc_launch.records import JobRecord, JobStore
from pbs_fixtures import load

SCRIPT = "arr-20261127-0744.sh"


@pytest.fixture
def user_array(tmp_path, monkeypatch):
    """The array 20[] (-J 1-2), ended; both subjobs logged a line and wrote exit code 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    qstat = bin_dir / "qstat"
    off, unknown = load("142").err.strip(), load("143").err.strip()
    qstat.write_text(
        "#!/bin/sh\n"
        'last=""; for a in "$@"; do last=$a; done\n'
        'case " $* " in\n'
        f'  *" -x "*) echo "{off.replace("105.pbshead", "$last")}" >&2; exit 0 ;;\n'
        f'  *) echo "{unknown.replace("105.pbshead", "$last")}" >&2; exit 153 ;;\n'
        "esac\n"
    )
    qstat.chmod(qstat.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    (work / ".hpc-launch").mkdir(parents=True)
    (work / ".hpc-launch" / SCRIPT).write_text("#!/bin/bash\n#PBS -N arr\n#PBS -J 1-2\n#PBS -j oe\nset -e\n")
    for i in (1, 2):
        (work / f"arr.o20.{i}").write_text(
            f"[hpc-launch] job 20[{i}].pbshead on pbshead at 2026-11-27T07:44:00+0000, 1 node(s) x 1 rank(s), "
            f"t=1.0, script {SCRIPT}\nhello from task {i}\n"
        )
        (work / f"arr.o20.{i}.exitcode").write_text(f"0 {SCRIPT} 1795000000.5\n")
    store = JobStore()
    store.add(
        JobRecord(
            job_id="20[].pbshead",
            cluster="pbs",
            dialect="pbspro",
            host="localhost",
            name="arr",
            workdir=str(work),
            script_path=str(work / ".hpc-launch" / SCRIPT),
            log_path=str(work / "arr.o20"),
            exit_path=str(work / "arr.o20.exitcode"),
            submit_time=1.0,
            state="running",
            submit_argv=["qsub", "-N", "arr", "-j", "oe", f".hpc-launch/{SCRIPT}"],
        )
    )
    return work


def _cli(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        cli.main(list(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_logs_of_a_user_array_shows_each_subjob_headed(user_array, capsys):
    code, out, err = _cli(capsys, "logs", "20[]")
    assert code == 0, err
    assert out.splitlines() == [
        f"==> 20[1].pbshead: {user_array}/arr.o20.1 <==",
        f"[hpc-launch] job 20[1].pbshead on pbshead at 2026-11-27T07:44:00+0000, 1 node(s) x 1 rank(s), t=1.0, "
        f"script {SCRIPT}",
        "hello from task 1",
        f"==> 20[2].pbshead: {user_array}/arr.o20.2 <==",
        f"[hpc-launch] job 20[2].pbshead on pbshead at 2026-11-27T07:44:00+0000, 1 node(s) x 1 rank(s), t=1.0, "
        f"script {SCRIPT}",
        "hello from task 2",
    ]


def test_a_subjob_without_a_log_yet_says_so_in_its_place(user_array, capsys):
    (user_array / "arr.o20.1").unlink()
    (user_array / "arr.o20.2").write_text((user_array / "arr.o20.2").read_text() + "no newline at the end")
    code, out, err = _cli(capsys, "logs", "20[]")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == [f"==> 20[1].pbshead: {user_array}/arr.o20.1 <==", "(no log yet)"]
    assert out.endswith("hello from task 2\nno newline at the end\n")


def test_logs_of_one_subjob(user_array, capsys):
    code, out, err = _cli(capsys, "logs", "20[2]")
    assert code == 0, err
    assert out.endswith("hello from task 2\n") and "task 1" not in out


def test_logs_follow_of_a_user_array_follows_each_subjob(user_array, capsys):
    code, out, err = _cli(capsys, "logs", "-f", "--all", "20[]")
    assert code == 0, err
    assert out.index("hello from task 1") < out.index("hello from task 2")
    assert "task 1 of 2 is job 20[1].pbshead" in err and "task 2 of 2 is job 20[2].pbshead" in err
    assert "job 20[2].pbshead done with exit code 0" in err
    # and the array itself ended as its subjobs did
    assert JobStore().get("20[].pbshead", "pbs").state == "done"
    code, out, err = _cli(capsys, "status", "--json", "20[]")
    assert code == 0 and '"state": "done"' in out
