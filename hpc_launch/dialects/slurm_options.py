"""sbatch's long options, as its getopt_long reads them: any unambiguous prefix is the option
(`#SBATCH --parti=big` is `--partition=big`), so the Slurm dialect keys a directive by the full
name before checking it (dialects/slurm.py `directive_key`)."""

from __future__ import annotations

# Every long option sbatch 22.05.8 (Debian 12, the testbed) takes, as its getopt_long answers
# `sbatch --a` ... `sbatch --z` ("option '--a' is ambiguous; possibilities: ..."), with
# --job-name, --kill-on-invalid-dep and --licenses, the unique ones (f, x, y, z: none). Hidden ones
# (--bbf, --context, --delay-boot, ...) count: they make a prefix ambiguous. The testbed e2e asks
# the real sbatch again (tests/e2e/test_slurm_options_e2e.py).
SBATCH_LONG_OPTIONS = (
    "account acctg-freq array batch begin bb bbf cluster-constraint chdir cluster clusters comment "
    "container context contiguous constraint core-spec cores-per-socket cpu-freq cpus-per-gpu "
    "cpus-per-task deadline delay-boot dependency distribution error exclude exclusive export "
    "export-file extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node "
    "gpus-per-socket gpus-per-task gres gres-flags help hint hold ignore-pbs input job-name "
    "kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu "
    "mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks ntasks-per-core "
    "ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output overcommit "
    "oversubscribe parsable partition power prefer priority profile propagate qos quiet reboot "
    "requeue reservation signal sockets-per-node spread-job switches tasks-per-node test-only "
    "thread-spec threads-per-core time time-min tmp uid use-min-nodes usage verbose version wait "
    "wait-all-nodes wckey wrap"
).split()


def long_option(key: str) -> str:
    """`--parti` -> `--partition`, as sbatch reads it; anything else as given (an ambiguous prefix,
    `--nod`, sbatch refuses itself)."""
    if key.startswith("--") and key[2:] not in SBATCH_LONG_OPTIONS:
        found = [o for o in SBATCH_LONG_OPTIONS if o.startswith(key[2:])]
        if len(found) == 1:
            return "--" + found[0]
    return key
