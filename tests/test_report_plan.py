"""The report's allocation plan (issue 19): a training planned in epochs, the chain of jobs it needs
on the queue it would use (checked against the site's limits, with the `submit` line to run), and
its charge in the site's own unit. The logs are written as the job script and the entrypoint write
them, the site is a profile the test writes; every expected number is computed here from the
figures put into the logs and that profile, and the real CLI writes the report."""

from __future__ import annotations

import csv
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from inproc import run_cli

pytestmark = pytest.mark.sweep

T0 = 1795426388  # 2026-11-23T09:33:08+0000: the prologue's time stamp
WALL_S = 0.8
MICRO, RANKS_PER_NODE = 8, 4
SET_SIZE = 1_281_167  # an ImageNet-sized training set
CONF = "zero=2 offload=none precision=fp32 micro_batch=8"
# samples/s per node count (4 nodes: 90% efficient, 8 nodes: 60%, so 4 is proposed at the 70% floor)
MEASURED = {1: [100.0, 104.0], 2: [196.0], 4: [360.0], 8: [480.0]}
STARTUP = {1: 40, 2: 52, 4: 61, 8: 90, 12: 70, 20: 80, 30: 95}  # prologue to first step, per node count (s)

SITE = """\
name: plansite
extends: abci
charge: {unit: test points, source: "https://example.org/tariff", status: I, per_node_hour: 2.5, queues: {rt_HG: 0.25}}
"""
TIERED = "name: tiered\nextends: polaris\n"


def steps_per_epoch(nodes: int) -> int:
    """What hpc_launch/train/data.micro_batches_per_epoch gives at this world size (accum 1)."""
    return SET_SIZE // (nodes * RANKS_PER_NODE) // MICRO


def job_log(job_id: str, nodes: int, sps: float, *, with_epoch: bool = True) -> str:
    world = nodes * RANKS_PER_NODE
    epoch = f" steps/epoch={steps_per_epoch(nodes)}" if with_epoch else ""
    ended = T0 + STARTUP[nodes]
    return (
        f"[hpc-launch] job {job_id} on pod1 at 2026-11-23T09:33:08+0000, {nodes} node(s) x {RANKS_PER_NODE} "
        f"rank(s), t={T0}.000000, script sc.sh\n"
        f"training resnet50 on imagenet: world={world} (pbs) zero=2 offload=none precision=fp32 micro={MICRO} "
        f"accum=1 global={MICRO * world} steps=4{epoch} threads/rank=1\n"
        f"[hpc-train] step=2 epoch=0 loss=2.5000 lr=0.001 samples_per_sec={sps * 0.9:.4f} "
        f"avg_samples_per_sec={sps * 0.9:.4f} mem_alloc_gb=0.3000 mem_peak_gb=0.4000 world_size={world}\n"
        f"[hpc-train] step=4 epoch=0 loss=2.2500 lr=0.001 samples_per_sec={sps:.4f} "
        f"avg_samples_per_sec={sps:.4f} mem_alloc_gb=0.3000 mem_peak_gb=0.3500 world_size={world}\n"
        f"training finished: steps=4 wall_s={WALL_S} ended_at={ended}\n"
    )


def add_jobs(tmp_path, cluster: str, measured, *, with_epoch: bool = True) -> None:
    from hpc_launch.records import JobRecord, JobStore

    store = JobStore()
    n = 500
    for nodes, speeds in measured.items():
        for sps in speeds:
            n += 1
            log = tmp_path / f"sc.o{n}"
            log.write_text(job_log(str(n), nodes, sps, with_epoch=with_epoch))
            store.add(
                JobRecord(
                    job_id=str(n),
                    cluster=cluster,
                    dialect="pbspro",
                    host="localhost",
                    name="sc",
                    workdir=str(tmp_path),
                    script_path=str(tmp_path / "sc.sh"),
                    log_path=str(log),
                    exit_path=str(log) + ".exitcode",
                    submit_time=time.time(),
                    state="done",
                    exit_code=0,
                    extra={"sweep": "pl-1", "point": {"zero": 2, "nodes": nodes}},
                )
            )


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The jobs of a sweep on `plansite` (ABCI's profile with a charge the test sets)."""
    d = tmp_path / "clusters"
    d.mkdir()
    (d / "plansite.yaml").write_text(SITE)
    (d / "tiered.yaml").write_text(TIERED)
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(d))
    return tmp_path


