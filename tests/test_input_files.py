"""Files the tool reads (issue 17): a project file, a profile or a template override that is a
directory, a device, a FIFO or a YAML alias bomb is refused in one line naming the fix, never
skipped (the defaults would silently replace its values) and never read forever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inproc import run_cli

from envutil import scheduler_env_cleared

# a 9-level "billion laughs": 9**9 strings once its aliases are expanded, 600 bytes on disk
LAUGHS = "".join(
    ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10)]
)


def _submit(capsys, monkeypatch, work: Path, *args: str):
    """`hpc-launch submit --dry-run ARGS` in `work`, in this process: (exit code, stdout, stderr)."""
    from hpc_launch import cli, render

    monkeypatch.setattr(render, "_ENV", None)  # the template search path is this test's config dir
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "--dry-run", *args])
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def _refused(rc, out, err, *needles):
    assert rc == 2, (rc, out, err)
    assert out == "", "nothing may be printed (no script) when an input file is refused"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpc-launch: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def work(tmp_path):
    (tmp_path / "work" / ".git").mkdir(parents=True)  # the project file search stops here
    return tmp_path / "work"


@pytest.mark.parametrize("name", ["hpc-launch.yaml", ".hpc-launch.yaml"])
def test_a_project_file_that_is_a_directory_is_refused_not_skipped(work, capsys, monkeypatch, name):
    (work / name).mkdir()
    _refused(*_submit(capsys, monkeypatch, work), name, "is a directory", "rename or remove this one")


def test_a_project_file_that_is_a_dangling_link_is_refused_not_skipped(work, capsys, monkeypatch):
    (work / "hpc-launch.yaml").symlink_to(work / "moved-away.yaml")
    _refused(*_submit(capsys, monkeypatch, work), "hpc-launch.yaml", "No such file")


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling link"])
def test_a_template_override_that_is_not_a_file_is_refused_naming_it(work, capsys, monkeypatch, kind):
    override = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body" / "rendezvous.sh.j2"
    override.parent.mkdir(parents=True)
    if kind == "directory":
        override.mkdir()
    elif kind == "fifo":
        os.mkfifo(override)
    else:
        override.symlink_to(override.parent / "gone.j2")
    rc, out, err = _submit(capsys, monkeypatch, work)
    _refused(rc, out, err, f"template override {override} is", "remove it to use the shipped one")
    assert ("is a directory" in err) == (kind == "directory")


def test_a_regular_template_override_still_applies(work, capsys, monkeypatch):
    override = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body" / "rendezvous.sh.j2"
    override.parent.mkdir(parents=True)
    override.write_text("export MASTER_ADDR=mine MASTER_PORT=1\n")
    rc, out, err = _submit(capsys, monkeypatch, work)
    assert rc == 0, err
    assert "export MASTER_ADDR=mine MASTER_PORT=1" in out


# ---- what could hang or eat the memory runs in a child with a deadline and a memory cap ----------

_DRIVER = """
import json, sys, time
from pathlib import Path
from hpc_launch import project_config
from hpc_launch.site import profiles
from hpc_launch.errors import HpcLaunchError

for kind, path in json.loads(sys.argv[1]):
    start = time.perf_counter()
    try:
        profiles.load(None, profile_file=path) if kind == "profile" else project_config.load_project_config(Path(path))
        said = "loaded"
    except HpcLaunchError as exc:
        said = exc.one_line()
    except Exception as exc:  # MemoryError under the cap: this case fails, the next ones still run
        said = repr(exc)
    print(json.dumps([kind, path, said, time.perf_counter() - start]), flush=True)
