"""The face as a newcomer meets it: help that says what each option takes, no empty errors, the
same answer for the same question, and ids checked before they are recorded (issue 17)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli

COMMANDS = [
    "submit",
    "sweep",
    "tune",
    "logs",
    "status",
    "list",
    "adopt",
    "cancel",
    "doctor",
    "report",
    "hostfile",
    "announce",
    "plan",
    "completion",
    "clusters",
    "clusters show",
    "show",
    "hosts",
    "rerun",
    "where",
    "alloc",
    "run",
]


@pytest.fixture
def env(tmp_path):
    env = scheduler_env_cleared()
    env.update(
        HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"), HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), COLUMNS="200"
    )
    return env


def _run(bin_path, *args, env, cwd=None):
    """The command's answer (output, exit code): in this process, not a subprocess per call (tests/inproc.py)."""
    return run_cli(args, env=env, cwd=cwd)


def test_bare_hpc_launch_prints_the_help_and_no_empty_error(hpc_launch_bin, env):
    r = _run(hpc_launch_bin, env=env)
    assert "Usage: hpc-launch" in r.stdout + r.stderr
    assert "error" not in r.stderr


def test_the_help_checks_below_cover_every_command(hpc_launch_bin, env):
    text = _run(hpc_launch_bin, "--help", env=env).stdout
    listed = set(re.findall(r"^│ ([a-z][a-z-]*) ", text, re.M))
    assert listed and listed <= set(COMMANDS), sorted(listed - set(COMMANDS))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_says_what_it_takes(hpc_launch_bin, env, command):
    r = _run(hpc_launch_bin, *command.split(), "--help", env=env)
    assert r.returncode == 0, r.stderr
    options = [line for line in r.stdout.splitlines() if re.match(r"^│\s+(\*\s+)?--", line)]
    assert options, r.stdout
    for line in options:
        assert "<str>" not in line and "<int>" not in line and "<float>" not in line, line
        words = line.strip("│ *").split()
        # what is left once the option's names and its metavar (NAME, N, FILE) are taken away
        text = [w for w in words if not w.startswith("-") and not (w.isupper() and len(words) > 1 and w in words[:4])]
        assert text, f"`{command}` option without help text: {line}"
    usage = next(line for line in r.stdout.splitlines() if "Usage:" in line)
    assert not re.search(r"[\[{][a-z_]+[\]}]", usage), f"`{command}`: an argument named by its Python name: {usage}"


def test_a_short_option_means_one_thing_across_commands(hpc_launch_bin, env):
    seen: dict = {}
    for command in COMMANDS:
        text = _run(hpc_launch_bin, *command.split(), "--help", env=env).stdout
        for long_, short in re.findall(r"(--[a-z][a-z-]*)(?:,--[a-z-]+)?\s+(-[a-zA-Z])\b", text):
            seen.setdefault(short, set()).add({"--output": "--out"}.get(long_, long_))  # both: where it writes
    clashes = {s: sorted(longs) for s, longs in seen.items() if len(longs) > 1 and s != "-h"}
    assert not clashes, clashes


@pytest.mark.parametrize(
    "args, needle",
    [
        (["adopt", "", "-c", "slurm", "--workdir", "/w"], "is not a job id"),
        (["adopt", "1;id", "-c", "slurm", "--workdir", "/w"], "is not a job id"),
        (["adopt", "$(reboot)", "-c", "slurm", "--workdir", "/w"], "is not a job id"),
        (["adopt", "0", "-c", "local", "--workdir", "/w"], "not the id of a job on this machine"),
        (["adopt", "12", "-c", "slurm", "--workdir", "w/rel"], "not an absolute path"),
        (
            ["adopt", "12", "-c", "slurm", "--workdir", "/w", "--login", "-oProxyCommand=touch /tmp/x"],
            "not an ssh host alias",
        ),
    ],
)
def test_adopt_checks_what_it_records(hpc_launch_bin, env, tmp_path, args, needle):
    r = _run(hpc_launch_bin, *args, env=env)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    listed = _run(hpc_launch_bin, "list", "--json", env=env)
    assert listed.stdout.strip() in ("[]", ""), listed.stdout


