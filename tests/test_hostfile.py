"""`hpc-launch hostfile`: what we write must be what DeepSpeed's own hostfile reader accepts.

Every hostfile below is parsed by `deepspeed.launcher.runner._parse_hostfile` (the function
`deepspeed --hostfile` uses), for repeated (PBS mpiprocs), FQDN and Slurm-bracket node lists,
Grid Engine and Cobalt node files, host-level --include/--exclude, and the error paths.
Slurm bracket lists are also checked against `scontrol show hostnames` (works without a
controller) when it is on PATH. Node files are read by their content (one host per line,
DeepSpeed `host slots=N`, Grid Engine PE_HOSTFILE) whatever names them; an unreadable line is an
error, never a guessed host.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envutil import scheduler_env_cleared
from inproc import run_cli
from hpc_launch import dialects
from hpc_launch import hostfile as hf
from hpc_launch import nodelist as nl
from hpc_launch.errors import HostfileError

POLARIS = [
    "x3104c0s31b0n0.hsn.cm.polaris.alcf.anl.gov",
    "x3104c0s37b0n0.hsn.cm.polaris.alcf.anl.gov",
    "x3104c0s1b0n0.hsn.cm.polaris.alcf.anl.gov",
]

# Slurm hostlist -> expansion, written out by hand (and compared with scontrol below).
SLURM_LISTS = [
    ("n[1-3,07]", ["n1", "n2", "n3", "n07"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("gpu[01-02]-ib", ["gpu01-ib", "gpu02-ib"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("x,y[1-2]", ["x", "y1", "y2"]),
    ("r[1-2]n[09-10],login", ["r1n09", "r1n10", "r2n09", "r2n10", "login"]),
    ("gpu-[01-02],cpu7", ["gpu-01", "gpu-02", "cpu7"]),
    (
        "x3104c0s[31,37]b0n0.hsn.cm.polaris.alcf.anl.gov",
        ["x3104c0s31b0n0.hsn.cm.polaris.alcf.anl.gov", "x3104c0s37b0n0.hsn.cm.polaris.alcf.anl.gov"],
    ),
    # Slurm separates items by commas, spaces or TABs (src/common/hostlist.c)
    ("node1 node[2-5,12]", ["node1", "node2", "node3", "node4", "node5", "node12"]),
    ("a\tb[1-2],  c", ["a", "b1", "b2", "c"]),
]


@pytest.fixture(scope="module")
def ds_runner():
    """DeepSpeed's launcher module (heavy: torch + deepspeed), imported once for the module."""
    import deepspeed.launcher.runner as runner  # installed by scripts/setup-dev.sh

    return runner


@pytest.fixture(scope="module")
def ds_parse(ds_runner):
    """DeepSpeed's hostfile reader: text -> OrderedDict(host -> slots); ValueError if it refuses."""
    return lambda text: ds_runner._parse_hostfile(text.splitlines(keepends=True))


def _scontrol_hostnames(nodelist: str):
    """`scontrol show hostnames LIST` as a list, or None if scontrol says the list is invalid."""
    assert shutil.which("scontrol"), "scontrol is required: testbed/install.sh installs Slurm's client"
    r = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or "invalid hostlist" in (r.stderr + r.stdout).lower():
        return None
    return r.stdout.split()


def _cli(bin_, args, env_extra=None, cwd=None):
    env = scheduler_env_cleared()
    env.update(env_extra or {})
    return run_cli(["hostfile", *args], env=env, cwd=cwd)  # in-process (tests/inproc.py)


def _pbs_nodefile(path, hosts, per_host):
    # PBS Pro writes one line per MPI rank (mpiprocs), each host's lines together, in node order.
    path.write_text("".join(f"{h}\n" * per_host for h in hosts))
    return path


# ---------------------------------------------------------------------------------------------
# PBS node files: repeated hosts -> one line per host


def test_repeated_pbs_nodefile_one_line_per_host_in_order(tmp_path, ds_parse):
    hosts = ["r9n3", "r1n1", "r5n7", "r2n2"]  # not sorted: node rank must follow the file
    nodefile = _pbs_nodefile(tmp_path / "nodes", hosts, 8)
    text = hf.build(env={"PBS_NODEFILE": str(nodefile)}, prefer="pbspro")
    assert ds_parse(text) == OrderedDict((h, 8) for h in hosts)  # slots from the repeat count
    assert list(ds_parse(text)) == hosts


