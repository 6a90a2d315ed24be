"""The causes `hpc-launch doctor` knows (doctor.py reads logs with them): for each, the failing
program's own words (taken from its source or its real output: tests/golden/doctor/, README there),
the cause and the fix as one line each, and where the words come from. The most specific first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple


def scheduler_words(key: str) -> Tuple[str, ...]:
    """Every scheduler's own wording for the cause `key` (each dialect's `failure_wording`)."""
    from .. import dialects

    return tuple(p for d in dialects.all_dialects() for p in dialects.scheduler_words(d, key))


def unscheduled_words(key: str) -> Tuple[str, ...]:
    """The wording for the cause `key` of the dialects with no scheduler (local, pods): hpc-launch's own."""
    from .. import dialects

    return tuple(p for d in dialects.all_dialects() if not d.has_scheduler for p in dialects.scheduler_words(d, key))


@dataclass(frozen=True)
class Facts:
    """What the scheduler and the exit-code file say, besides the log."""

    exit_code: Optional[int] = None
    state: Optional[str] = None
    comment: str = ""

    @property
    def cancelled(self) -> bool:
        return self.state == "cancelled"


@dataclass(frozen=True)
class Cause:
    key: str
    title: str  # a few words, for "also seen" and the docs
    patterns: Tuple[str, ...]  # the program's own words for this failure (regexes, re.M)
    cause: str  # one line; {name} from the pattern's named groups, [[...]] only when they matched
    fix: str
    source: str  # which program prints it, and where in its source
    weak: Tuple[str, ...] = ()  # words that also appear for other reasons: they count only after every strong match
    signal: Optional[Callable[[Facts], Optional[str]]] = None  # evidence from the exit code or state, not the log
    signal_weak: bool = False
    weak_cause: str = ""  # the cause line when the evidence is only weak
    # the last resort: only for a failed job that no other cause's own words explain (its words also show
    # in logs of jobs that ended well, and under the failures the other causes name)
    fallback: bool = False
    # Where no scheduler runs the job (local, pods) hpc-launch itself is the one that ended it: its words
    # (unscheduled_words) get these cause and fix lines instead, never "the scheduler ...".
    unscheduled_patterns: Tuple[str, ...] = ()
    unscheduled_cause: str = ""
    unscheduled_fix: str = ""


