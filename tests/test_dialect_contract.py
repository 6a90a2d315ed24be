"""The dialect contract (hpc_launch/dialects/base.py, `Dialect`): what the job's life relies on,
checked for every registered dialect and for a new one written as an outside contributor would."""

from __future__ import annotations

import abc
import re
import subprocess
import sys
from typing import List

import pytest

from hpc_launch import dialects, doctor
from hpc_launch.site import profiles
from hpc_launch import hostfile as hf
from hpc_launch.dialects import base
from hpc_launch.dialects.base import Dialect, last_matching_line
from hpc_launch.errors import HostfileError, ProfileError
from hpc_launch.jobs import run_submit
from hpc_launch.prepare import prepare
from hpc_launch.spec import JobSpec
from hpc_launch.transport import LocalTransport

SCHEDULERS = [d for d in dialects.all_dialects() if d.has_scheduler]


class StdinScheduler(Dialect):
    """An LSF-shaped dialect: `bsub < script`, `-W` is a run limit and not keyed by a resource."""

    name = "lsf-like"
    submit_program = "sh"
    script_on_stdin = True

    def parse_submit(self, out: str) -> str:
        return last_matching_line(out, r"^Job <(\d+)> is submitted", "bsub").group(1)

    def depend_flags(self, job_id: str) -> List[str]:
        return ["-w", f"ended({job_id})"]

    def status_argv(self, job_ids) -> List[str]:
        return ["bjobs", *job_ids]

    def parse_status(self, out, job_ids):
        return {}

    def cancel_argv(self, job_id: str) -> List[str]:
        return ["bkill", job_id]


def test_a_script_on_stdin_reaches_the_scheduler_on_stdin_and_not_in_argv(tmp_path):
    lsf = StdinScheduler()
    argv = lsf.submit_argv(
        ".hpc-launch/train-1.sh", submit_flags=["-c", "cat > got.sh; echo 'Job <7> is submitted to queue <normal>.'"]
    )
    assert ".hpc-launch/train-1.sh" not in argv
    job_id = run_submit(LocalTransport(), argv, str(tmp_path), lsf, script_text="#!/bin/bash\necho hi\n")
    assert job_id == "7"
    assert (tmp_path / "got.sh").read_text() == "#!/bin/bash\necho hi\n"


def test_a_dialect_that_takes_the_script_as_an_argument_gets_no_stdin(tmp_path):
    slurm = dialects.get("slurm")
    assert not slurm.script_on_stdin
    # `read` fails at once on an empty stdin: nothing was fed
    argv = ["sh", "-c", "if read line; then echo fed; else echo 5; fi"]
    assert run_submit(LocalTransport(), argv, str(tmp_path), slurm, script_text="#!/bin/bash\n") == "5"


@pytest.mark.parametrize("dialect", SCHEDULERS, ids=lambda d: d.name)
def test_a_held_submission_names_its_predecessor_and_keeps_the_script_last(dialect):
    argv = dialect.submit_argv(".hpc-launch/x.sh", submit_flags=["-N", "x"], depend_on="123.server")
    plain = dialect.submit_argv(".hpc-launch/x.sh", submit_flags=["-N", "x"])
    held = dialect.depend_flags("123.server")
    assert argv[-1] == ".hpc-launch/x.sh" and plain[-1] == ".hpc-launch/x.sh"
    assert any("123.server" in word for word in held)
    assert [w for w in argv if w not in held] == plain


@pytest.mark.parametrize("cluster", ["abci", "abci2", "slurm", "thetagpu"])
def test_each_chain_link_is_built_by_the_dialect_not_by_word_positions(cluster):
    prepared = prepare(
        JobSpec(cluster=cluster, nodes=1, group="g", chain=3, workdir="/w", venv="/v", login="local"), cwd="/w"
    )
    script = prepared.script
    link = script.link(3)
    assert link.script_name == script.script_name.replace(".sh", "-link3.sh")
    assert script.script_name not in link.text.replace(link.script_name, "")
    held = link.held_submit_argv("41")
    dialect = dialects.get(profiles.load(cluster).dialect)
    assert held[-1] == link.script_relpath
    assert all(flag in held for flag in dialect.depend_flags("41"))
    assert "# then link 3: " in prepared.submit_display()


def test_a_directive_key_is_the_dialects_own_rule():
    pbs, lsf = dialects.get("pbspro"), StdinScheduler()
    # PBS: `-W depend=` and `-W group_list=` are different directives; `-l walltime` replaces `-l walltime`
    assert pbs.directive_key("-W group_list=g") != pbs.directive_key("-W depend=afterany:1")
    assert pbs.merge_directives(["-l walltime=1:00:00", "-l select=1"], ["-l walltime=2:00:00"]) == [
        "-l walltime=2:00:00",
        "-l select=1",
    ]
    # an LSF run limit `-W 10:00` is one key, whatever its value: the user's replaces the default
    assert lsf.merge_directives(["-W 10:00", "-n 4"], ["-W 20:00"]) == ["-W 20:00", "-n 4"]


