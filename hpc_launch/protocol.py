"""The job protocol: what the launcher, the job script and the trainer agree on, written once.

Python reads these names; templates get this module as `proto` (render.py), so a script and
the code that reads what it leaves behind cannot drift apart.
"""

from __future__ import annotations

import shlex

from . import capsule_probe

# Where a command runs when it runs on this machine (a record's `host`, a transport's name).
LOCAL_HOST = "localhost"
# What a user may write for "this machine" (--login, a record's host).
LOCAL_NAMES = ("", "local", LOCAL_HOST)


def is_local(host: str | None) -> bool:
    return (host or "") in LOCAL_NAMES


# Exit codes of a job script and the trainer (the shell's 128+signal convention for the three
# signals a scheduler or a user sends).
EXIT_OK = 0
EXIT_RESUMABLE = 75  # stopped for time at a complete checkpoint: the next chain link resumes
EXIT_PREFLIGHT = 78  # the pre-flight gate found the job is not what was asked (EX_CONFIG): nothing trained
EXIT_LOST_START = 79  # `where --submit`: another cluster's job started this training first; this copy did not train
EXIT_HANG = 124  # the watchdog ended a hung job (as timeout(1) does when its time is up)
EXIT_WALLTIME = 142  # no scheduler: hpc-launch ended the job at its walltime (128 + SIGALRM: its time ran out)
EXIT_SIGINT = 130
EXIT_SIGKILL = 137
EXIT_SIGTERM = 143

# ---- files a job leaves beside its log (templates/body/prologue.sh.j2 writes them) ----------
EXIT_FILE_SUFFIX = ".exitcode"  # `CODE SCRIPT END_TIME`, written by the script's EXIT trap (its clock, in s)
LIVE_LOG_SUFFIX = ".live"  # the tee'd copy where a site's own log appears only at the end
SCRIPT_DIR = ".hpc-launch"  # the job's scripts, inside its work dir

# ---- a job's capsule (hpc_launch/capsule.py): what was submitted and what each start found ----
CAPSULE_DIR = f"{SCRIPT_DIR}/capsules"  # WORKDIR/.hpc-launch/capsules/NAME-STAMP/
CAPSULE_MANIFEST = "capsule.json"  # written at submit: code, git state, resolved profile
CAPSULE_CODE = "code"  # the snapshot of a --script and its sibling modules; the job runs this copy
CAPSULE_GIT_DIFF = "git.diff"  # uncommitted changes of the code's repository at submit
CAPSULE_PROBE = "probe.py"  # hpc_launch/capsule_probe.py, copied: runs in the job with any Python
# one line per start (a chain link, a requeue): what the job found; the probe owns the names, it runs without us
CAPSULE_RUNS, CAPSULE_NOTE = capsule_probe.RUNS, capsule_probe.NOTE


def capsule_relpath(job_name: str, stamp: str) -> str:
    """A job's capsule, relative to its work dir; every link of a chain shares it (not named after a link's script)."""
    return f"{CAPSULE_DIR}/{job_name}-{stamp}"


def exit_path_for(log_path: str) -> str:
    return log_path + EXIT_FILE_SUFFIX


def live_log_for(log_path: str) -> str:
    return log_path + LIVE_LOG_SUFFIX


def parse_exit_file(text: str, script: str | None = None) -> int | None:
    """The code in an exit-code file's last line; None if absent, garbage, or written by another
    script (an earlier job with the same number)."""
    lines = text.strip().splitlines()
    if not lines:
        return None
    words = lines[-1].split()
    if script is not None and len(words) > 1 and words[1] != script:
        return None
    try:
        return int(words[0])
    except (ValueError, IndexError):
        return None


def parse_exit_time(text: str) -> float | None:
    """When the job script ended (epoch seconds, the cluster's clock): the exit file's third word;
    None where an older script wrote none."""
    lines = text.strip().splitlines()
    words = lines[-1].split() if lines else []
    try:
        return float(words[2]) if len(words) > 2 else None
    except ValueError:
        return None


# The trainer's line once its last step is done (hpc_launch/train/trainer.py); the follower then watches for the
# job's end closely (logs.follow): what is left is the eval, the ranks and the launcher exiting.
TRAINING_FINISHED = "training finished: "


