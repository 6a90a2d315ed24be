"""--pass-env: values reach the job in a file only the user can read, never in argv, the job
script, the job record or a scheduler attribute. One route for every dialect, here or over SSH.

Why not the scheduler: `qsub -v NAME` puts NAME=value in the job's Variable_List, which every
user reads with `qstat -f` on PBS Professional (query_other_jobs is true by default: shared
reference pbspro-observed 093-096, README item 13); Grid Engine shows it in `qstat -j`'s
env_list; Slurm's qsub wrapper turns it into `sbatch --export=none,NAME=value` on sbatch's
command line; Cobalt's `--env` is on the command line; and over SSH an `export NAME=value` in
the remote command is in the login node's process list.

So, before submitting, hpc-launch writes WORKDIR/.hpc-launch/<script>.secrets, created with mode
0600 and O_EXCL (never through an existing file or a symlink; over SSH the mode is set in the
SFTP open request, not by a chmod afterwards). The job's first lines (templates/body/
prologue.sh.j2) open it, delete it, and export what it holds. The submit command runs with these
names removed from its environment, so no scheduler stores a copy (sbatch's default
--export=ALL would).

Format: one line per variable, NAME<TAB>base64(value), so a value may hold any byte but NUL.
"""

from __future__ import annotations

import base64
import os
import posixpath
import re
from typing import Dict, Iterable, List, Mapping, Optional, Union

SUFFIX = ".secrets"
MARK = "***"
SHORT = 4  # a secret this short is masked only where it stands alone: as a substring it would garble words


def path_for(script_path: str) -> str:
    """WORKDIR/.hpc-launch/NAME-STAMP.sh -> WORKDIR/.hpc-launch/NAME-STAMP.secrets (the prologue
    derives the same path from $WORKDIR and $HPC_LAUNCH_SCRIPT)."""
    return posixpath.splitext(script_path)[0] + SUFFIX


def collect(names: Iterable[str], environ: Optional[Mapping[str, str]] = None) -> Dict[str, bytes]:
    """The values of `names` in this process's environment, as the bytes the shell had."""
    env = os.environ if environ is None else environ
    return {name: os.fsencode(env[name]) for name in names}


def encode(values: Mapping[str, Union[str, bytes]]) -> bytes:
    lines = []
    for name, value in values.items():
        raw = os.fsencode(value) if isinstance(value, str) else bytes(value)
        if b"\0" in raw:
            raise ValueError(f"the value of {name} contains a NUL byte")
        lines.append(name.encode("ascii") + b"\t" + base64.b64encode(raw) + b"\n")
    return b"".join(lines)


def submit_env(names: Iterable[str]) -> Optional[Dict[str, None]]:
    """The submit command's environment changes: these names removed (None = unset)."""
    return {name: None for name in names} or None


def value_forms(value: str) -> List[str]:
    """The ways a program may print a secret value: as it is, each of its lines, as Python's repr
    and as JSON quote it (a traceback, a logged dict)."""
    import json

    lines = [line.strip() for line in value.splitlines()]
    quoted = [repr(value)[1:-1], json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]]
    return [value, *lines, *quoted]


def masked(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by MARK, the longest first (so a part never leaves the
    rest of a longer one readable): a long one wherever it appears, a short one where no letter
    or digit touches it. Standard library only: the job runs this (notify/__init__.py, notify/cause.py)."""
    for secret in sorted({s for s in secrets if s and s.strip()}, key=len, reverse=True):
        if len(secret) >= SHORT:
            text = text.replace(secret, MARK)
        else:
            text = re.sub(rf"(?<![^\W_]){re.escape(secret)}(?![^\W_])", MARK, text)
    return re.sub(rf"(?:{re.escape(MARK)}){{2,}}", MARK, text)  # a host and a path side by side: one mark