def test_slurm_keys_a_long_option_by_the_prefix_sbatch_reads_it_by():
    slurm = dialects.get("slurm")
    assert slurm.directive_key("--parti=big") == "--partition" and slurm.directive_keys("--ti=1") == ["--ti"]
    assert slurm.directive_key("--nod=1") == "--nod"  # ambiguous: sbatch refuses it itself
    assert slurm.directive_key("--time-m=5") == "--time-min" and slurm.directive_key("--time=5") == "--time"
    assert slurm.merge_directives(["--partition=batch", "--nodes=2"], ["--parti=debug"]) == [
        "--parti=debug",
        "--nodes=2",
    ]


def test_doctor_reads_each_schedulers_failure_wording_from_its_dialect():
    keys = {c.key for c in doctor.CAUSES}
    for d in dialects.all_dialects():
        for key, patterns in (d.failure_wording if d.supports(dialects.FailureWording) else {}).items():
            assert key in keys, f"{d.name}: {key} is no doctor cause"
            cause = next(c for c in doctor.CAUSES if c.key == key)
            for pattern in patterns:
                re.compile(pattern)
                assert pattern in cause.patterns
    assert doctor.diagnose("=>> PBS: job killed: walltime 65 exceeded limit 60\n").top.cause.key == "walltime"
    assert (
        doctor.diagnose(
            "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
        ).top.cause.key
        == "walltime"
    )


@pytest.mark.parametrize("dialect", dialects.all_dialects(), ids=lambda d: d.name)
def test_each_dialect_says_whether_it_can_validate_a_job_without_queueing_it(dialect):
    """`where` and `submit`'s check (hpc_launch/jobs/where.py) use the test command where there is
    one; a dialect without one does not carry the hook at all."""
    if not dialect.supports(dialects.TestSubmission):
        assert not hasattr(dialect, "test_submit_argv") and not hasattr(dialect, "test_submit_name")
        return
    argv = dialect.test_submit_argv("/tmp/x.sh", submit_flags=["-N", "x"])
    assert dialect.has_scheduler and dialect.test_submit_name.split()[0] == dialect.submit_program
    assert argv[-1] == "/tmp/x.sh" and argv[-3:-1] == ["-N", "x"]  # the job's own flags, the script last


def test_the_schedulers_that_validate_before_queueing_are_slurm_and_grid_engine():
    able = sorted(d.name for d in dialects.all_dialects() if d.supports(dialects.TestSubmission))
    assert able == ["gridengine", "slurm"]  # PBS Professional's and Cobalt's qsub have no such mode


# ---- the contract itself: required hooks abstract, the rest named capabilities ----------------

REQUIRED = {"parse_submit", "depend_flags", "status_argv", "parse_status", "cancel_argv"}


def test_the_required_hooks_are_abstract_and_each_says_what_it_must_do():
    assert Dialect.__abstractmethods__ == REQUIRED
    for hook in REQUIRED:
        assert (getattr(Dialect, hook).__doc__ or "").strip(), hook

    class Forgetful(Dialect):  # a new dialect that left out its cancel command
        def parse_submit(self, out):
            return out

        def depend_flags(self, job_id):
            return []

        def status_argv(self, job_ids):
            return []

        def parse_status(self, out, job_ids):
            return {}

    with pytest.raises(TypeError, match="cancel_argv"):
        Forgetful()


def test_every_capability_is_a_named_class_with_documented_hooks():
    for capability in base.CAPABILITIES:
        assert (capability.__doc__ or "").strip(), capability.__name__
        for hook in getattr(capability, "__abstractmethods__", ()):
            assert (getattr(capability, hook).__doc__ or "").strip(), f"{capability.__name__}.{hook}"
    # nothing optional left on the base class as a sentinel ("", None or () meaning "cannot")
    for capability in base.CAPABILITIES:
        own = {k for k in vars(capability) if not k.startswith("_")}
        assert not own & set(dir(Dialect)), f"{capability.__name__} hooks also on Dialect: {own & set(dir(Dialect))}"


# What each shipped scheduler can do: a change here is a change of behaviour, not of structure.
CAN = {
    "pbspro": {"Arrays", "StartEstimates", "FailureWording", "Allocation"},
    "gridengine": {"Arrays", "HostExclusion", "TestSubmission", "FailureWording", "Allocation"},
    "cobalt": set(),
    "slurm": {
        "Arrays",
        "HostExclusion",
        "PendingExclusion",
        "StartEstimates",
        "TestSubmission",
        "FailureWording",
        "ChainHandOff",
        "RestartNotice",
        "Allocation",
    },
    "none": {"FailureWording", "Allocation"},
}