"""


def _cap_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # an unbounded read fails fast here


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Each case's one-line error and seconds, from one child process (one interpreter start for all)."""
    tmp = tmp_path_factory.mktemp("inputs")
    os.mkfifo(tmp / "fifo.yaml")
    (tmp / "laughs.yaml").write_text(LAUGHS + "name: *l9\n")  # str(name) would build ~3 GB
    (tmp / "laughs-project.yaml").write_text(LAUGHS)
    (tmp / "big.yaml").write_text("# padding\n" * 110_000)
    cases = [("profile", str(tmp / "laughs.yaml")), ("project", str(tmp / "laughs-project.yaml"))] + [
        (kind, str(path))
        for path in ("/dev/zero", tmp / "big.yaml", tmp, tmp / "fifo.yaml")  # a FIFO's open blocks: last
        for kind in ("profile", "project")
    ]
    env = dict(scheduler_env_cleared(), HPC_LAUNCH_CONFIG_DIR=str(tmp / "config"), HPC_LAUNCH_NO_CACHE="1")
    try:
        r = subprocess.run(
            [sys.executable, "-c", _DRIVER, json.dumps(cases)],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            preexec_fn=_cap_memory,
        )
        stdout = r.stdout
    except subprocess.TimeoutExpired as exc:  # a case that hangs: the ones before it still count
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
    found = {}
    for line in stdout.splitlines():
        kind, path, said, seconds = json.loads(line)
        found[kind, path.replace(str(tmp), "TMP")] = (said, seconds)
    return found


@pytest.mark.parametrize(
    "kind, path, needle",
    [
        ("profile", "/dev/zero", "cannot read profile /dev/zero: is not a regular file"),
        ("profile", "TMP/fifo.yaml", "fifo.yaml: is not a regular file"),
        ("profile", "TMP/big.yaml", "big.yaml: is larger than 1024 KiB"),
        ("profile", "TMP", "is a directory"),
        ("project", "/dev/zero", "/dev/zero: cannot read the project config (is not a regular file"),
        ("project", "TMP/fifo.yaml", "fifo.yaml: cannot read the project config (is not a regular file"),
        ("project", "TMP/big.yaml", "cannot read the project config (is larger than 1024 KiB"),
        ("project", "TMP", "cannot read the project config (is a directory"),
    ],
)
def test_a_device_fifo_directory_or_huge_file_is_refused_at_once(outcomes, kind, path, needle):
    assert (kind, path) in outcomes, "the read never ended (or ran out of memory)"
    said, seconds = outcomes[kind, path]
    assert needle in said and "\n" not in said, said
    assert "(a profile is a small YAML file)" in said if kind == "profile" else "--config" in said
    assert seconds < 2


@pytest.mark.parametrize(
    "kind, path",
    [("profile", "TMP/laughs.yaml"), ("project", "TMP/laughs-project.yaml")],
)
def test_yaml_billion_laughs_is_refused_promptly(outcomes, kind, path):
    assert (kind, path) in outcomes, "the alias bomb was expanded (hung or ran out of memory)"
    said, seconds = outcomes[kind, path]
    assert "expands to more than 100000 values through aliases" in said and "write the values out" in said, said
    assert seconds < 2


def test_aliases_in_moderation_still_load(tmp_path):
    from hpc_launch.site import profiles

    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nextends: local\nenv: {A: &v '1', B: *v}\n")
    assert profiles.load(None, profile_file=str(path)).env["B"] == "1"


def test_the_cli_refuses_a_fifo_as_config_in_one_line(hpc_launch_bin, tmp_path):
    os.mkfifo(tmp_path / "cfg.yaml")
    r = run_cli(
        ["submit", "--config", str(tmp_path / "cfg.yaml"), "--dry-run"], env=scheduler_env_cleared(), cwd=tmp_path
    )
    _refused(r.returncode, r.stdout, r.stderr, "cfg.yaml: cannot read the project config (is not a regular file")


def test_config_dev_null_still_means_no_project_file(work, capsys, monkeypatch):
    (work / "hpc-launch.yaml").write_text("nodez: 2\n")  # would be refused if it were read
    rc, out, err = _submit(capsys, monkeypatch, work, "--config", "/dev/null")
    assert rc == 0, err
    assert out.startswith("#!")
