"""Bad hosts are named and avoided (issue 16): remembered per cluster with an expiry, excluded by
the schedulers that can say it (Slurm --exclude, Grid Engine's host request, the pods' list),
spare nodes where they cannot (PBS), and found from the job's own report or the scheduler's
words when the job ends."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from hpc_launch import protocol
from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.jobs.state import Outcome, store_outcome
from hpc_launch.prepare import prepare
from hpc_launch.records import JobRecord, JobStore
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve
from hpc_launch.states import JobState
from hpc_launch.transport import LocalTransport


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("HPC_LAUNCH_STATE_DIR", str(tmp_path / "state"))
    return JobStore()


def test_the_store_remembers_bad_hosts_per_cluster_until_they_expire(store):
    store.add_bad_hosts("slurm", {"n3": "hang", "n4": "preflight: eth0 down"}, "12", ttl_s=3600)
    store.add_bad_hosts("abci", {"a1": "node failure"}, "7", ttl_s=-1)  # already expired
    assert {b.host for b in store.bad_hosts("slurm")} == {"n3", "n4"}
    assert store.bad_hosts("abci") == []
    store.add_bad_hosts("slurm", {"n3": "straggler"}, "13", ttl_s=3600)  # seen again: the new word
    assert {b.host: b.reason for b in store.bad_hosts("slurm")}["n3"] == "straggler"
    assert store.forget_bad_hosts("slurm", ["n3"]) == 1
    assert [b.host for b in store.bad_hosts()] == ["n4"]


@pytest.mark.parametrize(
    "cluster, words",
    [
        ("slurm", ["--exclude=n3"]),
        ("abci2", ["-l", "h=!(n3)"]),
    ],
)
def test_a_remembered_bad_host_is_excluded_at_submission(store, cluster, words):
    store.add_bad_hosts(cluster, {"n3": "hang"}, "12", ttl_s=3600)
    notes: list = []
    prepared = prepare(JobSpec(cluster=cluster, nodes=2, group="g", login="local", workdir="/w"), note=notes.append)
    argv = prepared.script.submit_argv
    assert argv[-1].endswith(".sh")
    at = argv.index(words[0])
    assert argv[at : at + len(words)] == words
    assert notes and "n3 (hang, job 12)" in notes[0] and "hosts --forget" in notes[0]
    # a chain's later link is held by the dialect and keeps the exclusion
    assert words[0] in prepared.script.link(2).held_submit_argv("41")


def test_pbs_cannot_exclude_so_it_says_spares(store):
    store.add_bad_hosts("abci", {"a7": "hang"}, "12", ttl_s=3600)
    notes: list = []
    prepared = prepare(JobSpec(cluster="abci", nodes=2, group="g", login="local", workdir="/w"), note=notes.append)
    assert "a7" not in " ".join(prepared.script.submit_argv)
    assert "--spares" in notes[0]
    with pytest.raises(SpecError, match="cannot keep a job off named hosts"):
        prepare(JobSpec(cluster="abci", nodes=2, group="g", login="local", workdir="/w", exclude=["a7"]))


def test_pods_drop_an_excluded_host_from_their_list(store):
    store.add_bad_hosts("pods", {"pod2": "preflight: eth0 has no address"}, "5", ttl_s=3600)
    prepared = prepare(JobSpec(cluster="pods", hosts=["pod1", "pod2", "pod3"], login="local", workdir="/w"))
    assert prepared.job.hosts == ["pod1", "pod3"] and prepared.job.nodes == 2


def test_spares_are_allocated_and_checked_against_the_queue(store):
    job = prepare(JobSpec(cluster="abci", nodes=2, spares=1, group="g", login="local", workdir="/w")).job
    assert job.nodes == 2 and job.alloc_nodes == 3 and job.world_size == 2 * job.procs_per_node
    assert "select=3:" in render(job, stamp="s").text
    with pytest.raises(SpecError, match="srun launcher places ranks on every allocated node"):
        prepare(JobSpec(cluster="slurm", nodes=2, spares=1, login="local", workdir="/w"))
    with pytest.raises(SpecError, match="--spares must be a whole number"):
        prepare(JobSpec(cluster="abci", nodes=2, spares=-1, group="g", login="local", workdir="/w"))


def test_a_submit_learns_there_is_no_bad_host_without_opening_the_store(store, tmp_path):
    """The marker beside the store says "no bad host" only while that is true: a submit then
    skips sqlite; an insert removes it first, forgetting the last host brings it back, and a store
    without it (written before it existed) is read as before."""
    import subprocess
    import sys

    from hpc_launch.paths import no_bad_hosts_marker, store_path
    from hpc_launch.prepare import remembered_bad_hosts

    marker = no_bad_hosts_marker(store_path())
    assert marker.exists() and remembered_bad_hosts("slurm") == []
    probe = (
        "import sys; from hpc_launch.prepare import remembered_bad_hosts as r; "
        "print(r('slurm'), 'sqlite3' in sys.modules)"
    )
    env = {**os.environ, "HPC_LAUNCH_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "False"]  # answered without sqlite
    store.add_bad_hosts("slurm", {"n3": "hang"}, "12", ttl_s=3600)
    assert not marker.exists() and [b.host for b in remembered_bad_hosts("slurm")] == ["n3"]
    store.add_bad_hosts("slurm", {"n4": "hang"}, "13", ttl_s=3600)
    store.forget_bad_hosts("slurm", ["n3"])
    assert not marker.exists()  # n4 is still remembered
    store.forget_bad_hosts("slurm")
    assert marker.exists() and remembered_bad_hosts("slurm") == []
    marker.unlink()  # a store an older hpc-launch wrote: read as before, and marked at its next open
    assert remembered_bad_hosts("slurm") == [] and marker.exists()


def test_expired_bad_hosts_are_dropped_and_the_marker_follows(store):
    from hpc_launch.paths import no_bad_hosts_marker, store_path

    store.add_bad_hosts("slurm", {"n3": "hang"}, "12", ttl_s=0.01)
    assert not no_bad_hosts_marker(store_path()).exists()
    time.sleep(0.05)
    JobStore()  # any later open
    assert no_bad_hosts_marker(store_path()).exists() and store.bad_hosts() == []


def _record(tmp: Path, dialect: str = "slurm") -> JobRecord:
    log = tmp / "train.o9"
    return JobRecord(
        job_id="9",
        cluster="slurm",
        dialect=dialect,
        host="localhost",
        name="train",
        workdir=str(tmp),
        script_path=str(tmp / ".hpc-launch" / "train-1.sh"),
        log_path=str(log),
        exit_path=str(log) + ".exitcode",
        submit_time=time.time(),
        state="running",
    )


def test_the_hosts_a_job_reported_are_remembered_when_it_ends(store, tmp_path):
    rec = _record(tmp_path)
    store.add(rec)
    line = protocol.report_bad_host(
        "n2", "preflight: eth0 has no IPv4 address", env={protocol.ENV_BAD_HOSTS: rec.bad_hosts_path}
    )
    assert line == "[hpc-launch] bad host: n2: preflight: eth0 has no IPv4 address"
    store_outcome(store, rec, Outcome(JobState.FAILED, 78), LocalTransport())
    assert [(b.host, b.reason, b.job_id) for b in store.bad_hosts("slurm")] == [
        ("n2", "preflight: eth0 has no IPv4 address", "9")
    ]
    assert store.get("9", "slurm").extra["bad_hosts"] == {"n2": "preflight: eth0 has no IPv4 address"}


def test_a_node_failure_slurm_names_in_the_log_is_remembered(store, tmp_path):
    rec = _record(tmp_path)
    store.add(rec)
    Path(rec.log_path).write_text("step 3\nsrun: error: Node failure on pod2\nsrun: error: pod2: task 1: Killed\n")
    store_outcome(store, rec, Outcome(JobState.FAILED, 1), LocalTransport())
    assert [b.host for b in store.bad_hosts("slurm")] == ["pod2"]


def test_a_job_that_ends_well_with_no_report_leaves_nothing(store, tmp_path):
    rec = _record(tmp_path)
    store.add(rec)
    Path(rec.log_path).write_text("srun: error: Node failure on pod2\n")  # a done job's log is not evidence
    store_outcome(store, rec, Outcome(JobState.DONE, 0), LocalTransport())
    assert store.bad_hosts() == []


# ---- the spares check, run for real in bash with a stand-in ssh ------------------------------


@pytest.fixture
def stubs(tmp_path):
    d = tmp_path / "stubs"
    d.mkdir()
    for name in ("mpirun",):
        (d / name).write_text("#!/bin/sh\necho launcher ran\n")
    # ssh HOST CMD: n2 does not answer; the others run the check
    (d / "ssh").write_text(
        '#!/bin/bash\nfor a in "$@"; do h=$prev; prev=$a; done\n'
        'host=$(for a in "$@"; do case $a in -*) ;; *) echo "$a";; esac; done | grep -E "^n[0-9]+$" | head -1)\n'
        '[ "$host" = n2 ] && exit 255\nexit 0\n'
    )
    (d / "python").write_text("#!/bin/sh\necho /site-packages/hpc_launch/train_entry.py\n")
    for f in d.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    (d / "venv" / "bin").mkdir(parents=True)
    (d / "venv" / "bin" / "activate").write_text("# stand-in\n")
    return d


def _run_spares_job(tmp_path, stubs, *, net_if=None, tried_last=(), env=None):
    """Render an abci (PBS) job with --nodes 2 --spares 1 on this host, n2 and n3, run it in bash
    with the stand-ins; (its output, the hosts it trained on)."""
    profile = profiles.load("abci")
    profile = msgspec.structs.replace(
        profile, modules=profiles.Modules(), net_if=net_if, python=msgspec.structs.replace(profile.python, modules=[])
    )
    job = resolve(
        JobSpec(
            cluster="abci", nodes=2, spares=1, workdir=str(tmp_path), venv=str(stubs / "venv"), group="g1", modules=[]
        ),
        profile,
    )
    if tried_last:
        job = msgspec.structs.replace(job, tried_last=list(tried_last))
    script = tmp_path / "job.sh"
    script.write_text(render(job, stamp="t").text)
    nodefile = tmp_path / "nodes"
    nodefile.write_text("".join(f"{h}\n" * 8 for h in (socket.gethostname(), "n2", "n3")))
    r = subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(tmp_path),
            "PBS_JOBID": "60.pbshead",
            "PBS_NODEFILE": str(nodefile),
            **(env or {}),
        },
    )
    assert "launcher ran" in r.stdout, r.stdout + r.stderr
    hostfile = (tmp_path / "hostfile_60").read_text().split()
    return r.stdout + r.stderr, [h for h in hostfile if "slots" not in h]


def test_spares_train_on_the_nodes_that_answer_and_report_the_others(tmp_path, stubs):
    out, trained = _run_spares_job(tmp_path, stubs)
    assert trained == [socket.gethostname(), "n3"]
    assert "[hpc-launch] bad host: n2: spares check" in out
    assert protocol.parse_bad_hosts_file((tmp_path / "train.o60.badhosts").read_text()).keys() == {"n2"}


@pytest.fixture
def link_stubs(stubs):
    """ssh runs the check here as host HOST; `ip` answers as each host's interface: on the host
    named in $LINK_DOWN the link is down but keeps its address (what `ip link set eth0 down` leaves)."""
    (stubs / "ssh").write_text(
        '#!/bin/bash\nfor a in "$@"; do case $a in n[0-9]*) host=$a;; esac; cmd=$a; done\n'
        '[ "$host" = "$UNREACHABLE" ] && exit 255\nHOST=$host exec bash -c "$cmd"\n'
    )
    (stubs / "ip").write_text(
        "#!/bin/bash\n"
        'flags="BROADCAST,MULTICAST,UP,LOWER_UP"\n'
        '[ "$HOST" = "$LINK_DOWN" ] && flags="BROADCAST,MULTICAST"\n'
        'case "$*" in\n'
        '  *link*) echo "2: eth0@if7: <$flags> mtu 1500 qdisc noqueue state DOWN";;\n'
        '  *addr*) echo "2: eth0    inet 10.200.0.12/24 brd 10.200.0.255 scope global eth0";;\n'
        "esac\n"
    )
    for f in (stubs / "ssh", stubs / "ip"):
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return stubs


def test_a_spare_replaces_a_node_whose_interface_is_down_though_it_keeps_its_address(tmp_path, link_stubs):
    """The spares check holds each node to the pre-flight gate's rule (up, with an address): the
    address alone passed a node the gate then failed, failing the job while the spare sat unused."""
    out, trained = _run_spares_job(tmp_path, link_stubs, net_if="eth0", env={"LINK_DOWN": "n2", "UNREACHABLE": "-"})
    assert trained == [socket.gethostname(), "n3"], out
    assert "[hpc-launch] bad host: n2: spares check: no answer over ssh with eth0 up" in out


def test_the_spares_check_holds_nodes_to_the_gates_interface_rule(tmp_path):
    """One rule: the shell check agrees with hpc_launch/train/preflight.interface_problem where both can run
    (lo is up and addressed; a missing interface fails both)."""
    from hpc_launch.train.preflight import interface_problem

    for name, ok in (("lo", True), ("hpcl-missing0", False)):
        r = subprocess.run(["bash", "-c", protocol.interface_ok_shell(name)], capture_output=True)
        assert (r.returncode == 0) is ok and (interface_problem(f"={name}") is None) is ok, name


def test_hosts_earlier_jobs_found_bad_are_taken_after_the_spare(tmp_path, link_stubs):
    env = {"LINK_DOWN": "-", "UNREACHABLE": "-"}
    out, trained = _run_spares_job(tmp_path, link_stubs, tried_last=["n2"], env=env)
    assert trained == [socket.gethostname(), "n3"], out
    # still taken when the others are too few: the spare (n3) does not answer
    out, trained = _run_spares_job(tmp_path, link_stubs, tried_last=["n2"], env={**env, "UNREACHABLE": "n3"})
    assert trained == [socket.gethostname(), "n2"], out
    # this node runs the rendezvous: it trains even if an earlier job found it bad
    out, trained = _run_spares_job(tmp_path, link_stubs, tried_last=[socket.gethostname()], env=env)
    assert trained == [socket.gethostname(), "n2"], out


def test_prepare_hands_a_pbs_spares_job_the_hosts_found_bad(store):
    store.add_bad_hosts("abci", {"a7": "hang"}, "12", ttl_s=3600)
    job = prepare(JobSpec(cluster="abci", nodes=2, spares=1, group="g", login="local", workdir="/w")).job
    assert job.tried_last == ["a7"]
    assert "HPC_LAUNCH_TRIED_LAST=' a7 '" in render(job, stamp="t").text


def test_the_summary_lists_the_hosts_kept_off_trained_on_and_found_bad(tmp_path):
    from hpc_launch.follow import summary_block

    rec = _record(tmp_path)
    rec.extra = {"excluded": ["n9"], "bad_hosts": {"n2": "spares check: no answer over ssh"}}
    text = summary_block(rec, "[hpc-launch] spares: training on n1 n3 (1 spare node(s) held)\n", JobState.DONE, 0)
    lines = text.splitlines()
    assert "kept off n9" in text and "training on n1 n3" in text and "found bad: n2 (spares check" in text
    assert lines[-1].startswith("  log ")


def test_the_summary_carries_the_gates_measure_and_the_stragglers(tmp_path):
    from hpc_launch.follow import summary_block

    log = (
        "[hpc-launch] preflight ok: 3 ranks on 3 hosts: ranks, threads, devices and interfaces as planned; "
        "all-reduce 4 MiB in 41.3 ms (0.14 GB/s bus, slowest pod2); gate 1.2 s\n"
        "[hpc-launch] straggler: rank 1 on pod2 is 2.3x slower than the median "
        "rank (its own data+forward 46 ms vs 20 ms per step; factor 1.5)\n"
    )
    text = summary_block(_record(tmp_path), log, JobState.DONE, 0)
    assert (
        "preflight 3 ranks on 3 hosts as planned in 1.2 s; all-reduce 4 MiB in 41.3 ms (0.14 GB/s bus, slowest pod2)"
        in text
    )
    assert "straggler: pod2 (rank 1, 2.3x slower than the median rank)" in text


def test_a_chain_links_kept_off_lines_are_read_back_per_job():
    log = (
        "[hpc-train] step=40 loss=1.0\n"
        f"{protocol.KEPT_OFF_PREFIX}pod2,pod3: job 812\n"
        f"{protocol.KEPT_OFF_PREFIX}x3001c0s13b0n0: job 813.polaris-pbs-01\n"
        "[hpc-launch] next link kept off : job 9\n"
    )  # no host: not a line of ours
    assert protocol.kept_off_in(log) == {"812": ["pod2", "pod3"], "813.polaris-pbs-01": ["x3001c0s13b0n0"]}


def test_only_a_slurm_chain_link_carries_the_hand_off_to_the_next_link():
    def script(cluster, **kw):
        kw.setdefault("walltime", "1h")
        job = resolve(JobSpec(cluster=cluster, nodes=2, workdir="/w", **kw), profiles.load(cluster), cwd="/w")
        return render(job, stamp="20260101-000000-000").text

    chained = script("slurm", chain=2)
    assert 'hpc_launch_keep_next_links_off "$HPC_LAUNCH_BAD_HOSTS"' in chained
    assert 'scontrol update JobId="$next" ExcNodeList="$hosts"' in chained
    assert "hpc_launch_keep_next_links_off" not in script("slurm")  # nothing waits for a lone job
    assert "hpc_launch_keep_next_links_off" not in script(
        "polaris", chain=2, group="datascience", queue="capacity"
    )  # PBS cannot exclude


def test_a_waiting_link_keeps_the_hosts_it_was_submitted_to_avoid(store, tmp_path):
    from fakes import FakeTransport
    from msgspec.structs import replace

    first = replace(_record(tmp_path), extra={"chain": "c1", "link": 1, "excluded": ["n5"]})
    later = replace(first, job_id="10", state="queued", extra={"chain": "c1", "link": 2, "excluded": ["n5"]})
    store.add(first)
    store.add(later)
    fake = FakeTransport()
    fake.files[first.bad_hosts_path] = b"n2\twatchdog: rank 1 hung\n"  # as hpc_launch/train/watchdog.py writes it
    store_outcome(store, first, Outcome(JobState.FAILED, 124), fake)
    assert ["scontrol", "update", "JobId=10", "ExcNodeList=n2,n5"] in fake.ran  # not n2 alone: --exclude n5 stays
    assert store.get("10", "slurm").extra["excluded"] == ["n2", "n5"]