def link_script_name(script_name: str, link: int) -> str:
    """The script of link `link` (2, 3, ...) of a chain: `train-STAMP.sh` -> `train-STAMP-link2.sh`."""
    return script_name if link <= 1 else script_name.replace(".sh", f"-link{link}.sh")


# ---- placeholders a profile may use in directives, flags and launcher arguments -------------
# resolve.ResolvedJob.placeholders() gives a value for each; profiles refuse any other name.
PLACEHOLDERS = (
    "nodes",
    "queue",
    "walltime",
    "walltime_minutes",
    "group",
    "name",
    "gpus_per_node",
    "procs_per_node",
    "world_size",
    "workdir",
    "cpus_per_proc",
    "threads_per_proc",
)


# ---- polling ------------------------------------------------------------------------------
class Backoff:
    """A polling schedule: `first` seconds, growing by `factor` up to `most`; back to `first`
    when something changed. One class for every wait, so the controller sees one policy."""

    def __init__(self, first: float, factor: float, most: float) -> None:
        self.first, self.factor, self.most = first, factor, most

    def delays(self):
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.most)

    def after(self, delay: float, changed: bool = False) -> float:
        return self.first if changed else min(delay * self.factor, self.most)


# a follower's (and `status --watch`'s) state queries: quick at first, then gentle on the
# controller (submitit-style; never one query per job per second)
POLL = Backoff(1.0, 1.5, 10.0)
# a dropped connection (sshd restarted, laptop asleep) is retried this way ...
# ... and a cluster with no scheduler's (local, SSH pods): the query is a `ps` on the node, no controller to
# spare, and a job there starts and ends in seconds (jobs/state.poll_for picks)
POLL_NO_SCHEDULER = Backoff(0.2, 1.5, 2.0)
RECONNECT = Backoff(1.0, 2.0, 30.0)
RECONNECT_GIVE_UP_S = 600.0  # ... this long before the follow gives up (the job is not affected)
# `cancel` waits this long for the scheduler to confirm the end (PBS kept a qdel'ed job R for 17 s)
CANCEL_CONFIRM_S = 45.0
# from a tenth of a second: a local job's end follows the signal that soon; a scheduler's slower end costs
# two more queries in its first second
CANCEL_POLL = Backoff(0.1, 2.0, 4.0)


# ---- a node's network interface ---------------------------------------------------------------
# The pre-flight gate's rule (hpc_launch/train/preflight.interface_problem): the interface is administratively
# up (IFF_UP) and holds an IPv4 address. A link taken down keeps its address, so the address alone
# passes a node the gate then fails. The spares check runs it on each node as one shell command.


def interface_ok_shell(name: str) -> str:
    """A shell command that succeeds where interface `name` passes the gate's rule."""
    name = shlex.quote(name)
    return (
        f"ip -o link show dev {name} 2>/dev/null | grep -q '<[^>]*[<,]UP[,>]' "
        f"&& ip -4 -o addr show dev {name} 2>/dev/null | grep -q ' inet '"
    )


# ---- bad hosts ---------------------------------------------------------------------------------
# A job that finds a host bad (its pre-flight check, the watchdog, the spares check) prints this
# line; the launcher reads it from the log when the job ends and later jobs avoid the host.
# What the job asked for, exported by the job script for the ranks' pre-flight gate (hpc_launch/train/preflight.py):
# a launcher that sets no world size (PMIx, PALS) gets it from here, and one that sets a different
# one is refused.
ENV_WORLD_SIZE = "HPC_LAUNCH_WORLD_SIZE"
ENV_RANKS_PER_NODE = "HPC_LAUNCH_RANKS_PER_NODE"
ENV_PREFLIGHT = "HPC_LAUNCH_PREFLIGHT"  # "0" skips the gate
ENV_STOP_SIGNAL = "HPC_LAUNCH_STOP_SIGNAL"  # the signal a --script rank gets at the deadline (SIGUSR1 if unset)
ENV_PREFLIGHT_TIMEOUT = "HPC_LAUNCH_PREFLIGHT_TIMEOUT"  # seconds for every rank to arrive
PREFLIGHT_TIMEOUT_S = 300.0  # ranks of a big job can take minutes to import torch on a shared filesystem
PREFLIGHT_OK = "[hpc-launch] preflight ok: "
PREFLIGHT_FAILED = "[hpc-launch] preflight failed: "
HANG_PREFIX = "[hpc-launch] hang: "  # hpc_launch/train/watchdog.py: which rank on which host stopped first
STRAGGLER_PREFIX = "[hpc-launch] straggler: "  # ... and which rank is persistently slower than the others