def test_slots_option_overrides_repeat_count(tmp_path, ds_parse):
    nodefile = _pbs_nodefile(tmp_path / "nodes", ["a", "b"], 8)
    assert ds_parse(hf.build(env={"PBS_NODEFILE": str(nodefile)}, slots=4)) == OrderedDict([("a", 4), ("b", 4)])


def test_uneven_repeats_keep_their_counts(tmp_path, ds_parse):
    (tmp_path / "nodes").write_text("a\na\nb\na\nc\nc\nc\n")  # a host's lines need not be adjacent
    assert ds_parse(hf.build(env={"PBS_NODEFILE": str(tmp_path / "nodes")})) == OrderedDict(
        [("a", 3), ("b", 1), ("c", 3)]
    )


def test_fqdn_hosts_survive_unchanged(tmp_path, ds_parse):
    nodefile = _pbs_nodefile(tmp_path / "nodes", POLARIS, 4)
    assert ds_parse(hf.build(env={"PBS_NODEFILE": str(nodefile)})) == OrderedDict((h, 4) for h in POLARIS)


def test_blank_lines_comments_and_crlf_are_ignored(tmp_path, ds_parse):
    (tmp_path / "nodes").write_bytes(b"# nodes\r\na\r\n\r\na\r\n  b  \r\n\n")
    assert ds_parse(hf.build(env={}, nodefile=str(tmp_path / "nodes"))) == OrderedDict([("a", 2), ("b", 1)])


def test_naive_sed_of_a_repeated_nodefile_is_refused_by_deepspeed(tmp_path, ds_parse):
    """Why we de-duplicate: `sed 's/$/ slots=8/' $PBS_NODEFILE` lists each host 8 times."""
    nodefile = _pbs_nodefile(tmp_path / "nodes", ["a", "b"], 8)
    if shutil.which("sed"):
        naive = subprocess.run(
            ["sed", "s/$/ slots=8/", str(nodefile)], capture_output=True, text=True, check=True
        ).stdout
    else:
        naive = "".join(f"{line} slots=8\n" for line in nodefile.read_text().splitlines())
    assert naive.count("a slots=8") == 8
    with pytest.raises(ValueError, match="multiple entries for a"):
        ds_parse(naive)
    assert ds_parse(hf.build(env={"PBS_NODEFILE": str(nodefile)}, slots=8)) == OrderedDict([("a", 8), ("b", 8)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hosts=st.lists(
        st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z0-9]{1,6}){0,3}", fullmatch=True),
        min_size=1,
        max_size=40,
        unique=True,
    ),
    per_host=st.integers(min_value=1, max_value=16),
)
def test_any_repeated_nodefile_round_trips_through_deepspeed(tmp_path, ds_parse, hosts, per_host):
    nodefile = _pbs_nodefile(tmp_path / "nodes", hosts, per_host)
    assert ds_parse(hf.build(env={"PBS_NODEFILE": str(nodefile)})) == OrderedDict((h, per_host) for h in hosts)


# ---------------------------------------------------------------------------------------------
# Slurm bracket lists


@pytest.mark.parametrize("nodelist, expected", SLURM_LISTS, ids=[n for n, _ in SLURM_LISTS])
def test_slurm_nodelist_expands_like_slurm(nodelist, expected, ds_parse):
    assert nl.expand_slurm_nodelist(nodelist) == expected
    text = hf.build(env={"SLURM_JOB_NODELIST": nodelist}, prefer="slurm", slots=4)
    assert ds_parse(text) == OrderedDict((h, 4) for h in expected)


@pytest.mark.parametrize("nodelist, expected", SLURM_LISTS, ids=[n for n, _ in SLURM_LISTS])
def test_slurm_nodelist_matches_scontrol(nodelist, expected):
    slurm = _scontrol_hostnames(nodelist)
    if slurm is None:
        # Slurm 22.05 refuses a suffix after the last bracket (`gpu[01-02]-ib`); newer ones accept
        # it. Only that case may differ; our expansion is checked by hand in the test above.
        assert "]" in nodelist and not nodelist.rstrip().endswith("]")
        return
    assert nl.expand_slurm_nodelist(nodelist) == slurm


