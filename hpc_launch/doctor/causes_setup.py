"""The causes of a job that fails before or while it starts: hpc-launch's own checks, the
container, the pre-flight gate, the batch arithmetic, the hostfile, ssh, modules, a missing torch.
Part of CAUSES (causes.py), in its order: the most specific first."""

from __future__ import annotations

from .cause import Cause

SETUP: tuple[Cause, ...] = (
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
)
