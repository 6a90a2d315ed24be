"""The causes of a job that fails while it runs: CUDA and its builds, memory, the queue's
limits, nodes and the network, hangs and timeouts, the walltime, and the last resort (an uncaught
exception). Part of CAUSES (causes.py), in its order after causes_setup."""

from __future__ import annotations

from .cause import Cause, scheduler_words, unscheduled_words

RUN: tuple[Cause, ...] = (
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
