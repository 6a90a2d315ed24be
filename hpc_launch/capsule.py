"""A job's capsule: what was submitted, kept with the job, so every chain link and requeue runs it.

WORKDIR/.hpc-launch/capsules/NAME-STAMP/ holds
- code/: a snapshot of the user's --script and the modules beside it that it can import (the
  job runs this copy, never the file the user goes on editing);
- capsule.json: when and from where it was submitted, by which hpc-launch, the resolved profile,
  the modules and environment asked for, the code's files (sha256) and git state;
- git.diff: the repository's uncommitted changes at submit;
- probe.py and runs.jsonl: each start of the job records what it found (capsule_probe.py).
`hpc-launch show JOB` prints it. The submit side reads files here; the job side is the probe.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import msgspec


from . import __version__
from .protocol import CAPSULE_CODE

if TYPE_CHECKING:
    from .resolve import ResolvedJob

# What `import x` from the script's directory can reach, and the small files it reads beside it.
CODE_SUFFIXES = (".py",)
CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".toml", ".cfg", ".ini")
MAX_CONFIG_BYTES = 1 << 20  # a bigger .json beside the script is data, not configuration: left out
MAX_FILES = 1000
MAX_BYTES = 16 << 20
MAX_DIFF_BYTES = 4 << 20


class CodeFile(msgspec.Struct, frozen=True):
    local: str  # absolute path on this machine
    rel: str  # path under the capsule's code/


SKIP_DIRS = ("__pycache__", "site-packages", "node_modules")
MAX_DEPTH = 4
MAX_ENTRIES = 20000  # directory entries looked at: a script in a home full of data is not walked whole


def snapshot(script: str) -> Tuple[List[CodeFile], bool]:
    """The files the job takes along for `script` (a local file): the script, and the .py and
    small configuration files in its directory and the directories below it (not hidden, not a
    virtual environment, MAX_DEPTH deep). (files, True) when that is all of them; (the script
    alone, False) when there is more than MAX_FILES files or MAX_BYTES, or too much to look at
    (a script in a home directory): the job then imports its neighbours where they are."""
    top = os.path.dirname(script)
    files = [CodeFile(script, os.path.basename(script))]
    total, seen = os.path.getsize(script), 0

    def walk(directory: str, rel: str, depth: int) -> bool:
        nonlocal total, seen
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return True  # unreadable: nothing of it can be imported either
        seen += len(entries)
        if seen > MAX_ENTRIES:
            return False
        for entry in entries:
            name = entry.name
            if name.startswith(".") or entry.path == script:
                continue
            if entry.is_dir(follow_symlinks=False):
                if name in SKIP_DIRS or depth >= MAX_DEPTH or os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                    continue
                if not walk(entry.path, f"{rel}{name}/", depth + 1):
                    return False
            elif entry.is_file() and (
                name.endswith(CODE_SUFFIXES)
                or (name.endswith(CONFIG_SUFFIXES) and entry.stat().st_size <= MAX_CONFIG_BYTES)
            ):
                files.append(CodeFile(entry.path, rel + name))
                total += entry.stat().st_size
                if len(files) > MAX_FILES or total > MAX_BYTES:
                    return False
        return True

    if walk(top, "", 0):
        return files, True
    return files[:1], False


def copy_mode(path: str) -> int:
    """The mode of a file's copy in the capsule: never more open than the original (its group and
    others' read bits at most; no write or execute for them), always readable by the user's job."""
    try:
        return 0o600 | (os.stat(path).st_mode & 0o044)
    except OSError:
        return 0o600  # gone since the snapshot: the copy fails later, and says so


def private_note(files: List[CodeFile]) -> Optional[str]:
    """The one line a user hears when files only they can read go along with --script (a config
    holding a token): their copies stay theirs alone, and how to keep them out."""
    private = [f.rel for f in files[1:] if copy_mode(f.local) == 0o600]
    if not private:
        return None
    them = "it" if len(private) == 1 else "them"
    return (
        f"only you can read {', '.join(private)} beside --script: the job's capsule keeps {them} 0600 "
        f"(move {them} out of {os.path.dirname(files[0].local)} if the job does not need {them})"
    )


def _git(directory: str, *args: str) -> Optional[str]:
    import subprocess  # here, as hashlib and socket below: `submit --dry-run`'s start-up is budgeted (launch-cost.md)

    try:
        out = subprocess.run(["git", "-C", directory, *args], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode("utf-8", "replace") if out.returncode == 0 else None


def git_state(directory: str) -> Tuple[Optional[Dict[str, Any]], str]:
    """(commit, branch, repository root, changed files) of the repository holding `directory`,
    and its uncommitted diff against HEAD; (None, "") outside a repository or without git."""
    head = _git(directory, "rev-parse", "--show-toplevel", "HEAD")
    if head is None:
        return None, ""
    root, commit = (head.split("\n") + ["", ""])[:2]
    branch = (_git(directory, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    status = _git(directory, "status", "--porcelain", "--untracked-files=normal", "--", ".") or ""
    diff = _git(directory, "diff", "HEAD", "--", ".") or ""
    if len(diff) > MAX_DIFF_BYTES:
        diff = diff[:MAX_DIFF_BYTES] + "\n# [hpc-launch] diff cut at 4 MiB\n"
    changed = [line[3:] for line in status.splitlines() if len(line) > 3]
    return {"root": root, "commit": commit, "branch": branch, "changed": changed}, diff


def _sha256(path: str) -> str:
    import hashlib

    from .paths import read_regular

    return hashlib.sha256(read_regular(path, limit=MAX_BYTES)).hexdigest()


def manifest(
    job: "ResolvedJob", uploads: List[Tuple[str, str]], host: str, code_source: Optional[str]
) -> Tuple[Dict[str, Any], str]:
    """capsule.json's content and the git diff: what this submission is (no secret: --pass-env
    names only, never values). `uploads`: (local file, path in the capsule) of the code sent."""
    import socket

    code: Dict[str, Any]
    diff = ""
    if not job.script:
        code = {"kind": "shipped entrypoint", "hpc_launch": __version__}
    elif uploads:
        source = code_source or os.path.dirname(uploads[0][0])
        repo, diff = git_state(source)
        code = {
            "kind": "snapshot",
            "source": source,
            "script": uploads[0][0],
            "files": [
                {
                    "path": rel.split(f"{CAPSULE_CODE}/", 1)[-1],
                    "sha256": _sha256(local),
                    "bytes": os.path.getsize(local),
                }
                for local, rel in uploads
            ],
            "git": repo,
        }
    else:
        code = {"kind": "copied on the cluster", "script": code_source}
    data = {
        "name": job.name,
        "cluster": job.profile.name,
        "submitted_at": time.time(),
        "submitted_from": socket.gethostname(),
        "submit_host": host,
        "hpc_launch": __version__,
        "workdir": job.workdir,
        "nodes": job.nodes,
        "procs_per_node": job.procs_per_node,
        "gpus_per_node": job.gpus_per_node,
        "walltime_s": job.walltime_s,
        "queue": job.queue,
        "chain": job.chain,
        "modules": list(job.modules),
        "venv": job.venv,
        "conda": job.conda,
        "env": dict(job.env),
        "pass_env_names": list(job.pass_env),
        "notify": job.notify,  # the name of the variable holding the webhook, never its value
        "train_args": list(job.train_args),
        # --container: the image by path (size, time, a small one's sha256), as submit found it where the job runs
        "container": job.container_record or ({"image": job.container} if job.container else None),
        "exclude": list(job.exclude),
        "spares": job.spares,
        "code": code,
        "profile": msgspec.to_builtins(job.profile),
    }
    return data, diff


def probe_source() -> str:
    from . import capsule_probe

    with open(capsule_probe.__file__, encoding="utf-8") as fh:
        return fh.read()
