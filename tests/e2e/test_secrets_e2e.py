"""--pass-env on every testbed scheduler, here and over the SSH login host: while the job is
submitted, queued and running, a second unprivileged user (`tbother`, testbed/install.sh)
reads the scheduler's views of it (squeue/scontrol/sacct's SubmitLine, the PBS wrappers'
`qstat -f`, Grid Engine's `qstat -j`), every /proc/*/cmdline and /proc/*/environ it can
read, and every file of the work dir, and never finds the value; root finds it in no
scheduler's stored job state either; the job's ranks did get it (they print its hash).

The old routes fail this: `qsub -v NAME` shows NAME=value in Grid Engine's `qstat -j`
env_list and, through Slurm's qsub wrapper, on sbatch's command line and in sacct's
SubmitLine; over SSH `export NAME=value` was on the login shell's command line."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli

pytestmark = pytest.mark.scheduler

OTHER = "tbother"
SGE_ROOT = os.environ.get("SGE_ROOT", "/var/lib/gridengine")

# Runs as the other user (code on argv, the needles on stdin, never on a command line).
# one script, in two raw literals only to keep the source lines short
WATCHER = (
    r"""
import json, os, select, subprocess, sys, threading, time
cfg = json.loads(sys.stdin.readline())
needles = [n.encode() for n in cfg["needles"]]
canary, expect = cfg["canary"].encode(), cfg["expect"]
hits, seen, stats, lock, stop = [], {}, {"cmdline": 0, "environ_read": 0, "environ_denied": """
    r"""0, "files_read": 0, "canary": False}, threading.Lock(), threading.Event()

def look(where, data):
    for n in needles:
        if n in data:
            with lock:
                hits.append(where)

def read_proc(pid, denied):
    for part in ("cmdline", "environ"):
        if part == "environ" and pid in denied:
            continue
        try:
            with open(f"/proc/{pid}/{part}", "rb") as fh:
                data = fh.read()
        except PermissionError:
            stats["environ_denied"] += part == "environ"
            denied.add(pid)
            continue
        except OSError:
            continue
        stats["cmdline" if part == "cmdline" else "environ_read"] += 1
        if part == "cmdline" and canary in data:
            stats["canary"] = True
        look(f"/proc/{pid}/{part}: {data[:300]!r}", data)

def scan_proc():
    # Every 10 ms a new process is read at once, and again on every round of its first 2 s (the
    # exec after its fork); every process is read again each 0.5 s. (Reading all of them every
    # 10 ms took most of a core from the jobs it watched.)
    born, denied, last_sweep = {}, set(), 0.0
    while not stop.is_set():
        now = time.monotonic()
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        sweep = now - last_sweep >= 0.5
        for pid in pids:
            first = born.setdefault(pid, now)
            if sweep or now - first < 2.0:
                read_proc(pid, denied)
        if sweep:
            last_sweep = now
            alive = set(pids)
            born = {p: t for p, t in born.items() if p in alive}
            denied &= alive
        time.sleep(0.01)