def _range_text(draw_lo, width, length):
    lo = draw_lo
    hi = lo + length
    return f"{lo:0{width}d}" if length == 0 else f"{lo:0{width}d}-{hi:0{width}d}"


@st.composite
def slurm_hostlists(draw):
    items = []
    for _ in range(draw(st.integers(1, 3))):
        prefix = draw(st.from_regex(r"[a-z]{1,4}-?", fullmatch=True))
        width = draw(st.integers(1, 3))
        ranges = [
            _range_text(draw(st.integers(0, 10 ** (width - 1))), width, draw(st.integers(0, 3)))
            for _ in range(draw(st.integers(1, 3)))
        ]
        items.append(f"{prefix}[{','.join(ranges)}]" if draw(st.booleans()) else f"{prefix}{ranges[0].split('-')[0]}")
    return ",".join(items)


@settings(max_examples=40, deadline=None)
@given(nodelist=slurm_hostlists())
def test_random_slurm_nodelists_match_scontrol(nodelist):
    slurm = _scontrol_hostnames(nodelist)
    assert slurm is not None, f"scontrol refused {nodelist!r}"
    assert nl.expand_slurm_nodelist(nodelist) == slurm


@pytest.mark.parametrize("bad", ["n[1-2", "n1]", "n[1-2]]", "n[3-1]", "n[]", "n[a-b]", "n[1-2-3]"])
def test_malformed_slurm_nodelist_is_an_error(bad):
    with pytest.raises(HostfileError):
        nl.expand_slurm_nodelist(bad)


def test_hosts_option_takes_bracket_lists(ds_parse):
    # a plain split on "," would give hosts `n[1` and `3]`, which DeepSpeed would accept
    assert ds_parse(hf.build(env={}, hosts="n[1,3],m2, x", slots=2)) == OrderedDict(
        (h, 2) for h in ("n1", "n3", "m2", "x")
    )


def test_hosts_option_takes_space_separated_lists(ds_parse):
    # was one host `node1` with 6 slots: every item after the first space was lost
    assert ds_parse(hf.build(env={}, hosts="node1 node[2-3]", slots=2)) == OrderedDict(
        (h, 2) for h in ("node1", "node2", "node3")
    )


# ---------------------------------------------------------------------------------------------
# Node files are read by content, whatever names them

SAME_NODES = OrderedDict([("g0001", 4), ("g0007", 4), ("g0003", 4)])
CONTENTS = {
    "repeated": "".join(f"{h}\n" * 4 for h in SAME_NODES),
    "deepspeed": "".join(f"{h} slots=4\n" for h in SAME_NODES),
    "openmpi": "".join(f"{h} slots=4 max_slots=8\n" for h in SAME_NODES),
    "pe_hostfile": "".join(f"{h} 4 gpu@{h} UNDEFINED\n" for h in SAME_NODES),
}


# every variable a dialect reads as a node file (the registry's; Slurm's names a hostlist, not a file)
NODE_FILE_VARS = [
    var
    for d in dialects.all_dialects()
    if type(d).nodes_from_env is dialects.Dialect.nodes_from_env
    for var in d.nodefile_vars
]


def test_the_node_file_variables_are_the_registrys():
    assert NODE_FILE_VARS == ["PBS_NODEFILE", "PE_HOSTFILE", "SGE_JOB_HOSTLIST", "COBALT_NODEFILE"]


@pytest.mark.parametrize("where", [*NODE_FILE_VARS, "--nodefile"])
@pytest.mark.parametrize("kind", sorted(CONTENTS))
def test_node_file_formats_are_read_by_content(kind, where, tmp_path, ds_parse):
    (tmp_path / "nodes").write_text(CONTENTS[kind])
    if where == "--nodefile":
        text = hf.build(env={}, nodefile=str(tmp_path / "nodes"))
    else:
        text = hf.build(env={where: str(tmp_path / "nodes")})
    assert ds_parse(text) == SAME_NODES


