"""sbatch's long options, as its getopt_long reads them: any unambiguous prefix is the option
(`#SBATCH --parti=big` is `--partition=big`), so the Slurm dialect keys a directive by the full
name before checking it (dialects/slurm.py `directive_key`)."""

from __future__ import annotations

from typing import List, Optional, Tuple

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


# sbatch's short options, asked of the real sbatch 22.05.8 on the testbed (`sbatch -X </dev/null`
# for each letter: "option requires an argument", "invalid option", or it went on), with the long
# option each is (sbatch(1)). getopt reads `-N9999` as -N 9999 and `-HN9999` as -H -N 9999 (the
# testbed's `#SBATCH -HN9999` asked for 9999 nodes); -k's value is optional, so `-kN5` is --no-kill=N5
# (sbatch: "Invalid --no-kill specification").
SBATCH_SHORT_WITH_VALUE = {
    "a": "array", "b": "begin", "c": "cpus-per-task", "d": "dependency", "e": "error", "i": "input",
    "m": "distribution", "n": "ntasks", "o": "output", "p": "partition", "q": "qos", "t": "time",
    "w": "nodelist", "x": "exclude", "A": "account", "B": "extra-node-info", "C": "constraint",
    "D": "chdir", "F": "nodefile", "G": "gpus", "J": "job-name", "L": "licenses", "M": "clusters",
    "N": "nodes", "S": "core-spec",
}  # fmt: skip
SBATCH_SHORT_OPTIONAL_VALUE = {"k": "no-kill"}
SBATCH_SHORT_FLAGS = {
    "h": "help", "s": "oversubscribe", "v": "verbose", "H": "hold", "O": "overcommit", "Q": "quiet",
    "W": "wait", "V": "version",
}  # fmt: skip


def short_options(word: str) -> List[Tuple[str, Optional[str]]]:
    """A word of short options as sbatch's getopt reads it: (long option, its attached value, or
    None when it has none or takes the next word); [] for a word that is not one (a long option,
    a value, a letter sbatch does not take, which it refuses itself)."""
    if not word.startswith("-") or word.startswith("--") or len(word) < 2:
        return []
    out: List[Tuple[str, Optional[str]]] = []
    for i, letter in enumerate(word[1:], start=2):
        rest = word[i:] or None
        if letter in SBATCH_SHORT_WITH_VALUE:
            return out + [("--" + SBATCH_SHORT_WITH_VALUE[letter], rest)]
        if letter in SBATCH_SHORT_OPTIONAL_VALUE:
            return out + [("--" + SBATCH_SHORT_OPTIONAL_VALUE[letter], rest)]
        if letter not in SBATCH_SHORT_FLAGS:
            return []
        out.append(("--" + SBATCH_SHORT_FLAGS[letter], None))
    return out


def line_options(line: str) -> List[str]:
    """Every option a `#SBATCH` line's words set through short options (sbatch getopts the line's
    words: `-Q -t 5` sets --quiet and --time), skipping the words that are their values."""
    keys: List[str] = []
    words = line.split()
    i = 0
    while i < len(words):
        found = short_options(words[i])
        keys += [key for key, _ in found]
        takes_next = bool(found) and found[-1][1] is None and found[-1][0][2:] in SBATCH_SHORT_WITH_VALUE.values()
        i += 2 if takes_next else 1
    return keys