@pytest.mark.parametrize("dialect", dialects.all_dialects(), ids=lambda d: d.name)
def test_each_dialect_claims_its_capabilities_and_gives_them_real_values(dialect):
    claimed = {c.__name__ for c in base.CAPABILITIES if dialect.supports(c)}
    assert claimed == CAN[dialect.name]
    if dialect.supports(dialects.Arrays):
        assert dialect.array_index_var and dialect.array_job_num_expr
        assert len(dialect.array_task_ids(_array_parent(dialect), 3)) == 3 and dialect.array_flags(3)
    if dialect.supports(dialects.HostExclusion):
        assert dialect.exclude_flags(["n1"]) and dialect.exclude_flags([]) == []
    if dialect.supports(dialects.PendingExclusion):
        assert dialect.exclude_pending_argv("7", ["n1"])
    if dialect.supports(dialects.FailureWording):
        assert dialect.failure_wording
    if dialect.supports(dialects.ChainHandOff):
        assert "()" in dialect.keep_dependents_off_shell  # a bash function
    if dialect.supports(dialects.RestartNotice):
        assert dialect.restarted_shell.strip()
    for hook in ("name", "title", "job_id_expr", "job_num_expr", "submit_program"):
        assert getattr(dialect, hook), hook
    if dialect.has_scheduler:
        assert dialect.directive_prefix and dialect.nodelist_shell and dialect.nodefile_vars


def _array_parent(dialect) -> str:
    return "16[].server" if dialect.name == "pbspro" else "16"


def test_a_capability_the_dialect_lacks_is_not_asked_for(monkeypatch):
    """Callers ask `supports`, never a sentinel: a Cobalt job with --exclude is refused by name."""
    from hpc_launch.errors import SpecError

    with pytest.raises(SpecError, match="Cobalt cannot keep a job off named hosts"):
        prepare(
            JobSpec(cluster="thetagpu", nodes=1, group="g", exclude=["n1"], workdir="/w", venv="/v", login="local"),
            cwd="/w",
        )


# ---- the registry: lazy, a broken module named and skipped, entry points ----------------------


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def test_the_registry_imports_a_dialect_only_when_asked_for_it():
    code = (
        "import sys\nfrom hpc_launch import dialects\n"
        "print((dialects.names(), dialects.scheduler_names()))\n"
        "print(sorted(m for m in sys.modules if m.startswith('hpc_launch.dialects.')))\n"
        "dialects.get('slurm')\n"
        "print(sorted(m for m in sys.modules if m.startswith('hpc_launch.dialects.')))\n"
    )
    out = _python(code).stdout.splitlines()
    assert out[0] == str(
        (["pbspro", "gridengine", "cobalt", "slurm", "none"], ["pbspro", "gridengine", "cobalt", "slurm"])
    )
    contract = ["hpc_launch.dialects.answers", "hpc_launch.dialects.base", "hpc_launch.dialects.capabilities"]
    assert out[1] == str(contract)
    assert out[2] == str(sorted(contract + [f"hpc_launch.dialects.slurm{m}" for m in ("", "_options", "_states")]))


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as a new process sees it (loaded dialects kept only for the built-ins)."""
    monkeypatch.setattr(dialects, "_DIALECTS", {k: v for k, v in dialects._DIALECTS.items() if k in dialects._BUILTIN})
    monkeypatch.setattr(dialects, "_BROKEN", {})
    monkeypatch.setattr(dialects, "_plugins", None)


def test_a_dialect_whose_module_fails_to_import_is_named_once_and_skipped(
    tmp_path, monkeypatch, capsys, fresh_registry
):
    (tmp_path / "typo_dialect.py").write_text("from hpc_launch.dialects.base import Dialect\nclass Typo(Dialect)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(dialects._BUILTIN, "typo", "typo_dialect:Typo")
    assert "typo" in dialects.names()
    loaded = [d.name for d in dialects.all_dialects()]
    assert loaded == ["pbspro", "gridengine", "cobalt", "slurm", "none"]
    dialects.all_dialects()
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "hpc-launch: warning: scheduler dialect 'typo' skipped (typo_dialect: SyntaxError: expected ':' "
        "(typo_dialect.py, line 2))"
    ]
    with pytest.raises(ProfileError, match="scheduler dialect 'typo' cannot be loaded .*SyntaxError"):
        dialects.get("typo")
    assert dialects.get("slurm").name == "slurm"  # every other dialect still works


def _site_distribution(root, module_text: str) -> None:
    """A tiny installed distribution (a real .dist-info) that ships a dialect by entry point."""
    (root / "site_lsf.py").write_text(module_text)
    info = root / "site_lsf-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: site-lsf\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hpc_launch.dialects]\nlsf = site_lsf:LSF\n")


SITE_LSF = """
from hpc_launch.dialects.base import Dialect