# The table, most specific first: the first cause that matches is the one shown; a weak match
# (a bare SIGKILL, a refused connection) ranks below every strong one.
CAUSES: Tuple[Cause, ...] = (
    Cause(
        "hpc_launch_nodes",
        "hpc-launch: fewer nodes than asked",
        (
            r"\[hpc-launch\] error: the scheduler's node list has (?P<have>\d+) "
            r"distinct host\(s\) but the job asked for (?P<want>\d+)",
        ),
        "the scheduler gave the job {have} distinct node(s) but it asked for {want}, so hpc-launch did not launch it",
        "make the scheduler put it on {want} separate nodes (PBS: --directive '-l place=scatter'; check the "
        "profile's directives), or ask for --nodes {have}",
        "hpc-launch's job script (templates/body/hostfile.sh.j2)",
    ),
    Cause(
        "container_image",
        "container image not found",
        (
            r"\[hpc-launch\] error: container image (?P<image>\S+) not found or not readable on (?P<host>\S+)",
            r"ch-run\[\d+\]: error: can't stat: (?P<image>\S+): No such file or directory",
            r"FATAL: +could not open image (?P<image>\S+?):",
        ),
        "the container image [[{image} ]]is not there (or not readable) where the job ran",
        "give --container the image's path on the cluster's shared file system (copy or pull it there), "
        "readable by you on every node",
        "hpc-launch's job script (templates/body/container.sh.j2); charliecloud 0.31 ch-run (ch_core.c); "
        "Apptainer's `could not open image` (apptainer exec, cited from its source, not produced here)",
    ),
    Cause(
        "container_bind",
        "container bind path missing",
        (
            r"ch-run\[\d+\]: error: can't bind: source not found: (?P<path>\S+)",
            r"ch-run\[\d+\]: error: can't mkdir: (?P<path>\S+): Read-only file system",
            r"mount source (?P<path>\S+) doesn't exist",
        ),
        "a path bound into the container [[({path}) ]]is missing on the node, or has no mount point in the image",
        "fix the profile's container.binds (each SRC must exist on every node); a read-only image needs the "
        "target directory inside it (charliecloud: mkdir it in the image directory)",
        "charliecloud 0.31 ch-run (ch_core.c, ch_misc.c); Apptainer's bind error (cited, not produced here)",
    ),
    Cause(
        "container_gpu",
        "GPU libraries not visible in the container",
        (r"WARNING: Could not find any (?:nv|rocm) libraries on this host",),
        "the runtime found no GPU driver libraries to bind into the container",
        "run on a GPU node and keep the profile's container.gpu_flags (--nv for NVIDIA, --rocm for AMD); "
        "load the driver/ROCm module before the launch",
        "Apptainer `exec --nv/--rocm` on a host without the libraries (cited from Apptainer's docs, not produced here)",
    ),
    Cause(
        "container_mpi_abi",
        "MPI ABI mismatch with the image",
        (r"error while loading shared libraries: (?P<lib>libmpi\S*\.so[.\d]*): cannot open shared object file",),
        "the image's program needs [[{lib}, ]]an MPI the host's launcher did not provide inside the container",
        "use an image built on the site's MPI family (the profile's container.mpi says which: MPICH ABI on Cray, "
        "Open MPI with hpcx), and its container.modules (Polaris: cray-mpich-abi)",
        "the dynamic loader's wording; ALCF Polaris containers page: 'libmpi.so.40 not found' for Open MPI images",
    ),
    Cause(
        "hpc_launch_net_if",
        "hpc-launch: net_if has no address",
        (
            r"\[hpc-launch\] error: network interface (?P<iface>\S+) \(profile key net_if\) has no IPv4 address on "
            r"(?P<host>\S+); this node has: (?P<have>.*?)\s*$",
        ),
        "the profile's net_if {iface} has no IPv4 address on {host}, so the rendezvous address could not be set",
        "set the profile key net_if to one of {host}'s interfaces ({have}) in "
        "~/.config/hpc-launch/clusters/CLUSTER.yaml (or --profile FILE with name: and net_if:)",
        "hpc-launch's job script (templates/body/rendezvous.sh.j2)",
    ),
    Cause(
        "hpc_launch_not_installed",
        "hpc-launch: not in the job's Python",
        (r"\[hpc-launch\] error: hpc-launch is not installed in the job's Python environment \((?P<python>[^)\n]*)\)",),
        "hpc-launch is not installed in the job's Python environment ({python}), which runs the training entrypoint",
        "pass --venv DIR of a virtualenv that has it (pip install "
        "'hpc-launch[train]' there), or set the profile's python.venv",
        "hpc-launch's job script (templates/body/job.sh.j2)",
    ),
    Cause(
        "preflight",
        "the job is not what was asked (pre-flight gate)",
        (
            r"^\[hpc-launch\] preflight failed: (?P<host>[^:\n]+): (?P<fact>.*?); fix: (?P<fix>.*?)\s*$",
            r"^error: (?P<fact>(?:the launcher \(|this process found no launcher's rank variables"
            r"|rank \d+ was started twice|the job is not what was asked|MASTER_PORT \d+ on ).*?)\s*$",
        ),
        "the job's pre-flight gate stopped it before training[[ on {host}]]: {fact}",
        "[[{fix}; ]]nothing trained: fix that and submit again (the gate's checks: docs/preflight.md)",
        "the shipped entrypoint's pre-flight gate (hpc_launch/train/preflight.py, hpc_launch/train/dist.py; exit 78)",
        signal=lambda f: (
            "exit code 78: the pre-flight gate found the job is not what was asked" if f.exit_code == 78 else None
        ),
    ),
    Cause(
        "hpc_launch_error",
        "hpc-launch: the job script stopped",
        (r"\[hpc-launch\] error: (?P<message>.*?)\s*$",),
        "hpc-launch's job script stopped the job: {message}",
        "do what the message says, then submit again",
        "hpc-launch's job script (templates/body/*.sh.j2: lines starting `[hpc-launch] error:`)",
    ),
    Cause(
        "batch_size",
        "batch sizes do not add up",
        (
            r"train_batch_size is not equal to micro_batch_per_gpu \* gradient_acc_step \* world_size (?P<train>\d+) "
            r"!= (?P<micro>\d+) \* (?P<accum>\d+) \* (?P<world>\d+)",
            r"batch arithmetic does not fit: global batch (?P<train>\d+) != micro-batch (?P<micro>\d+) x grad-accum "
            r"(?P<accum>\d+) x world size (?P<world>\d+)",
            r"Check batch related parameters\. train_batch_size is not equal",
            r"batch arithmetic does not fit",
        ),
        "the batch sizes do not add up: train_batch_size must be micro-batch x grad-accum x ranks[[ ({train} != "
        "{micro} x {accum} x {world})]]",
        "set train_batch_size in the DeepSpeed config to micro-batch x grad-accum x ranks[[ = {want}]], or leave it "
        "out and DeepSpeed derives it; with the shipped entrypoint give two of --micro-batch, --grad-accum, "
        "--global-batch in --train-args",
        "DeepSpeed (deepspeed/runtime/config.py, DeepSpeedConfig._batch_assertion); "
        "the shipped entrypoint (hpc_launch/train/ds_config.py)",
    ),
    Cause(
        "hostfile",
        "DeepSpeed refused the hostfile",
        (
            # the exception, not the source line a traceback quotes above it
            r"ValueError: Hostfile contains a bad entry: (?P<entry>.*?), unable to proceed with launching",
            r"ValueError: Hostfile contains multiple entries for (?P<twice>\S+), unable to proceed with launching",
            r"ValueError: Hostfile is empty or not formatted correctly",
            r"ValueError: Hostname '(?P<missing>[^'\n]+)' not found in hostfile",
        ),
        "DeepSpeed refused the hostfile[[: bad line '{entry}']][[: "
        "{twice} is listed twice]][[: {missing} is not in it]]",
        "each line must be `HOST slots=N`, each host once: check the hostfile the log prints after `[hpc-launch] "
        "hostfile` and any override of templates/body/hostfile.sh.j2 in ~/.config/hpc-launch/templates",
        "DeepSpeed's launcher (deepspeed/launcher/runner.py, _parse_hostfile and parse_inclusion_exclusion)",
    ),
    Cause(
        "ssh_host_key",
        "ssh refused a host key",
        (
            r"REMOTE HOST IDENTIFICATION HAS CHANGED",  # says more than the line that follows it
            r"^(?:(?P<host>[\w.-]+): )?Host key verification failed\.",
        ),
        "ssh refused a node's host key (unknown or changed)[[: {host}]], so the launcher could not start ranks there",
        "add the nodes' keys to ~/.ssh/known_hosts on the cluster (ssh-keyscan NODE "
        ">> ~/.ssh/known_hosts; a changed key: ssh-keygen -R NODE first, after asking "
        "the admins why), or give ssh options in the profile key launch.pdsh_ssh_args",
        "OpenSSH's ssh client (sshconnect.c); pdsh prefixes it with the host",
    ),
    Cause(
        "ssh_auth",
        "no passwordless ssh between nodes",
        (
            r"^(?:(?P<host>[\w.-]+): )?(?:\S+@\S+: )?Permission denied \((?P<methods>[^)\n]*)\)",
            r"pdsh@\S+: (?P<host>\S+): ssh exited with exit code 255",
            r"but host=(?P<host>\S+) was not reachable via ssh",
        ),
        "a node could not ssh to another without a password[[ ({host})]], so the launcher could not start ranks there",
        "on the cluster: ssh-keygen -t ed25519, append ~/.ssh/id_ed25519.pub to "
        "~/.ssh/authorized_keys, check `ssh NODE hostname` asks nothing; or use a "
        "launcher that needs no ssh (the profile key launch.launcher: mpirun, srun)",
        "OpenSSH's ssh client (`Permission denied (publickey)`), pdsh (src/common/pipecmd.c), DeepSpeed's launcher "
        "ssh check (deepspeed/launcher/runner.py)",
    ),
    Cause(
        "module_command",
        "`module` does not exist",
        (r"module: command not found",),
        "the `module` command does not exist where the job script ran (the site's module system was never loaded)",
        "set the profile key modules.init to the site's init line (e.g. `source /etc/profile.d/modules.sh`), or pass "
        "--modules '' where there are none",
        "bash (`NAME: command not found`)",
    ),
    Cause(
        "module_unknown",
        "a module does not exist",
        (
            r"The following module\(s\) are unknown:\s*(?P<module>\"[^\"\n]*\")?",
            r"Unable to locate a modulefile for '(?P<module>[^'\n]+)'",
            r"These module\(s\) or extension\(s\) exist but cannot be loaded as requested:\s*(?P<module>\"[^\"\n]*\")?",
        ),
        "module load failed: the site has no module[[ {module}]] by that name (or it needs others loaded first)",
        "find the exact name with `module avail` / `module spider NAME` on the login node, then pass it with "
        "--modules A,B (replaces the profile's modules.load)",
        "Lmod (messageDir/en.lua: e_Failed_Load, e_Failed_Load_2); Environment Modules (modulecmd.tcl)",
    ),
    Cause(
        "no_torch",
        "Python without torch/DeepSpeed",
        (r"ModuleNotFoundError: No module named '(?P<module>torch|deepspeed|torchvision)'",),
        "the job's Python has no {module}: no virtualenv (or the wrong one) was activated in the job",
        "activate the environment that has torch and DeepSpeed: "
        "--venv DIR (or the profile's python.venv / python.conda)",
        "Python (`ModuleNotFoundError`)",
    ),
    Cause(
        "cuda_mismatch",
        "CUDA toolkit is not torch's",
        (
            r"Installed CUDA version (?P<system>\d+\.\d+) does not match the version torch was compiled with "
            r"(?P<torch>\d+\.\d+), unable to compile",
        ),
        "DeepSpeed will not build its ops: the CUDA toolkit found "
        "({system}) is not the one torch was built with ({torch})",
        "load the CUDA {torch} module with --modules (or point CUDA_HOME at it), or install the torch build for CUDA "
        "{system}; --env DS_SKIP_CUDA_CHECK=1 skips the check at your own risk",
        "DeepSpeed's op builder (deepspeed/ops/op_builder/builder.py, assert_no_cuda_mismatch)",
    ),
    Cause(
        "jit_no_compiler",
        "no compiler for DeepSpeed's ops",
        (
            r": (?P<compiler>[^\s:]*(?:c\+\+|g\+\+|gcc|nvcc)): (?:command )?not found",
            r"No such file or directory: '(?P<compiler>[^'\n]*(?:c\+\+|g\+\+|gcc|nvcc))'",
            r"error: command '(?P<compiler>[^'\n]+)' failed: No such file or directory",
        ),
        "DeepSpeed could not build its ops: no compiler ({compiler}) on the node",
        "load the site's compiler and CUDA modules in the job with --modules (e.g. gcc, cuda), or install DeepSpeed "
        "with its ops prebuilt (DS_BUILD_OPS=1 pip install deepspeed) where there is one",
        "the shell (`c++: not found`) under torch.utils.cpp_extension's ninja build; torch's BuildExtension and "
        "setuptools (_distutils/spawn.py) at pip install",
    ),
    Cause(
        "jit_build",
        "an op's JIT build failed",
        (
            r"Error building extension '(?P<op>[^'\n]+)'",
            r"error: command '(?P<compiler>[^'\n]+)' failed with exit code \d+",
        ),
        "the JIT build of an op[[ ({op})]] failed: the compiler stopped with an error",
        "the first `error:` line above `ninja: build stopped` names it; load a compiler and CUDA that match torch "
        "with --modules, or prebuild the ops (DS_BUILD_OPS=1 pip install deepspeed)",
        "torch.utils.cpp_extension (`Error building extension`), ninja, setuptools",
        weak=(r"ninja: build stopped: subcommand failed",),
    ),
    Cause(
        "cuda_oom",
        "GPU out of memory",
        (
            r"OutOfMemoryError: (?:CUDA )?[Oo]ut of memory\. Tried to allocate (?P<size>[\d.]+ \w+)",
            r"CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ \w+)",
            r"CUDA error: out of memory",
        ),
        "a GPU ran out of memory[[ (it tried to allocate {size} more)]]",
        "lower --micro-batch and raise --grad-accum to keep the global batch (--train-args), or shard more: "
        "--zero 3, --offload optimizer, --precision bf16; `hpc-launch plan` estimates the memory per GPU",
        "PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, torch.OutOfMemoryError)",
    ),
    Cause(
        "host_oom",
        "host out of memory",
        (
            r"(?:Out of memory|Memory cgroup out of memory): Killed process \d+",
            *scheduler_words("host_oom"),
            r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)",
            r"^(?:\[rank\d+\]: )?MemoryError\b",
        ),
        "a node ran out of host memory: the out-of-memory killer (or the scheduler's memory limit) stopped the job",
        "use less memory per node: lower --micro-batch, fewer ranks per node (--gpus-per-node), --num-workers 0 or "
        "--offload none (--train-args); or ask the scheduler for more memory (--directive, e.g. Slurm --mem)",
        "Slurm slurmstepd (task/cgroup/task_cgroup_memory.c), Linux (mm/oom_kill.c), "
        "PBS MoM (mom_main.c: mem, vmem), PyTorch's CPU allocator, Python; for a "
        "bare SIGKILL: bash (`Killed`), DeepSpeed's launcher (`return code = -9`)",
        weak=(r"exits with return code = -9\b", r": line \d+: +\d+ Killed\s"),
        signal=lambda f: "exit code 137 (SIGKILL) that nobody asked for" if f.exit_code == 137 else None,
        signal_weak=True,
        weak_cause=(
            "a rank was killed with SIGKILL that nobody asked for: on a "
            "compute node that is almost always the out-of-memory killer"
        ),
    ),
    Cause(
        "queue_limit",
        "the queue refuses the request",
        scheduler_words("queue_limit"),
        "the scheduler will not run the job as asked: it exceeds what the queue allows[[ ({why})]]",
        "ask for what the queue allows: fewer --nodes, a shorter --walltime or another --queue (`hpc-launch clusters "
        "show CLUSTER` lists each queue's limits)",
        "PBS Pro qsub (pbs_messages.c) and its scheduler's `Can Never Run` comment; Slurm sbatch (slurm_errno.c) and "
        "job reasons (job_state_reason.c); Grid Engine qsub",
    ),
    Cause(
        "node_failure",
        "a node failed under the job",
        scheduler_words("node_failure"),
        "the node {host} failed under the job[[ ({why})]]: the "
        "scheduler could not reach it, so the job's ranks there stopped",
        "submit again (or let --chain's next link run): hpc-launch now keeps jobs on this cluster off {host} for a day "
        "(`hpc-launch hosts` lists it, `hpc-launch hosts --forget {host}` clears it); tell the admins if it stays down",
        "Slurm srun (src/api/step_launch.c: `Task launch for StepId ... failed on node`, `Node failure on`)",
    ),
    Cause(
        "wrong_interface",
        "ranks advertised a loopback address",
        (r"Gloo connectFullMesh failed with .*?remote=\[(?P<addr>127\.[\d.]+)\]",),
        "the ranks told each other a loopback address ({addr}): GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME name lo, or "
        "the hostname resolves to 127.0.1.1",
        "set the profile key net_if to the interface the nodes share (`ip -4 addr` on a compute node, e.g. ib0 or "
        "eth0): hpc-launch sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME from it",
        "gloo (transport/tcp/pair.cc) under PyTorch's ProcessGroupGloo",
    ),
    Cause(
        "rendezvous",
        "a rank cannot reach MASTER_ADDR",
        (
            r"(?:DistNetworkError|RuntimeError): The client socket has (?:timed out|failed to connect)"
            r"[^\n]*?\((?P<addr>[^,()\n]+), (?P<port>\d+)\)",
            r"Gloo connectFullMesh failed with .*?remote=\[(?P<addr>[^\]\n]+)\]:(?P<port>\d+)",
            r"RuntimeError: connect\(\) timed out",
            r"The connection to the C10d store has failed",
            r"Timed out initializing process group in store based barrier",
        ),
        "a rank could not reach the rendezvous at MASTER_ADDR:MASTER_PORT or a peer[[ ({addr}:{port})]]: the wrong "
        "network interface, a firewall, or a rank that never started",
        "set the profile key net_if to the interface the nodes reach each other on (hpc-launch takes MASTER_ADDR, "
        "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME from it), and check that MASTER_PORT (the `[hpc-launch] "
        "MASTER_ADDR=` line) is open between the nodes",
        "PyTorch c10d (torch/csrc/distributed/c10d/socket.cpp, TCPStore.cpp; distributed_c10d.py; elastic "
        "c10d_rendezvous_backend.py), gloo (transport/tcp/pair.cc)",
        weak=(r"Connection refused", r"No route to host"),
    ),
    Cause(
        "hang",
        "a rank hung (watchdog)",
        (
            r"^\[hpc-launch\] hang: rank (?P<rank>\d+) on (?P<host>\S+) (?P<why>.*?); no rank advanced for "
            r"(?P<idle>\d+) s \(bound (?P<bound>\d+) s\)",
        ),
        "the job hung: rank {rank} on {host} {why}, and the others waited for it {idle} s (the watchdog's bound was "
        "{bound} s); the live ranks' Python stacks are in the log (`[hpc-launch] stacks of rank`)",
        "read rank {rank}'s stack (or the others': where they wait) in the log; if {host} "
        "froze, submit again: hpc-launch keeps later jobs off it for a day (`hpc-launch "
        "hosts`); a training that legitimately pauses longer sets HPC_LAUNCH_HANG_S",
        "the shipped entrypoint's watchdog (hpc_launch/train/watchdog.py; exit 124)",
        signal=lambda f: "exit code 124: the watchdog ended a hung job" if f.exit_code == 124 else None,
        signal_weak=True,
    ),
    Cause(
        "collective_timeout",
        "a collective timed out (NCCL/gloo)",
        (
            r"Watchdog caught collective operation timeout: "
            r"WorkNCCL\((?P<work>[^)\n]*)\) ran for (?P<ms>\d+) milliseconds",
            r"Watchdog caught collective operation timeout",
            r"Timed out waiting (?P<ms>\d+)ms for (?:recv|send) operation to complete",
        ),
        "a collective operation timed out[[ after {ms} ms]]: a rank stopped (crashed, hung, far slower than the "
        "others) or the interconnect failed",
        "look for an earlier failure of one rank in the log (it shows under `also seen`); if there is none a rank "
        "hung: check its data loading and the interconnect (--env NCCL_DEBUG=INFO), and set the profile key net_if "
        "to the fast interface (e.g. ib0)",
        "PyTorch's ProcessGroupNCCL watchdog (ProcessGroupNCCL.cpp); gloo (transport/tcp/unbound_buffer.cc)",
    ),
    Cause(
        "stopped_for_time",
        "stopped itself before its walltime (resumable)",
        (r"^\[hpc-train\] stopped for time at step (?P<step>\d+) of (?P<total>\d+)",),
        "the training stopped itself before its walltime[[ at step {step} "
        "of {total}]], after writing a complete checkpoint: nothing failed",
        "nothing to fix: submit the same job again, or use --chain N, and it resumes from that checkpoint; ask for "
        "more --walltime to need fewer links",
        "the shipped entrypoint (hpc_launch/train/trainer.py, exit 75 = stopped for time, resumable)",
        signal=lambda f: (
            "exit code 75: stopped for time at a complete checkpoint, resumable" if f.exit_code == 75 else None
        ),
    ),
    Cause(
        "walltime",
        "walltime exceeded",
        scheduler_words("walltime"),
        "the job ran out of walltime[[ ({used} s used, limit {limit} s)]]: the scheduler killed it at its limit",
        "ask for more with --walltime (up to the queue's limit: `hpc-launch "
        "clusters show CLUSTER`), or train in pieces that resume: --train-args '... "
        "--checkpoint-dir DIR --checkpoint-every N' (the next job resumes by itself)",
        "PBS MoM (`=>> PBS: job killed: walltime`, mom_main.c); Slurm slurmstepd (`DUE TO TIME LIMIT`, "
        "slurmstepd/req.c); Grid Engine h_rt (qacct failed 37) through the job's state",
        signal=lambda f: (
            "the scheduler ended the job at its time limit (state timeout)"
            if f.state == "timeout" and f.exit_code != 75
            else None
        ),
        unscheduled_patterns=unscheduled_words("walltime"),
        unscheduled_cause="the job ran out of walltime: there is no scheduler here, so hpc-launch ended it at the "
        "walltime it was given (SIGTERM, then SIGKILL to what still ran after the grace)",
        unscheduled_fix="ask for more with --walltime, or train in pieces that resume: --train-args '... "
        "--checkpoint-dir DIR --checkpoint-every N' (the next job resumes by itself)",
    ),
    Cause(
        "python_exception",
        "a Python exception ended a rank",
        (
            r"^(?:\[rank(?P<rank>\d+)\]:\s*)?(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): "
            r"(?P<msg>\S.*?)\s*$",
        ),
        "[[rank {rank} ]]raised {exc}: {msg}",
        "the traceback just above the evidence line in the log shows where; where it ends inside torch or DeepSpeed, "
        "search the message with their versions (the log's start-up lines name them)",
        "CPython's report of an uncaught exception (Lib/traceback.py, format_exception_only); torchrun and "
        "DeepSpeed's launcher prefix each line with [rankN]:",
        fallback=True,
    ),
)
