"""CLI start-up and `hostfile` speed, measured as the user sees it: cold processes, wall time.

    python bench/bench_cli.py                 # ~1 min on 2 cores
    python bench/bench_cli.py --runs 41 --hostfile-runs 21

(a) `hpc-launch submit --cluster abci --nodes 9 --group g1 --login local --dry-run`, median of
    --runs fresh processes, interleaved with a baseline `python -c "import jinja2, yaml"` on the
    same interpreter, and the same dry-run through typer (HPC_LAUNCH_NO_FAST=1: what it cost before
    the fast path, hpc_launch/cli/fast.py). Target (issue 18): dry-run <= 1.3x baseline.
(b) `hpc-launch hostfile --from pbspro --slots 8` on generated PBS node files (8 lines per node),
    1k..100k nodes. Target: 100,000 nodes (800,000 lines) < 0.2 s, and linear in the node count.
(c) `python -X importtime` of the dry-run path: the top imports, and where the time goes.

Prints figures only; it never fails (speed is not asserted in tests).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRY_RUN = ["submit", "--cluster", "abci", "--nodes", "9", "--group", "g1", "--login", "local", "--dry-run"]
BASELINE = ["-c", "import jinja2, yaml"]
DRY_RUN_TARGET_RATIO = 1.3
HOSTFILE_TARGET_S = 0.2
SIZES = (1000, 2000, 5000, 10000, 20000, 100000)
TARGET_NODES = 100000  # issue 18: 100,000 nodes x 8 lines under 0.2 s


def clean_env(tmp: Path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not (
            k.startswith(("PBS_", "SLURM_", "SGE_", "COBALT_", "HPC_LAUNCH_"))
            or k in ("PE_HOSTFILE", "PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE")
        )
    }
    # PYTHONDONTWRITEBYTECODE (set in some shells and CI images) would make every run compile
    # hpc_launch's sources again while jinja2 and yaml keep the .pyc files pip wrote at install:
    # an installed hpc-launch has its .pyc files too, so both sides run from bytecode.
    # No user profiles or templates, found the way a user's are (no HPC_LAUNCH_CONFIG_DIR, which
    # would skip looking up the user's config dir).
    env["XDG_CONFIG_HOME"] = str(tmp / "config")
    env["HPC_LAUNCH_STATE_DIR"] = str(tmp / "state")
    return env


CPU: list = []  # the CPU seconds (user + sys) of each process `wall` ran, in order


def wall(argv, env, cwd) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(map(str, argv))}\n{r.stderr.decode()[-2000:]}")
    return elapsed


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def bench_dry_run(python: str, cli: str, runs: int, env: dict, cwd: Path) -> None:
    print(f"== (a) submit --dry-run vs `python -c 'import jinja2, yaml'` ({runs} cold processes each, interleaved)")
    base_argv, dry_argv, version_argv = [python, *BASELINE], [cli, *DRY_RUN], [cli, "--version"]
    typer_env = dict(env, HPC_LAUNCH_NO_FAST="1")  # the same command line through typer
    # a returning user's: a job store exists, so the remembered bad hosts are read from it
    store_env = dict(env, HPC_LAUNCH_STATE_DIR=str(Path(env["HPC_LAUNCH_STATE_DIR"]) / "returning"))
    subprocess.run([python, "-c", "from hpc_launch.records import JobStore; JobStore()"], env=store_env, check=True)
    wall(base_argv, env, cwd), wall(dry_argv, env, cwd), wall(version_argv, env, cwd)  # warm caches and .pyc files
    base, dry, version, typer, stored = [], [], [], [], []
    cpu: dict = {id(sink): [] for sink in (base, dry, version, typer, stored)}
    for i in range(runs):
        four = [
            (base, base_argv, env),
            (dry, dry_argv, env),
            (version, version_argv, env),
            (typer, dry_argv, typer_env),
            (stored, dry_argv, store_env),
        ]
        for sink, argv, run_env in four if i % 2 == 0 else four[::-1]:  # alternate which goes first
            sink.append(wall(argv, run_env, cwd))
            cpu[id(sink)].append(CPU[-1])
    interp = wall([python, "-c", "pass"], env, cwd)
    b, d = statistics.median(base), statistics.median(dry)
    ratio = d / b
    target = f"target <= {DRY_RUN_TARGET_RATIO:.1f}x"
    print(f"  bare interpreter (1 run)   {ms(interp)}")
    print(f"  baseline import jinja2,yaml{ms(b)}  (min {ms(min(base)).strip()}, max {ms(max(base)).strip()})")
    print(f"  submit --dry-run           {ms(d)}  (min {ms(min(dry)).strip()}, max {ms(max(dry)).strip()})")
    print(
        f"  ratio dry-run / baseline   {ratio:7.2f}x   {target}: "
        f"{'PASS' if ratio <= DRY_RUN_TARGET_RATIO else 'FAIL'}   (budget {ms(b * DRY_RUN_TARGET_RATIO).strip()}, "
        f"over by {ms(max(0.0, d - b * DRY_RUN_TARGET_RATIO)).strip()})"
    )
    print(f"  ratio of the minimums        {min(dry) / min(base):7.2f}x   (less sensitive to a loaded machine)")
    t = statistics.median(typer)
    print(
        f"  the same through typer     {ms(t)}  ratio {t / b:5.2f}x   (HPC_LAUNCH_NO_FAST=1; min/min "
        f"{min(typer) / min(base):.2f}x): the fast path saves {ms(t - d).strip()}"
    )
    cb, cd, ct = (statistics.median(cpu[id(sink)]) for sink in (base, dry, typer))
    print(
        f"  CPU time (user+sys), medians: baseline {ms(cb).strip()}, dry-run {ms(cd).strip()} ({cd / cb:.2f}x), "
        f"through typer {ms(ct).strip()} ({ct / cb:.2f}x)   (steadier than wall time on a loaded machine)"
    )
    st = statistics.median(stored)
    cs = statistics.median(cpu[id(stored)])
    print(
        f"  the dry-run with a job store {ms(st)}  ratio {st / b:5.2f}x   (a returning user: the remembered bad "
        f"hosts are read; CPU {cs / cb:.2f}x)"
    )
    v = statistics.median(version)
    print(f"  hpc-launch --version       {ms(v)}  ratio {v / b:5.2f}x   (typer: no fast path)")


def write_nodefile(path: Path, nodes: int, slots: int) -> None:
    with open(path, "w") as fh:
        for n in range(nodes):
            fh.write(f"x{n // 1000:04d}c0s{n % 1000:03d}b0n0.hsn.cm.example.org\n" * slots)


def fit(xs, ys):
    """Least squares y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def bench_hostfile(cli: str, runs: int, env: dict, tmp: Path) -> None:
    print(
        f"\n== (b) hostfile --from pbspro --slots 8 (median of {runs} cold processes; node files have 8 lines per node)"
    )
    startup = statistics.median(wall([cli, "hostfile", "--hosts", "a", "--slots", "8"], env, tmp) for _ in range(runs))
    typer_env = dict(env, HPC_LAUNCH_NO_FAST="1")
    typer = statistics.median(
        wall([cli, "hostfile", "--hosts", "a", "--slots", "8"], typer_env, tmp) for _ in range(runs)
    )
    print(f"  CLI start-up (`hostfile --hosts a`): {ms(startup)}   (through typer: {ms(typer).strip()})")
    medians, minimums = {}, {}
    for nodes in SIZES:
        path = tmp / f"nodes.{nodes}"
        write_nodefile(path, nodes, 8)
        argv = [cli, "hostfile", "--from", "pbspro", "--slots", "8"]
        run_env = dict(env, PBS_NODEFILE=str(path))
        wall(argv, run_env, tmp)
        times = [wall(argv, run_env, tmp) for _ in range(runs)]
        medians[nodes], minimums[nodes] = statistics.median(times), min(times)
        work = medians[nodes] - startup
        flag = ""
        if nodes == TARGET_NODES:
            flag = (
                f"   target < {HOSTFILE_TARGET_S * 1000:.0f} ms: "
                f"{'PASS' if medians[nodes] < HOSTFILE_TARGET_S else 'FAIL'}"
            )
        print(
            f"  {nodes:6d} nodes ({nodes * 8:6d} lines): {ms(medians[nodes])}  minus start-up {ms(work)}"
            f"  = {work / nodes * 1e6:6.2f} us/node  (min {ms(minimums[nodes]).strip()}){flag}"
        )
    a, b = fit(list(medians), list(medians.values()))
    print(
        f"  least squares (medians):  t = {ms(a).strip()} + {b * 1e6:.2f} us x nodes   (intercept vs measured "
        f"start-up {ms(startup).strip()})"
    )
    a, b = fit(list(minimums), list(minimums.values()))
    print(f"  least squares (minimums): t = {ms(a).strip()} + {b * 1e6:.2f} us x nodes")
    r = (medians[100000] - startup) / (medians[10000] - startup)
    print(f"  (t100k - start-up) / (t10k - start-up) = {r:.2f}   (10.0 = linear)")
    # the baseline the shell gives on the same file: distinct hosts in sorted order, slots appended
    big = str(tmp / f"nodes.{TARGET_NODES}")
    shell = ["sh", "-c", 'sort -u "$1" | awk \'{print $1 " slots=8"}\'', "sh", big]
    base = statistics.median(wall(shell, env, tmp) for _ in range(runs))
    print(
        f"  sort -u | awk on the {TARGET_NODES:,}-node file: {ms(base)}   ratio hostfile / shell "
        f"{medians[TARGET_NODES] / base:.2f}x"
    )