def scan_rest():
    while not stop.is_set():
        for argv in cfg["commands"]:
            try:
                r = subprocess.run(argv, capture_output=True, timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                continue
            out = r.stdout + r.stderr
            look(" ".join(argv), out)
            if r.returncode == 0 and expect.encode() in out:
                seen[argv[0] + " " + argv[1]] = True
        for top in cfg["dirs"]:
            for root, dirs, files in os.walk(top):
                for name in dirs + files:
                    look(f"name {root}/{name}", name.encode())
                for name in files:
                    try:
                        with open(os.path.join(root, name), "rb") as fh:
                            look(f"file {root}/{name}", fh.read())
                        stats["files_read"] += 1
                    except OSError:
                        pass
        # once a second: what the views could leak is the job's stored attributes, there from its
        # submission to its end; Grid Engine's two qstat calls took a quarter of a core at 0.5 s
        stop.wait(1.0)

threads = [threading.Thread(target=f, daemon=True) for f in (scan_proc, scan_rest)]
for t in threads:
    t.start()
print("ready", flush=True)
sys.stdin.readline()  # "stop"
stop.set()
for t in threads:
    t.join(30)
print(json.dumps({"hits": hits, "seen": sorted(seen), **stats}), flush=True)
"""
)

SLURM_VIEWS = [
    ["squeue", "-a", "-o", "%all"],
    ["scontrol", "show", "job", "-dd"],
    ["sacct", "-a", "-P", "-S", "now-10minutes", "-o", "JobID,JobName%80,SubmitLine%8000"],
]
SGE_VIEWS = [
    ["/usr/bin/qstat", "-j", "*"],  # Grid Engine: env_list
    ["/usr/bin/qstat", "-u", "*", "-r"],
]


def views(cluster: str) -> list:
    """The scheduler's views that can hold this job (the PBS wrappers submit to Slurm): the
    others cannot show it, and polling them too cost a core's worth beside the job."""
    if cluster.startswith("tb-sge"):
        return SGE_VIEWS
    if cluster.startswith("tb-pbs"):
        return [*SLURM_VIEWS, ["/opt/hpc-testbed/pbs/bin/qstat", "-f"]]  # Slurm's PBS wrapper
    return SLURM_VIEWS if cluster.startswith("tb-slurm") else []


PROBE = """import hashlib, os, sys, time
v = os.environb.get(b"MY_API_TOKEN", b"")
rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("SLURM_PROCID") or os.environ.get("RANK", "0")
# one write of the whole line (print writes each word apart when unbuffered, and two ranks' words interleave)
os.write(1, ("token sha256 %s rank %s\\n" % (hashlib.sha256(v).hexdigest(), rank)).encode())
time.sleep(3)  # running long enough to be looked at
"""


class Watcher:
    def __init__(self, needles, canary, expect, dirs, commands):
        env = {
            "PATH": "/usr/bin:/bin",
            "SGE_ROOT": SGE_ROOT,
            "SGE_CELL": os.environ.get("SGE_CELL", "default"),
            "HOME": f"/home/{OTHER}",
        }
        self.proc = subprocess.Popen(
            [shutil.which("runuser") or "/usr/sbin/runuser", "-u", OTHER, "--", "/usr/bin/python3", "-c", WATCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/",
        )
        cfg = {"needles": needles, "canary": canary, "expect": expect, "commands": commands, "dirs": dirs}
        self.proc.stdin.write(json.dumps(cfg) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> dict:
        out, _ = self.proc.communicate("stop\n", timeout=60)
        return json.loads(out.strip().splitlines()[-1])


def _scheduler_state_files(cluster: str, job_id: str):
    """Where the scheduler keeps the job (root-only): Slurm's StateSaveLocation, Grid Engine's spool."""
    if cluster.startswith("local"):
        return []
    if cluster.startswith("tb-sge"):
        return [
            p
            for p in glob.glob("/var/spool/gridengine/spooldb/*")
            + glob.glob("/var/spool/gridengine/qmaster/job_scripts/*")
            if os.path.isfile(p)
        ]
    return glob.glob(f"/var/lib/slurm/slurmctld/hash.*/job.{job_id}/*")


def _base64_forms(data: bytes):
    """What `data` looks like inside any base64 text (a command line shipped encoded), at each
    of the three byte alignments: the characters that do not depend on the neighbours."""
    forms = []
    for pad in range(3):
        text = base64.b64encode(b"\0" * pad + data).decode()
        start = (pad * 4 + 2) // 3 + 1
        forms.append(text[start : start + (len(data) * 4) // 3 - 4])
    return forms


CASES = [
    # (cluster, nodes, PATH first, --login)
    ("local", 1, None, None),
    ("tb-slurm", 2, None, None),
    ("tb-pbs", 1, "HPC_TESTBED_PBS_BIN", None),
    ("tb-pbs-mpi", 2, "HPC_TESTBED_PBS_BIN", None),  # mpirun -x NAME to ranks on two pods
    ("tb-sge", 1, "HPC_TESTBED_SGE_BIN", None),
    ("local", 1, None, "HPC_TESTBED_LOGIN_HOST"),
    ("tb-slurm", 1, None, "HPC_TESTBED_LOGIN_HOST"),
    ("tb-pbs", 1, None, "HPC_TESTBED_LOGIN_HOST"),
    ("tb-sge", 1, None, "HPC_TESTBED_LOGIN_HOST_SGE"),
]


# local and Grid Engine jobs run on this machine, never on a pod: beside the pods' lane in CI; the
# others name no pod, so they run on the side pods, in the side lane
PARAMS = [
    pytest.param(
        *case,
        id=f"{case[0]}-{case[1]}node{'-ssh' if case[3] else ''}",
        marks=[pytest.mark.beside] if case[0] in ("local", "tb-sge") else [pytest.mark.side],
    )
    for case in CASES
]


@pytest.mark.parametrize("cluster,nodes,path_key,login_key", PARAMS)
def test_another_user_never_sees_a_passed_secret(
    cluster, nodes, path_key, login_key, hpc_launch_bin, testbed, shared_workdir
):
    assert subprocess.run(["id", "-u", OTHER], capture_output=True).returncode == 0, (
        f"no user {OTHER}: run testbed/install.sh"
    )
    core = f"hpcsecret{uuid.uuid4().hex}"
    secret = f"{core} with 'quotes', \"$HOME\" and\na newline\n"
    name = f"sec{uuid.uuid4().hex[:8]}"
    canary = f"canary{uuid.uuid4().hex}"
    needles = [core, *_base64_forms(core.encode()), base64.b64encode(secret.encode()).decode()]
    probe = shared_workdir / "probe.py"
    probe.write_text(PROBE)
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed[path_key] if path_key else None)
    where = ["--login", testbed[login_key], "--workdir", str(shared_workdir)] if login_key else []
    if cluster not in ("local", "tb-sge"):
        where += SIDE_QUEUE

    watcher = Watcher(needles, canary, name, [str(shared_workdir)], views(cluster))
    try:
        subprocess.run(["bash", "-c", "sleep 1; true", canary], check=True)  # a root process it must be able to see
        job_id = cli.submit(
            "--cluster",
            cluster,
            "--nodes",
            str(nodes),
            "--name",
            name,
            "--script",
            str(probe),
            "--train-args",
            "",
            "--pass-env",
            "MY_API_TOKEN",
            *where,
            extra_env={"MY_API_TOKEN": secret},
        )
        log = shared_workdir / f"{name}.o{job_id.split('.')[0]}"
        cli.wait_log(log, "token sha256", timeout=300)
        stored = b"".join(Path(p).read_bytes() for p in _scheduler_state_files(cluster, job_id) if os.path.exists(p))
        r = cli("logs", "-f", job_id, timeout=300)
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
        time.sleep(1.5)  # one more round of scheduler views after the end
    finally:
        report = watcher.stop()

    # nobody else saw it, anywhere, at any moment, and the scheduler does not keep it
    assert report["hits"] == [], report["hits"][:5]
    assert all(n.encode() not in stored for n in needles), "the scheduler stored the value"
    # the ranks got the exact value
    hashes = re.findall(r"token sha256 ([0-9a-f]{64})", log.read_text())  # ranks' lines may interleave
    assert hashes == [hashlib.sha256(secret.encode()).hexdigest()] * nodes * (
        2 if cluster in ("local", "tb-sge") else 1
    ), hashes
    assert not list(shared_workdir.glob(".hpc-launch/*.secrets")), "the job did not delete the secrets file"
    # the watcher really looked: root's command lines, the work dir, the scheduler's view of the job
    assert report["canary"], "the other user could not read root's command lines"
    assert report["cmdline"] > 100 and report["environ_denied"] > 0 and report["files_read"] > 0, report
    if not cluster.startswith("local"):
        assert report["seen"], f"no scheduler view showed job {name} to the other user: {report}"