def test_cancel_of_an_ended_job_answers_the_same_before_and_after_a_refresh(hpc_launch_bin, env, tmp_path):
    script = tmp_path / "quick.py"
    script.write_text("print('hi')\n")
    r = subprocess.run(  # a real job: its own process
        [hpc_launch_bin, "submit", "--cluster", "local", "--script", str(script), "--gpus-per-node", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    deadline = time.monotonic() + 120  # the job ends (seconds on a loaded machine); the record does not know yet
    while not (tmp_path / f"train.o{job}.exitcode").exists():
        assert time.monotonic() < deadline, "the one-line job never ended"
        time.sleep(0.1)
    first = _run(hpc_launch_bin, "cancel", job, env=env)  # finds out the job ended
    second = _run(hpc_launch_bin, "cancel", job, env=env)  # the record already says so
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    assert "had already ended" in first.stderr and "had already ended" in second.stderr


# ---- the commands by use, and tables that fit the terminal (issue 28) ------------------------


def test_the_help_lists_the_commands_by_use_submit_first(hpc_launch_bin, env):
    env["COLUMNS"] = "80"
    text = _run(hpc_launch_bin, "--help", env=env).stdout
    panels = re.findall(r"^╭─ (.+?) ─", text, re.M)
    assert panels == ["Options", "Run a job", "Follow a job", "Plan", "Inside an allocation", "Inside a job"], panels
    listed = re.findall(r"^│ ([a-z][a-z-]*) ", text, re.M)
    assert listed[:5] == ["submit", "sweep", "tune", "rerun", "status"], listed
    assert listed[-2:] == ["hostfile", "announce"]
    # every command sits in a panel of its use, none in typer's catch-all "Commands"
    assert sorted(listed) == sorted(c for c in COMMANDS if " " not in c)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_each_command_is_at_most_three_lines_in_the_help(hpc_launch_bin, env):
    env["COLUMNS"] = "80"
    text = _run(hpc_launch_bin, "--help", env=env).stdout
    lines: dict = {}
    command = None
    for line in text.splitlines():
        named = re.match(r"^│ ([a-z][a-z-]*) ", line)
        if named:
            command = named.group(1)
            lines[command] = 1
        elif command and re.match(r"^│ {5,}\S", line):
            lines[command] += 1
        else:
            command = None
    # report's and where's whole first paragraphs were 5-7 lines, broken mid-sentence
    assert lines and max(lines.values()) <= 3, lines


@pytest.mark.parametrize("columns", [80, 100])
def test_clusters_is_one_line_per_cluster_on_the_terminal_it_is_printed_on(hpc_launch_bin, env, columns):
    env["COLUMNS"] = str(columns)
    r = _run(hpc_launch_bin, "clusters", env=env)
    names = [
        row["name"] for row in __import__("json").loads(_run(hpc_launch_bin, "clusters", "--json", env=env).stdout)
    ]
    lines = r.stdout.rstrip("\n").splitlines()
    assert len(lines) == 1 + len(names), r.stdout  # at 80 columns the titles wrapped into ~47 lines
    assert all(len(line) <= columns for line in lines), r.stdout
    assert [line.split()[0] for line in lines[1:]] == names
    assert "retired" in next(line for line in lines if line.startswith("abci2 "))


# ---- --profile given more than once (issue 28) ------------------------------------------------


@pytest.fixture
def two_profiles(tmp_path):
    (tmp_path / "a.yaml").write_text("name: ca\nextends: local\ntitle: cluster A\n")
    (tmp_path / "b.yaml").write_text("name: cb\nextends: local\ntitle: cluster B\n")
    (tmp_path / "b2.yaml").write_text("name: cb\ntitle: cluster B2\n")  # alone not a profile: merged over b.yaml
    return tmp_path


def test_where_takes_every_profile_file(hpc_launch_bin, env, two_profiles):
    r = _run(
        hpc_launch_bin, "where", "-c", "ca,cb", "--profile", "a.yaml", "--profile", "b.yaml",
        env=env, cwd=two_profiles,
    )  # fmt: skip
    assert "unknown cluster" not in r.stdout + r.stderr  # the first file was dropped: "ca  refused: unknown cluster"
    assert re.search(r"^ca\b", r.stdout, re.M) and re.search(r"^cb\b", r.stdout, re.M), r.stdout + r.stderr


@pytest.mark.parametrize("path", ["fast", "typer"])
def test_submit_merges_profile_files_in_turn_and_asks_which_cluster_when_they_name_several(
    hpc_launch_bin, env, two_profiles, path
):
    dry_run = ["--dry-run"]
    if path == "typer":
        env["HPC_LAUNCH_NO_FAST"] = "1"
    run = _run(
        hpc_launch_bin, "submit", "-c", "cb", "--profile", "a.yaml", "--profile", "b.yaml", "--profile", "b2.yaml",
        *dry_run, env=env, cwd=two_profiles,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "for cluster B2 [cb]" in run.stdout  # b2.yaml over b.yaml
    both = _run(
        hpc_launch_bin, "submit", "--profile", "a.yaml", "--profile", "b.yaml", *dry_run, env=env, cwd=two_profiles
    )
    assert both.returncode != 0 and both.stdout == ""
    assert both.stderr.strip().splitlines() == [
        "hpc-launch: error: the --profile files name 2 clusters (ca, cb) (pick one with --cluster NAME)"
    ]


def test_clusters_show_names_every_profile_file_it_merged(hpc_launch_bin, env, two_profiles):
    r = _run(
        hpc_launch_bin, "clusters", "show", "cb", "--profile", "b.yaml", "--profile", "b2.yaml",
        env=env, cwd=two_profiles,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].endswith("local.yaml, b.yaml, b2.yaml")
    assert "title: cluster B2" in r.stdout and "dialect: none" in r.stdout


@pytest.mark.parametrize("command", ["sweep", "report", "doctor", "where", "completion"])
def test_a_commands_description_wraps_at_the_terminal_not_at_the_source_lines(hpc_launch_bin, env, command):
    env["COLUMNS"] = "80"
    text = _run(hpc_launch_bin, command, "--help", env=env).stdout
    head = [line.rstrip() for line in text.split("Usage:", 1)[1].split("╭", 1)[0].splitlines()[1:]]
    # a line is broken early when the next line's first word would have fitted on it (the source's
    # breaks left stubs such as " plan's memory" on a line of their own)
    early = [a for a, b in zip(head, head[1:]) if a.strip() and b.strip() and len(a) + 1 + len(b.split()[0]) < 80]
    assert not early, "\n".join(early)


@pytest.mark.parametrize("command", ["submit", "sweep", "where", "plan"])
def test_a_group_given_to_minus_g_as_grid_engine_sites_spell_it_is_pointed_to_minus_p(hpc_launch_bin, env, command):
    # ABCI 2.0 and TSUBAME 4.0 take the group as `qsub -g GROUP`; here -g is --gpus-per-node
    r = _run(hpc_launch_bin, command, "-c", "tsubame4", "-g", "tga-lab", env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert "'tga-lab' is not a number of GPUs; a group or project goes to -P/--group" in r.stderr
    assert r.stderr.count("\n") == 1


def test_clusters_at_80_columns_still_says_in_full_why_a_profile_is_broken(hpc_launch_bin, env, tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "abci.yaml").write_text("name: abci\nnode: {gpus: lots}\n")
    env.update(COLUMNS="80", HPC_LAUNCH_CLUSTERS_DIR=str(tmp_path / "p"))
    out = _run(hpc_launch_bin, "clusters", env=env).stdout
    assert re.search(r"^abci +- +- +- +broken ", out, re.M), out
    assert out.rstrip().splitlines()[-1] == f"abci: {tmp_path}/p/abci.yaml: key `node.gpus`: Expected `int`, got `str`"