def import_times(python: str, env: dict, cwd: Path, top: int = 10) -> None:
    print("\n== (c) python -X importtime, submit --dry-run (one run; self and cumulative microseconds)")
    code = "import sys; from hpc_launch.cli import main; sys.argv[0] = 'hpc-launch'; main()"
    r = subprocess.run(
        [python, "-X", "importtime", "-c", code, *DRY_RUN], env=env, cwd=cwd, capture_output=True, text=True
    )
    rows = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line.split(":", 1)[1].split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((int(self_us), int(cum_us), depth, name.strip()))
    total = sum(s for s, _, _, _ in rows)
    print(f"  {len(rows)} modules imported, {total / 1000:.1f} ms of import time in all")
    print(f"  top {top} by cumulative time, top-level imports (what the program itself asked for):")
    for s, c, _, name in sorted((x for x in rows if x[2] == 0), key=lambda x: -x[1])[:top]:
        print(f"    {c / 1000:7.1f} ms cum  {s / 1000:6.1f} ms self  {name}")
    print(f"  top {top} by cumulative time, any depth:")
    for s, c, d, name in sorted(rows, key=lambda x: -x[1])[:top]:
        print(f"    {c / 1000:7.1f} ms cum  {s / 1000:6.1f} ms self  {'  ' * d}{name}")
    groups = {}
    for s, _, _, name in rows:
        root = name.split(".")[0]
        groups[root] = groups.get(root, 0) + s
    print(
        "  by package (sum of self time): "
        + ", ".join(f"{k} {v / 1000:.1f} ms" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])[:top])
    )