# The job's own verdict: a rank that ends the job for a reason of its own (the gate, the watchdog)
# writes its exit code to this file beside the log; the job script's exit trap reports that code,
# since the launcher's would be a signal's (srun returns 143 once it has terminated the other ranks).
VERDICT_SUFFIX = ".verdict"
ENV_VERDICT = "HPC_LAUNCH_VERDICT"


def report_verdict(code: int, env: "dict[str, str] | None" = None) -> None:
    """Inside a job: the exit code the job ends with, whatever the launcher returns (first one wins)."""
    import os

    path = (env if env is not None else os.environ).get(ENV_VERDICT)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return  # another rank said it first, or the directory is gone: the log still says why
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{code}\n")


BAD_HOST_PREFIX = "[hpc-launch] bad host: "
BAD_HOST_TTL_S = 24 * 3600.0  # a host is avoided this long after a job found it bad
# ... and appends `HOST<TAB>REASON` to this file beside the log (the job script exports its path),
# so the launcher reads a few bytes at the job's end instead of the whole log
BAD_HOSTS_SUFFIX = ".badhosts"
ENV_BAD_HOSTS = "HPC_LAUNCH_BAD_HOSTS"


# --failover: each swap onto a spare, in the job's log (templates/body/failover.sh.j2), read back for the summary:
# `[hpc-launch] failover: HOST swapped out for SPARE (REASON; ...)`
FAILOVER_PREFIX = "[hpc-launch] failover: "


# A run the scheduler preempted and requeues says so as it ends (dialects' preempted_shell), and a
# run the scheduler started again says which run it is: both read back for the summary.
PREEMPTED_PREFIX = "[hpc-launch] preempted at "
REQUEUED_RUN = r"^\[hpc-launch\] run (\d+) of job \S+: \w+ requeued it$"


# A chain link that found bad hosts keeps the links waiting for it off them before it exits, and
# says so in its log: `[hpc-launch] next link kept off HOSTS: job ID` (read back for the summary).
KEPT_OFF_PREFIX = "[hpc-launch] next link kept off "


def kept_off_in(log_text: str) -> "dict[str, list[str]]":
    """job id -> the hosts a chain link kept it off, from the link's log."""
    found: "dict[str, list[str]]" = {}
    for line in log_text.splitlines():
        if line.startswith(KEPT_OFF_PREFIX):
            hosts, _, job = line[len(KEPT_OFF_PREFIX) :].rpartition(": job ")
            if hosts and job.strip() and " " not in job.strip():
                found[job.strip()] = [h for h in hosts.split(",") if h]
    return found


def bad_hosts_path_for(log_path: str) -> str:
    return log_path + BAD_HOSTS_SUFFIX


def report_bad_host(host: str, reason: str, env: "dict[str, str] | None" = None) -> str:
    """Inside a job: say that `host` is bad (the line for the log, returned to print) and append it
    to the job's bad-hosts file."""
    import os

    path = (env if env is not None else os.environ).get(ENV_BAD_HOSTS)
    if path:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{host}\t{' '.join(reason.split())}\n")
        except OSError:
            pass  # the log line still says it
    return bad_host_line(host, reason)


def parse_bad_hosts_file(text: str) -> "dict[str, str]":
    found: "dict[str, str]" = {}
    for line in text.splitlines():
        host, _, reason = line.partition("\t")
        host = host.strip()
        if host and " " not in host and len(host) < 256:
            found[host] = reason.strip()[:300]
    return found


def bad_host_line(host: str, reason: str) -> str:
    return f"{BAD_HOST_PREFIX}{host}: {' '.join(reason.split())}"


def bad_hosts_in(log_text: str) -> "dict[str, str]":
    """host -> reason for every bad-host line in a job's log (the last reason per host wins)."""
    found: "dict[str, str]" = {}
    for line in log_text.splitlines():
        at = line.find(BAD_HOST_PREFIX)
        if at < 0:
            continue
        host, _, reason = line[at + len(BAD_HOST_PREFIX) :].partition(": ")
        host = host.strip()
        if host and " " not in host and len(host) < 256:
            found[host] = reason.strip()[:300]
    return found