class LSF(Dialect):
    name = "lsf"
    title = "LSF"
    directive_prefix = "#BSUB"
    submit_program = "bsub"
    job_id_expr = "${LSB_JOBID:?not inside an LSF job}"
    job_num_expr = "${LSB_JOBID}"
    nodefile_vars = ("LSB_DJOB_HOSTFILE",)
    script_on_stdin = True

    def parse_submit(self, out):
        return out.split("<")[1].split(">")[0]

    def depend_flags(self, job_id):
        return ["-w", f"ended({job_id})"]

    def status_argv(self, job_ids):
        return ["bjobs", *job_ids]

    def parse_status(self, out, job_ids):
        return {}

    def cancel_argv(self, job_id):
        return ["bkill", job_id]
"""


def test_a_site_ships_a_dialect_by_entry_point(tmp_path, monkeypatch, fresh_registry):
    _site_distribution(tmp_path, SITE_LSF)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert dialects.names()[-1] == "lsf" and "lsf" in dialects.scheduler_names()
    assert dialects.get("lsf").title == "LSF"
    (tmp_path / "hosts").write_text("l1\nl1\nl2\n")
    assert hf.build(env={"LSB_DJOB_HOSTFILE": str(tmp_path / "hosts")}) == "l1 slots=2\nl2 slots=1\n"


def test_a_broken_site_dialect_leaves_every_other_command_working(tmp_path, hpc_launch_bin):
    """The real command line, a new process: a plugin whose module has a typo."""
    import os

    _site_distribution(tmp_path, SITE_LSF.replace("class LSF(Dialect):", "class LSF(Dialect)"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for key in [k for k in env if k.startswith(("SLURM_", "PBS_", "COBALT_", "SGE_", "LSB_"))]:
        env.pop(key)
    ok = subprocess.run(
        [hpc_launch_bin, "hostfile", "--from", "slurm"],
        env={**env, "SLURM_JOB_NODELIST": "n[1-2]"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "n1 slots=1\nn2 slots=1\n", "")
    refused = subprocess.run(
        [hpc_launch_bin, "hostfile", "--from", "lsf"], env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0
    assert "scheduler dialect 'lsf' cannot be loaded (site_lsf: SyntaxError" in refused.stderr
    for argv in (["submit", "-c", "local", "--dry-run"], ["status"], ["clusters"]):
        other = subprocess.run(
            [hpc_launch_bin, *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert other.returncode == 0, (argv, other.stderr)
        assert all(
            line.startswith("hpc-launch: warning: scheduler dialect 'lsf' skipped")
            for line in other.stderr.splitlines()
            if "lsf" in line
        )
    looked = subprocess.run([hpc_launch_bin, "hostfile"], env=env, capture_output=True, text=True, timeout=60)
    lines = looked.stderr.splitlines()
    assert lines[0].startswith("hpc-launch: warning: scheduler dialect 'lsf' skipped (site_lsf: SyntaxError")
    assert "no scheduler node list found" in looked.stderr and looked.returncode != 0


# ---- a node list that comes from a command (Flux: `flux hostlist`) --------------------------------


class CommandNodes(base.NodeListCommand, StdinScheduler):
    name = "fluxish"
    nodefile_vars = ()

    def nodelist_argv(self, env):
        return ["printf", env["FAKE_HOSTS"]] if "FAKE_JOBID" in env else None


def test_a_node_list_from_a_command_reaches_the_hostfile(monkeypatch):
    monkeypatch.setitem(dialects._DIALECTS, "fluxish", CommandNodes())
    env = {"FAKE_JOBID": "f1", "FAKE_HOSTS": "f1\\nf2\\nf2\\n"}
    assert hf.build(env=env) == "f1 slots=1\nf2 slots=2\n"
    assert hf.build(env=env, prefer="fluxish", slots=4) == "f1 slots=4\nf2 slots=4\n"
    with pytest.raises(HostfileError, match="fluxish's node-list command"):
        hf.build(env={})
    monkeypatch.setattr(CommandNodes, "nodelist_argv", lambda self, env: ["sh", "-c", "echo nope >&2; exit 3"])
    with pytest.raises(HostfileError, match=r"^`sh -c echo nope >&2; exit 3` exited 3: nope$"):
        hf.build(env={}, prefer="fluxish")


def test_capabilities_are_abstract_classes_or_plain_mixins():
    for capability in base.CAPABILITIES:
        assert isinstance(capability, type) and not issubclass(capability, Dialect)
        assert isinstance(capability, abc.ABCMeta) or not getattr(capability, "__abstractmethods__", None)