def test_deepspeed_hostfile_as_nodefile_keeps_its_slots(tmp_path, ds_parse, hpc_launch_bin):
    """A DeepSpeed hostfile given as --nodefile used to become `host slots=1` per line."""
    hostfile = "# ours\nworker-1 slots=8\nworker-2 slots=2\n10.0.0.3 slots=4\n"
    (tmp_path / "ds").write_text(hostfile)
    r = _cli(hpc_launch_bin, ["--nodefile", str(tmp_path / "ds")])
    assert r.returncode == 0, r.stderr
    assert ds_parse(r.stdout) == ds_parse(hostfile) == OrderedDict([("worker-1", 8), ("worker-2", 2), ("10.0.0.3", 4)])


@pytest.mark.parametrize(
    "content, words",
    [
        ("node1 node[2-5,12]\n", "cannot read line 1"),  # a hostlist written into a file
        ("a slots=2\nb\n", "mixes formats"),
        ("a slots=2\nb slots=1\na slots=1\n", "lists a twice"),  # DeepSpeed refuses it too
        ("this is bad slots=1\n", "cannot read line 1"),
        ("a\nn[1-3]\n", "not a host name"),
        ("a:4\n", "not a host name"),
        ("a 2 gpu@a UNDEFINED\nb slots=2\n", "mixes formats"),
    ],
)
def test_unreadable_node_files_are_errors(content, words, tmp_path):
    (tmp_path / "nodes").write_text(content)
    for env, nodefile in (({}, str(tmp_path / "nodes")), ({"PBS_NODEFILE": str(tmp_path / "nodes")}, None)):
        with pytest.raises(HostfileError, match=re.escape(words)):
            hf.build(env=env, nodefile=nodefile)


# ---------------------------------------------------------------------------------------------
# Grid Engine and Cobalt


def test_pe_hostfile_slots_from_second_column(tmp_path, ds_parse):
    (tmp_path / "pe").write_text(
        "r1n1.abci.local 4 gpu@r1n1.abci.local UNDEFINED\n"
        "r3n2.abci.local 2 gpu@r3n2.abci.local UNDEFINED\n"
        "r1n1.abci.local 2 cpu@r1n1.abci.local UNDEFINED\n"  # a second queue on the same host adds up
    )
    text = hf.build(env={"PE_HOSTFILE": str(tmp_path / "pe")}, prefer="gridengine")
    assert ds_parse(text) == OrderedDict([("r1n1.abci.local", 6), ("r3n2.abci.local", 2)])
    assert ds_parse(hf.build(env={"PE_HOSTFILE": str(tmp_path / "pe")}, slots=4)) == OrderedDict(
        [("r1n1.abci.local", 4), ("r3n2.abci.local", 4)]
    )


def test_sge_job_hostlist(tmp_path, ds_parse):
    (tmp_path / "hl").write_text("g0001\ng0007\ng0003\n")
    text = hf.build(env={"SGE_JOB_HOSTLIST": str(tmp_path / "hl")}, prefer="gridengine", slots=4)
    assert ds_parse(text) == OrderedDict([("g0001", 4), ("g0007", 4), ("g0003", 4)])


def test_cobalt_nodefile(tmp_path, ds_parse):
    (tmp_path / "cobalt").write_text("thetagpu05\nthetagpu12\n")
    text = hf.build(env={"COBALT_NODEFILE": str(tmp_path / "cobalt")}, prefer="cobalt", slots=8)
    assert ds_parse(text) == OrderedDict([("thetagpu05", 8), ("thetagpu12", 8)])


def test_prefer_picks_the_named_scheduler(tmp_path):
    (tmp_path / "pbs").write_text("p1\n")
    env = {"PBS_NODEFILE": str(tmp_path / "pbs"), "SLURM_JOB_NODELIST": "s[1-2]"}
    assert hf.build(env=env, prefer="slurm", slots=1) == "s1 slots=1\ns2 slots=1\n"
    assert hf.build(env=env, prefer="pbspro", slots=1) == "p1 slots=1\n"
    with pytest.raises(HostfileError, match="COBALT_NODEFILE"):
        hf.build(env=env, prefer="cobalt")


class _Lsf(dialects.Dialect):
    """A scheduler added to the registry: one module plus one registry line."""

    name = "lsf"
    nodefile_vars = ("LSB_DJOB_HOSTFILE",)

    def parse_submit(self, out):
        return out.strip()

    def depend_flags(self, job_id):
        return ["-w", f"ended({job_id})"]

    def status_argv(self, job_ids):
        return ["bjobs", *job_ids]

    def parse_status(self, out, job_ids):
        return {}

    def cancel_argv(self, job_id):
        return ["bkill", job_id]