def phases(python: str, env: dict, cwd: Path) -> None:
    """In one fresh process: how long each step of the dry-run takes after the imports."""
    print("\n== (d) dry-run phases in one process (first call, then a second call: what caching would save)")
    # one script, in two raw literals only to keep the source lines short
    code = (
        r"""
import time, sys
t0 = time.perf_counter()
import hpc_launch.cli
from hpc_launch.cli.fast import fast_runner
t1 = time.perf_counter()
assert fast_runner(%r) is not None, "the dry-run did not take the fast path"
t1b = time.perf_counter()
from hpc_launch.spec import spec_from
from hpc_launch.prepare import prepare
from hpc_launch import render
from hpc_launch.site import profiles
t2 = time.perf_counter()
p = profiles.load("abci")
t3 = time.perf_counter()
spec = spec_from({}, dict(cluster="abci", nodes=9, group="g1", login="local"))
prepare(spec)
t4 = time.perf_counter()
prepare(spec_from({}, dict(cluster="abci", nodes=9, group="g1", login="local")))
t5 = time.perf_counter()
import typer
from typer.main import get_command
get_command(hpc_launch.cli.app)
t6 = time.perf_counter()
found = profiles._discover(tuple(__import__("hpc_launch.paths").paths.clusters_dirs()))
for label, a, b in (("import hpc_launch.cli + the fast path (no typer)", t0, t1),
                    ("fast path: parse argv, check the options", t1, t1b),
                    ("import spec/submit/profiles/render", t1b, t2), """
        r"""("profiles.load('abci') (reads every profile YAML)", t2, t3),
                    ("prepare() first (jinja env + compile)", t3, t4),
                    ("prepare() second call (all cached)", t4, t5),
                    ("without the fast path: import typer + get_command", t5, t6)):
    print(f"  {label:50s} {(b - a) * 1000:7.1f} ms")
print(f"  ({len(found)} cluster profiles read; the dry-run needs 1 plus what it extends)")
""" % (DRY_RUN,)
    )
    r = subprocess.run([python, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)
    print(r.stdout.rstrip() or f"  (could not measure: {r.stderr.strip().splitlines()[-1:]})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21, help="cold runs of each command for (a)")
    ap.add_argument("--hostfile-runs", type=int, default=11, help="cold runs per node count for (b)")
    ap.add_argument("--python", default=sys.executable, help="interpreter (the one hpc-launch is installed in)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: a,b,c,d")
    args = ap.parse_args()
    cli = str(Path(args.python).parent / "hpc-launch")
    if not os.path.exists(cli):
        raise SystemExit(f"{cli} missing: pip install -e . in that environment")
    skip = set(args.skip.split(","))
    print(f"python {sys.version.split()[0]} at {args.python}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmpdir:
        tmp = Path(tmpdir)
        env = clean_env(tmp)
        if "a" not in skip:
            bench_dry_run(args.python, cli, args.runs, env, tmp)
        if "b" not in skip:
            bench_hostfile(cli, args.hostfile_runs, env, tmp)
        if "c" not in skip:
            import_times(args.python, env, tmp)
        if "d" not in skip:
            phases(args.python, env, tmp)


if __name__ == "__main__":
    main()
