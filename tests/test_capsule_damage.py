"""A damaged capsule (issue 33): `show` and `rerun` name the damaged file and what to do instead,
never the last-resort "please report it" line. The capsule is a real local job's, copied and
damaged one way per case."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from hpc_launch import cli


@pytest.fixture(scope="module")
def real_capsule(tmp_path_factory):
    """A real `submit --cluster local` job's capsule (the job cancelled at once): its store and dir."""
    import sys

    base = tmp_path_factory.mktemp("capsule-damage")
    (base / "quick.py").write_text("print('ran')\n")
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(base / "state"), HPC_LAUNCH_CONFIG_DIR=str(base / "config"))
    bin_ = str(Path(sys.executable).parent / "hpc-launch")
    r = subprocess.run(
        [bin_, "submit", "-c", "local", "-g", "1", "--script", "quick.py", "--train-args", "--steps 3"],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    subprocess.run([bin_, "cancel", job], cwd=base, env=env, capture_output=True, timeout=120)
    [capsule] = (base / ".hpc-launch" / "capsules").iterdir()
    return base, job, capsule


def _damage_json(text: str, change) -> str:
    m = json.loads(text)
    change(m)
    return json.dumps(m)


DAMAGES = {
    "cut short": ("capsule.json", lambda t: t[: len(t) // 2]),
    "not text": ("capsule.json", lambda t: "\x00\x01\ufffd" * 40),
    "no object": ("capsule.json", lambda t: "[1, 2]"),
    "code not a mapping": ("capsule.json", lambda t: _damage_json(t, lambda m: m.update(code="snapshot"))),
    "files not a list": ("capsule.json", lambda t: _damage_json(t, lambda m: m["code"].update(files=7))),
    "a file without its path": ("capsule.json", lambda t: _damage_json(t, lambda m: m["code"]["files"][0].pop("path"))),
    "no name": ("capsule.json", lambda t: _damage_json(t, lambda m: m.pop("name"))),
    "chain not a number": ("capsule.json", lambda t: _damage_json(t, lambda m: m.update(chain="two"))),
    "train args not a list": ("capsule.json", lambda t: _damage_json(t, lambda m: m.update(train_args=5))),
    "huge": ("capsule.json", lambda t: t + " " * (17 << 20)),
}


def _point_at_copy(real_capsule, tmp_path, monkeypatch) -> tuple:
    """A copy of the real capsule, and the job's record pointed at it."""
    base, job, capsule = real_capsule
    copy = tmp_path / capsule.name
    shutil.copytree(capsule, copy)
    monkeypatch.setenv("HPC_LAUNCH_STATE_DIR", str(base / "state"))
    db = sqlite3.connect(str(base / "state" / "jobs.sqlite"))
    extra = json.loads(db.execute("SELECT extra FROM jobs WHERE job_id = ?", (job,)).fetchone()[0])
    db.execute("UPDATE jobs SET extra = ? WHERE job_id = ?", (json.dumps({**extra, "capsule": str(copy)}), job))
    db.commit()
    db.close()
    return job, copy


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("command", ["show", "rerun"])
def test_a_damaged_capsule_is_named_with_what_to_do(real_capsule, tmp_path, monkeypatch, capsys, damage, command):
    job, copy = _point_at_copy(real_capsule, tmp_path, monkeypatch)
    name, change = DAMAGES[damage]
    target = copy / name
    target.write_text(change(target.read_text()))
    argv = ["show", job] if command == "show" else ["rerun", job, "--dry-run"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code not in (0, None), err
    assert "please report" not in err and "Traceback" not in err, err
    assert str(target) in err and "damaged" in err, err
    assert "--script" in err or "logs" in err, err  # what to do instead
    assert len(err.strip().splitlines()) == 1, err


def test_unreadable_lines_of_the_runs_file_are_skipped(real_capsule, tmp_path, monkeypatch, capsys):
    job, copy = _point_at_copy(real_capsule, tmp_path, monkeypatch)
    run = {"job_id": job, "host": "h", "started_at": 0, "python": "3.11", "packages": []}
    (copy / "runs.jsonl").write_text(f'[1]\n"x"\n{{"cut\n{json.dumps(run)}\n')
    with pytest.raises(SystemExit) as exit_:
        cli.main(["show", job])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert f"run 1     job {job} on h" in out and "run 2" not in out, out