@pytest.fixture
def lsf_registered(monkeypatch):
    monkeypatch.setitem(dialects._DIALECTS, "lsf", _Lsf())


def test_node_lists_come_from_the_registry(lsf_registered, tmp_path, ds_parse):
    (tmp_path / "hosts").write_text("l1\nl1\nl2\nl2\n")
    env = {"LSB_DJOB_HOSTFILE": str(tmp_path / "hosts")}
    assert ds_parse(hf.build(env=env)) == OrderedDict([("l1", 2), ("l2", 2)])
    assert ds_parse(hf.build(env=env, prefer="lsf")) == OrderedDict([("l1", 2), ("l2", 2)])
    with pytest.raises(HostfileError) as err:
        hf.build(env={})
    for d in dialects.all_dialects():
        for var in d.nodefile_vars:
            assert var in str(err.value)


def test_from_choices_come_from_the_registry(lsf_registered, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hpc_launch.cli import app

    (tmp_path / "hosts").write_text("l1\n")
    monkeypatch.setenv("LSB_DJOB_HOSTFILE", str(tmp_path / "hosts"))
    runner = CliRunner()
    ok = runner.invoke(app, ["hostfile", "--from", "lsf"])
    assert ok.exit_code == 0 and ok.output == "l1 slots=1\n", ok.output
    refused = runner.invoke(app, ["hostfile", "--from", "none", "--hosts", "a"])  # no scheduler, no node list
    assert refused.exit_code == 2 and "lsf" in refused.output and "none" in refused.output


def test_hostfile_import_stays_light():
    """`hpc-launch hostfile` runs inside every job: the module pulls in no dialect or template code."""
    code = (
        "import sys, hpc_launch.hostfile; "
        "print(sorted(m for m in sys.modules if m.startswith(('hpc_launch.dialects', "
        "'jinja2', 'yaml', 'paramiko', 'xml'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert r.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# The plain-shell fallback in the job script must agree with `hpc-launch hostfile`


@pytest.mark.parametrize(
    "dialect, var, content",
    [
        ("pbspro", "PBS_NODEFILE", "b\nb\na\na\nc\nc\n"),
        ("cobalt", "COBALT_NODEFILE", "b\na\nc\n"),
        ("gridengine", "PE_HOSTFILE", "b 2 q@b UNDEFINED\na 2 q@a UNDEFINED\nc 2 q@c UNDEFINED\n"),
        ("slurm", "SLURM_JOB_NODELIST", None),
    ],
)
def test_shell_fallback_agrees(dialect, var, content, tmp_path, ds_parse):
    if dialect == "slurm":
        value = "b,a[1-2]"
    else:
        (tmp_path / "nodes").write_text(content)
        value = str(tmp_path / "nodes")
    env = scheduler_env_cleared()
    env[var] = value
    shell = dialects.get(dialect).nodelist_shell + " | awk -v n=4 '{print $1 \" slots=\" n}'"
    fallback = subprocess.run(
        ["bash", "-c", shell], capture_output=True, text=True, env=env, check=True, timeout=30
    ).stdout
    ours = hf.build(env=env, prefer=dialect, slots=4)
    assert ds_parse(fallback) == ds_parse(ours)
    assert len(ds_parse(ours)) == 3


# ---------------------------------------------------------------------------------------------
# --include / --exclude (host level, DeepSpeed syntax)


@pytest.mark.parametrize("include, exclude", [("c@a", None), ("b", None), (None, "b"), (None, "a@c"), ("a@a", None)])
def test_filters_match_deepspeeds_own(include, exclude, ds_parse, ds_runner):
    pool = OrderedDict([("a", 8), ("b", 8), ("c", 8), ("d", 8)])
    ours = ds_parse(hf.build(env={}, hosts=",".join(pool), slots=8, include=include, exclude=exclude))
    theirs = ds_runner.parse_inclusion_exclusion(pool, include or "", exclude or "")
    assert list(ours) == list(theirs)  # same hosts, same (node-list) order
    assert all(list(range(ours[h])) == theirs[h] for h in ours)


@pytest.mark.parametrize(
    "include, exclude, words",
    [
        ("a:0,1", None, "slot-level"),
        (None, "a@b:1", "slot-level"),
        ("zz", None, "not in the node list"),
        ("a", "b", "cannot be combined"),
        (None, "a@b@c@d", "empty"),
    ],
)
def test_filter_refusals(include, exclude, words):
    with pytest.raises(HostfileError, match=words):
        hf.build(env={}, hosts="a,b,c,d", slots=8, include=include, exclude=exclude)


# ---------------------------------------------------------------------------------------------
# -o FILE: atomic


def test_output_file_is_replaced_atomically(tmp_path, monkeypatch, ds_parse):
    target = tmp_path / "hostfile"
    target.write_text("old slots=1\n")
    seen = {}
    real_replace = os.replace

    def spy(src, dst):
        # at the moment of the rename: the reader still sees the old file, the new one is complete
        seen.update(src=src, dst=dst, old=target.read_text(), new=open(src).read())
        real_replace(src, dst)

    monkeypatch.setattr(hf.os, "replace", spy)
    hf.write_atomic(str(target), "a slots=8\nb slots=8\n")
    assert seen["old"] == "old slots=1\n" and seen["new"] == "a slots=8\nb slots=8\n"
    assert os.path.dirname(seen["src"]) == str(tmp_path)  # same directory: rename is atomic
    assert ds_parse(target.read_text()) == OrderedDict([("a", 8), ("b", 8)])
    assert os.listdir(tmp_path) == ["hostfile"]  # no temp file left


def test_failed_write_leaves_nothing(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(HostfileError, match="cannot write"):
        hf.write_atomic(str(tmp_path / "adir"), "a slots=1\n")  # rename onto a directory fails
    assert sorted(os.listdir(tmp_path)) == ["adir"] and os.listdir(tmp_path / "adir") == []


def test_cli_writes_output_file(tmp_path, hpc_launch_bin, ds_parse):
    nodefile = _pbs_nodefile(tmp_path / "nodes", POLARIS, 4)
    out = tmp_path / "hostfile"
    r = _cli(hpc_launch_bin, ["--from", "pbspro", "--slots", "4", "-o", str(out)], {"PBS_NODEFILE": str(nodefile)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
    assert ds_parse(out.read_text()) == OrderedDict((h, 4) for h in POLARIS)
    assert sorted(os.listdir(tmp_path)) == ["hostfile", "nodes"]


def test_cli_stdout(tmp_path, hpc_launch_bin, ds_parse):
    r = _cli(hpc_launch_bin, ["--from", "slurm"], {"SLURM_JOB_NODELIST": "gpu[01-02]-ib,x"})
    assert r.returncode == 0, r.stderr
    assert ds_parse(r.stdout) == OrderedDict([("gpu01-ib", 1), ("gpu02-ib", 1), ("x", 1)])


def test_cli_space_separated_slurm_nodelist(hpc_launch_bin, ds_parse):
    # used to give a one-host hostfile: `node1 slots=6`
    r = _cli(hpc_launch_bin, ["--from", "slurm", "--slots", "4"], {"SLURM_JOB_NODELIST": "node1 node[2-5,12]"})
    assert r.returncode == 0, r.stderr
    hosts = _scontrol_hostnames("node1 node[2-5,12]")
    assert ds_parse(r.stdout) == OrderedDict((h, 4) for h in hosts) and len(hosts) == 6


# ---------------------------------------------------------------------------------------------
# Errors through the CLI: exit 2, one line on stderr, nothing on stdout, no -o file left


# {empty}: a node file with no hosts; {missing}: a path that does not exist (both in tmp_path)
ERRORS = [
    ("no-env", [], {}, ["--nodefile", "--hosts"]),
    ("no-env-for-from", ["--from", "cobalt"], {"SLURM_JOB_NODELIST": "n1"}, ["COBALT_NODEFILE", "--nodefile"]),
    ("unbalanced-env", ["--from", "slurm"], {"SLURM_JOB_NODELIST": "n[1-2"}, ["unbalanced", "n[1-2"]),
    ("unbalanced-hosts", ["--hosts", "n1],n2"], {}, ["unbalanced"]),
    ("empty-nodefile", ["--nodefile", "{empty}"], {}, ["empty"]),
    ("empty-pbs", [], {"PBS_NODEFILE": "{empty}"}, ["empty"]),
    ("empty-hosts", ["--hosts", ","], {}, ["empty"]),
    ("missing-nodefile", ["--nodefile", "{missing}"], {}, ["{missing}", "--nodefile"]),
    ("missing-pbs", [], {"PBS_NODEFILE": "{missing}"}, ["{missing}", "$PBS_NODEFILE"]),
    ("slot-filter", ["--hosts", "a,b", "--include", "a:0"], {}, ["slot-level"]),
    ("bad-from", ["--from", "lsf", "--hosts", "a"], {}, ["--from", "lsf"]),
    ("zero-slots", ["--hosts", "a", "--slots", "0"], {}, ["--slots"]),
    ("hostlist-in-file", ["--nodefile", "{spaced}"], {}, ["cannot read line 2", "--nodefile"]),
    ("hostlist-in-pbs", [], {"PBS_NODEFILE": "{spaced}"}, ["cannot read line 2", "$PBS_NODEFILE"]),
    ("mixed-formats", ["--nodefile", "{mixed}"], {}, ["mixes formats"]),
]


@pytest.mark.parametrize("args, env, words", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_cli_error_is_one_line_exit_2(args, env, words, tmp_path, hpc_launch_bin):
    paths = {name: str(tmp_path / name) for name in ("empty", "missing", "spaced", "mixed")}
    (tmp_path / "empty").write_text("\n# nothing\n")
    (tmp_path / "spaced").write_text("# a hostlist pasted into a node file\nnode1 node[2-5,12]\n")
    (tmp_path / "mixed").write_text("a slots=2\nb\n")
    args = [a.format(**paths) for a in args]
    env = {k: v.format(**paths) for k, v in env.items()}
    before = sorted(os.listdir(tmp_path))
    out = tmp_path / "hostfile"
    r = _cli(hpc_launch_bin, [*args, "-o", str(out)], env, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpc-launch: error: "), r.stderr
    for word in words:
        assert word.format(**paths) in lines[0]
    assert sorted(os.listdir(tmp_path)) == before  # no hostfile, no temp file


# ---- issue 17: bounds a new user runs into ------------------------------------------------------


@pytest.mark.parametrize("slots", [0, -1, 4097, 10**9])
def test_slots_outside_1_to_4096_are_refused(slots):
    with pytest.raises(HostfileError, match=r"--slots must be from 1 to 4096"):
        hf.build(env={}, hosts="a,b", slots=slots)
    assert hf.build(env={}, hosts="a", slots=4096) == "a slots=4096\n"


def test_a_host_named_twice_in_hosts_is_refused_naming_it():
    with pytest.raises(HostfileError, match=r"host n2 is listed twice in --hosts"):
        hf.build(env={}, hosts="n[1-3],n2", slots=4)  # was `n2 slots=2`: a silent second slot


def test_a_huge_slurm_nodelist_is_one_line_exit_2_within_a_second(hpc_launch_bin):
    import time

    start = time.monotonic()
    _cli(hpc_launch_bin, ["--hosts", "n1"])  # the interpreter's own start, on this machine now
    startup = time.monotonic() - start
    start = time.monotonic()
    r = _cli(hpc_launch_bin, ["--from", "slurm"], {"SLURM_JOB_NODELIST": "n[1-99999999999]"})
    took = time.monotonic() - start - startup
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpc-launch: error: ") and "more than 100,000 hosts" in lines[0]
    assert took < 1.0, took  # bounded before expanding, not after building a list of 10^11 names


_LINES = st.sampled_from(["a", "ab", "b", "n-2.x", "", " ", "\r", "#c", "a slots=2", "x\x0by", "é", "\u2028", "h 4 q"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_LINES, st.integers(1, 3)), max_size=8), st.sampled_from(["", "\n", "\r\n"]))
def test_a_node_file_read_by_its_runs_gives_what_line_by_line_gives(lines, end):
    """count_host_text (runs of one line, issue 18) answers as count_hosts does, errors included."""
    from hpc_launch.nodelist import count_host_text, count_hosts

    text = "\n".join(line for line, times in lines for _ in range(times)) + end

    def outcome(count):
        try:
            return list(count().items())
        except HostfileError as exc:
            return str(exc)

    assert outcome(lambda: count_host_text(text, "f")) == outcome(lambda: count_hosts(text.splitlines(), "f"))