def run_report(hpc_launch_bin, cwd: Path, *args):
    return run_cli(["report", "pl-1", "--out", str(cwd / "rep"), *args], cwd=cwd)  # in-process (tests/inproc.py)


def dry_run(hpc_launch_bin, cwd: Path, line: str):
    """The report's `hpc-launch submit ...` line, run by the real CLI with --dry-run: submit's own
    checks (site_rules, the queue limits, --chain 1-1000) must agree with the report's verdict."""
    argv = shlex.split(line.replace(" ...", ""))
    assert argv[:2] == ["hpc-launch", "submit"]
    return run_cli([*argv[1:], "-P", "grp", "--venv", "/opt/venv", "--dry-run"], cwd=cwd)


def startup(nodes: int) -> float:
    """What the logs say: ended_at - wall_s - the prologue's time stamp."""
    return T0 + STARTUP[nodes] - WALL_S - T0


def stop(walltime_s: int) -> int:
    return min(300, max(30, walltime_s // 10))  # submit's default --stop-before


def expect_chain(train_s: float, start: float, limit: int, given: bool):
    """links and link walltime: the fewest links of at most `limit`, split evenly unless given."""
    links = math.ceil(train_s / (limit - stop(limit) - start))
    wall = limit if given else min(limit, 60 * math.ceil((train_s / links + start + 300) / 60))
    return links, wall


def hms(s: int) -> str:
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def test_plan_in_epochs_gives_the_chain_the_submit_line_and_the_charge_in_the_sites_unit(site, hpc_launch_bin):
    add_jobs(site, "plansite", MEASURED)
    epochs = 90
    r = run_report(hpc_launch_bin, site, "--plan-epochs", str(epochs))
    assert r.returncode == 0, r.stderr
    rows = {int(row["nodes"]): row for row in csv.DictReader((site / "rep" / "scaling.csv").open())}
    limit = 168 * 3600  # rt_HF, the queue submit picks on ABCI for these node counts
    for n, speeds in MEASURED.items():
        row, sps = rows[n], statistics.median(speeds)
        planned = epochs * steps_per_epoch(n) * MICRO * RANKS_PER_NODE * n  # what `--epochs 90` trains
        train_s = planned / sps
        links, wall = expect_chain(train_s, startup(n), limit, given=False)
        used = n * (train_s + links * startup(n)) / 3600
        assert int(row["planned_samples"]) == planned
        assert float(row["wall_h"]) == pytest.approx(train_s / 3600, rel=1e-12)
        assert float(row["startup_s"]) == pytest.approx(startup(n))
        assert (int(row["links"]), row["link_walltime"]) == (links, hms(wall))
        # enough training time in the links, and no fewer links of the longest walltime would do
        assert links * (wall - stop(wall) - startup(n)) >= train_s
        assert (links - 1) * (limit - stop(limit) - startup(n)) < train_s
        assert float(row["used_node_hours"]) == pytest.approx(used, rel=1e-12)
        assert float(row["charge"]) == pytest.approx(used * 2.5, rel=1e-12) and row["charge_unit"] == "test points"
        assert row["refused"] == ""
    md = (site / "rep" / "report.md").read_text()
    assert (
        "charge: in test points, 2.5 test points per node-hour on rt_HF (source [I]: https://example.org/tariff)." in md
    )
    train4 = epochs * steps_per_epoch(4) * MICRO * RANKS_PER_NODE * 4 / 360.0
    links, wall = expect_chain(train4, startup(4), limit, given=False)
    assert f"chain for the proposed 4 node(s) on rt_HF: {links} link(s) x {hms(wall)}; each link: " in md
    assert (
        "within the limits of rt_HF on plansite (1-128 nodes, at most 168:00:00 a job at 4 node(s), --chain 1-1000): "
        in md
    )
    line = f"hpc-launch submit -c plansite --nodes 4 --queue rt_HF -t {hms(wall)} --chain {links} ..."
    assert f"run: `{line}` (... = the measured jobs' other options, training `--epochs 90`)." in md
    ran = dry_run(hpc_launch_bin, site, line)
    assert ran.returncode == 0 and f"#PBS -l walltime={hms(wall)}\n" in ran.stdout, ran.stderr
    assert f"then link {links + 1}:" not in ran.stderr and (links == 1 or f"then link {links}:" in ran.stderr)
    used4 = 4 * (train4 + links * startup(4)) / 3600
    assert "| 4 **(proposed)** | 1 | 360.0 |" in md and f"| {links} x {hms(wall)} | {used4 * 2.5:,.1f} |\n" in md
    assert "| node-hours | chain (links x walltime) | charge (test points) |\n" in md


def test_links_of_a_given_walltime_and_the_queues_own_rate(site, hpc_launch_bin):
    add_jobs(site, "plansite", MEASURED)
    samples = 1_200_000 * 90
    r = run_report(hpc_launch_bin, site, "--plan-samples", str(samples), "--link-walltime", "24:00:00")
    assert r.returncode == 0, r.stderr
    rows = {int(row["nodes"]): row for row in csv.DictReader((site / "rep" / "scaling.csv").open())}
    for n, speeds in MEASURED.items():
        train_s = samples / statistics.median(speeds)
        links, wall = expect_chain(train_s, startup(n), 86400, given=True)
        assert links > 1 and (int(rows[n]["links"]), rows[n]["link_walltime"]) == (links, "24:00:00")
    md = (site / "rep" / "report.md").read_text()
    links4, _ = expect_chain(samples / 360.0, startup(4), 86400, given=True)
    line = f"hpc-launch submit -c plansite --nodes 4 --queue rt_HF -t 24:00:00 --chain {links4} ..."
    steps = math.ceil(samples / (MICRO * RANKS_PER_NODE * 4))
    assert f"run: `{line}` (... = the measured jobs' other options, training `--steps {steps}`)." in md
    ran = dry_run(hpc_launch_bin, site, line)
    assert ran.returncode == 0 and f"then link {links4}: qsub" in ran.stderr, ran.stderr

    # rt_HG: one node at most, charged at the profile's rate for that queue
    r = run_report(hpc_launch_bin, site, "--plan-samples", str(samples), "--queue", "rt_HG")
    assert r.returncode == 0, r.stderr
    rows = {int(row["nodes"]): row for row in csv.DictReader((site / "rep" / "scaling.csv").open())}
    assert rows[1]["refused"] == "" and float(rows[1]["charge"]) == pytest.approx(
        float(rows[1]["used_node_hours"]) * 0.25, rel=1e-12
    )
    md = (site / "rep" / "report.md").read_text()
    assert (
        "chain for the proposed 4 node(s) on rt_HG: refused: 4 nodes are above the rt_HG limit of 1 on plansite "
        "(fewer nodes, or another --queue)." in md
    )
    assert "- 2 node(s): refused: 2 nodes are above the rt_HG limit of 1" in md
    ran = dry_run(hpc_launch_bin, site, "hpc-launch submit -c plansite --nodes 4 --queue rt_HG -t 01:00:00")
    assert ran.returncode == 2 and "above the rt_HG limit of 1 nodes" in ran.stderr, ran.stderr
    assert "0.25 test points per node-hour on rt_HG" in md


@pytest.mark.parametrize(
    "args, refusal",
    [
        (
            ["--link-walltime", "200:00:00"],
            "--link-walltime 200:00:00 is above the 168:00:00 rt_HF allows on plansite (use 168:00:00 or less)",
        ),
        (
            ["--link-walltime", "00:06:00"],
            "more than --chain allows (1-1000) (more nodes, or a longer --link-walltime (up to 168:00:00 on rt_HF))",
        ),
        (
            ["--link-walltime", "00:01:00"],
            "leaves no training time after the start-up (60 s) and the stop margin "
            "(30 s) (use a --link-walltime of at least 00:08:00)",
        ),
    ],
)
def test_a_chain_the_site_would_refuse_is_named_with_the_fix(site, hpc_launch_bin, args, refusal):
    add_jobs(site, "plansite", MEASURED)
    r = run_report(hpc_launch_bin, site, "--plan-samples", str(1_200_000 * 90), *args)
    assert r.returncode == 0, r.stderr
    md = (site / "rep" / "report.md").read_text()
    verdict = next(line for line in md.splitlines() if line.startswith("chain for the proposed 4 node(s)"))
    assert verdict.startswith("chain for the proposed 4 node(s) on rt_HF: refused: ") and refusal in verdict
    assert "run: `hpc-launch submit" not in md
    rows = {int(row["nodes"]): row for row in csv.DictReader((site / "rep" / "scaling.csv").open())}
    assert refusal in rows[4]["refused"]
    if rows[4]["links"]:  # submit itself refuses the same link
        line = (
            f"hpc-launch submit -c plansite --nodes 4 --queue rt_HF -t {rows[4]['link_walltime']} "
            f"--chain {rows[4]['links']}"
        )
        ran = dry_run(hpc_launch_bin, site, line)
        assert ran.returncode == 2 and ("168:00:00" in ran.stderr or "1 to 1000" in ran.stderr), ran.stderr


def test_a_routing_queue_gives_each_node_count_its_tiers_walltime(site, hpc_launch_bin):
    """Polaris prod: 10-24 nodes at most 3 h (small), 25-99 at most 6 h (medium)."""
    measured = {12: [1200.0], 20: [1900.0], 30: [2700.0]}
    add_jobs(site, "tiered", measured)
    samples = 50_000_000
    r = run_report(hpc_launch_bin, site, "--plan-samples", str(samples), "--queue", "prod")
    assert r.returncode == 0, r.stderr
    rows = {int(row["nodes"]): row for row in csv.DictReader((site / "rep" / "scaling.csv").open())}
    for n, limit in ((12, 3 * 3600), (20, 3 * 3600), (30, 6 * 3600)):
        links, wall = expect_chain(samples / measured[n][0], startup(n), limit, given=False)
        assert (int(rows[n]["links"]), rows[n]["link_walltime"]) == (links, hms(wall)) and wall <= limit
        assert rows[n]["charge"] == "" and rows[n]["refused"] == ""
    md = (site / "rep" / "report.md").read_text()
    assert "charge: tiered's profile names no charge unit: node-hours only." in md
    assert "| node-hours | chain (links x walltime) |\n" in md  # no charge column without a rate
    assert "run: `hpc-launch submit -c tiered --nodes 30 --queue prod -t " in md
    # submit agrees: 30 nodes take a 6 h link on prod, 12 nodes do not (their tier ends at 3 h)
    assert (
        dry_run(hpc_launch_bin, site, "hpc-launch submit -c tiered --nodes 30 --queue prod -t 06:00:00").returncode == 0
    )
    ran = dry_run(hpc_launch_bin, site, "hpc-launch submit -c tiered --nodes 12 --queue prod -t 06:00:00")
    assert ran.returncode == 2 and "03:00:00" in ran.stderr, ran.stderr


def test_a_site_that_states_no_walltime_needs_link_walltime(tmp_path, hpc_launch_bin):
    add_jobs(tmp_path, "slurm", MEASURED)  # the testbed's profile: one partition, no queues
    r = run_report(hpc_launch_bin, tmp_path, "--plan-steps", "100000")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert (
        "chain for the proposed 4 node(s) on slurm: refused: slurm states no maximum walltime: give "
        "--link-walltime HH:MM:SS, the longest one job may run there." in md
    )
    r = run_report(hpc_launch_bin, tmp_path, "--plan-steps", "100000", "--link-walltime", "2h")
    assert r.returncode == 0, r.stderr
    train_s = 100000 * MICRO * RANKS_PER_NODE * 4 / 360.0
    links, _ = expect_chain(train_s, startup(4), 7200, given=True)
    assert (
        f"run: `hpc-launch submit -c slurm --nodes 4 -t 02:00:00 --chain {links} ...`"
        in (tmp_path / "rep" / "report.md").read_text()
    )


@pytest.mark.parametrize(
    "args, fix",
    [
        (["--plan-epochs", "3"], "give --plan-samples N instead: the epochs times the training set's size"),
        (["--plan-samples", "10", "--queue", "nope"], "--queue nope: plansite has no such queue (one of: rt_HF"),
        (["--queue", "rt_HF"], "add --plan-samples, --plan-steps or --plan-epochs"),
        (["--plan-epochs", "3", "--plan-steps", "5"], "not both --plan-steps and --plan-epochs"),
        (["--plan-steps", "3", "--link-walltime", "soon"], "--link-walltime"),
    ],
)
def test_a_plan_the_jobs_or_the_site_cannot_answer_is_one_line_and_writes_nothing(site, hpc_launch_bin, args, fix):
    add_jobs(site, "plansite", MEASURED, with_epoch=False)  # an entrypoint that does not log steps/epoch
    r = run_report(hpc_launch_bin, site, *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and fix in r.stderr, r.stderr
    assert not (site / "rep").exists()


def test_the_shipped_charges_name_their_source_and_give_no_rate_without_one():
    from hpc_launch.site import profiles

    charged = {}
    for name in profiles.available():
        p = profiles.load(name)
        if p.charge is not None:
            assert p.charge.source.startswith("https://") and "charge" in p.facts, name
            charged[name] = {q: p.charge.rate(q) for q in p.queues}
    assert charged["tsubame4"] == {"node_f": 1.0, "node_h": None, "node_q": None, "gpu_1": None}
    for name in ("abci", "miyabi", "perlmutter"):
        assert set(charged[name].values()) == {None}, name  # the unit, and no number without a source
    for name in ("polaris", "aurora", "frontier"):
        assert profiles.load(name).charge is None and "charge" in profiles.load(name).facts


def test_a_charge_for_a_queue_the_site_lacks_is_refused(tmp_path, monkeypatch):
    from hpc_launch.site import profiles
    from hpc_launch.errors import ProfileError

    (tmp_path / "bad.yaml").write_text(
        "name: bad\nextends: abci\ncharge: {unit: p, source: 'https://x', status: I, queues: {rt_XX: 1}}\n"
    )
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", str(tmp_path))
    with pytest.raises(ProfileError, match="charge.queues: 'rt_XX' is not one of the queues"):
        profiles.load("bad")


def test_the_stop_margin_is_submits_default():
    from hpc_launch.report.allocation import stop_margin
    from hpc_launch.spec import _stop_before

    for w in (60, 299, 300, 301, 1800, 3000, 3001, 86400, 604800):
        assert stop_margin(w) == _stop_before(SimpleNamespace(stop_before=None), w)


@pytest.mark.parametrize("module", ["rows", "scaling", "allocation", "tables", "charts", "__init__"])
def test_each_part_of_the_report_imports_alone_and_the_public_names_stay(module):
    name = "hpc_launch.report" + ("" if module == "__init__" else f".{module}")
    code = (
        f"import importlib, sys; importlib.import_module({name!r})\n"
        "from hpc_launch.report import Plan, report_jobs, write, write_for, row_for, MATPLOTLIB_MISSING\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'torch', 'deepspeed')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr
