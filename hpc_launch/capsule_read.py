"""Reading a job's capsule back (capsule.py writes it): `hpc-launch show`, `rerun` and the logs'
code lines. A capsule is the job's own files: a damaged one is named with its file and key."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import msgspec

from .capsule import MAX_BYTES  # the most code a capsule holds: what submit copied
from .errors import SpecError
from .protocol import CAPSULE_CODE, CAPSULE_GIT_DIFF, CAPSULE_MANIFEST, CAPSULE_RUNS, LOCAL_HOST

if TYPE_CHECKING:
    from .records import JobRecord
    from .transport.base import Transport


class Capsule(msgspec.Struct):
    path: str
    manifest: Dict[str, Any]
    runs: List[Dict[str, Any]]


# What `show` and `rerun` read of capsule.json, typed: a damaged file is named with the key that
# is wrong (msgspec says where), never met later as a KeyError. Other keys are not read here.
class _File(msgspec.Struct):
    path: str
    bytes: int
    sha256: Optional[str] = None


class _Git(msgspec.Struct):
    commit: str
    root: str
    branch: Optional[str] = None
    changed: List[str] = []


class _Code(msgspec.Struct):
    kind: str
    files: List[_File] = []
    script: Optional[str] = None
    source: Optional[str] = None
    git: Optional[_Git] = None


class _Launch(msgspec.Struct, frozen=True):
    launcher: Optional[str] = None


class _Profile(msgspec.Struct, frozen=True):
    name: Optional[str] = None
    dialect: Optional[str] = None
    launch: _Launch = _Launch()
    env: Dict[str, Any] = {}


class _Manifest(msgspec.Struct):
    name: str
    cluster: str
    code: _Code
    submitted_at: float = 0.0
    submitted_from: Optional[str] = None
    hpc_launch: Optional[str] = None
    nodes: Optional[int] = None
    procs_per_node: Optional[int] = None
    gpus_per_node: Optional[int] = None
    walltime_s: Optional[int] = None
    queue: Optional[str] = None
    chain: int = 1
    modules: List[str] = []
    venv: Optional[str] = None
    conda: Optional[str] = None
    env: Dict[str, str] = {}
    pass_env_names: List[str] = []
    notify: Optional[str] = None
    train_args: List[str] = []
    profile: _Profile = _Profile()


class DamagedCapsule(SpecError):
    """A capsule file that cannot be read as written: which file, and what to do instead."""

    def __init__(self, record: "JobRecord", path: str, what: str):
        where = "" if record.host == LOCAL_HOST else f" on {record.host}"
        super().__init__(
            f"job {record.job_id}'s capsule file {path}{where} is damaged ({what}): it cannot say what was submitted",
            hint=(
                f"the job itself is not affected: `hpc-launch logs {record.job_id}` and its script "
                f"{record.script_path} show what ran; to run it again, submit with --script FILE and its options"
            ),
        )


MAX_READ_BYTES = 16 << 20  # capsule.json and runs.jsonl are kilobytes: more is not a capsule of ours


def _read_text(transport: "Transport", path: str, record: Optional["JobRecord"] = None) -> Optional[str]:
    """The file's text; None when it is not there. Bounded: one bigger than MAX_READ_BYTES is damaged;
    a FIFO or a device put where it should be is one line, never a read that waits or never ends."""
    from .paths import NotAUserFile

    data, offset = b"", 0
    size = transport.size(path)
    if size is None:
        return None
    if size > MAX_READ_BYTES and record is not None:
        raise DamagedCapsule(record, path, f"{size >> 20} MiB, more than a capsule file ever holds")
    try:
        while len(data) <= MAX_READ_BYTES:
            chunk = transport.read_from(path, offset)
            if not chunk:
                break
            data += chunk
            offset += len(chunk)
    except NotAUserFile as exc:
        if record is not None:
            raise DamagedCapsule(record, path, f"{exc.strerror}: something else put it there") from None
        raise SpecError(
            f"{path} {exc.strerror}: not a capsule file hpc-launch wrote",
            hint="remove it (something else put it in the job's capsule)",
        ) from None
    if len(data) > MAX_READ_BYTES:
        if record is not None:
            raise DamagedCapsule(record, path, "more than a capsule file ever holds")
        raise SpecError(f"{path} is over 16 MiB: not a capsule file hpc-launch wrote")
    return data.decode("utf-8", "replace")


def _manifest(record: "JobRecord", path: str, text: str) -> Dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DamagedCapsule(record, path, f"not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(data, dict):
        raise DamagedCapsule(record, path, f"a JSON {type(data).__name__}, not the object it was written as")
    try:
        msgspec.convert(data, _Manifest)
    except msgspec.ValidationError as exc:
        raise DamagedCapsule(record, path, str(exc).replace("`", "")) from None
    return data


def load(record: "JobRecord", transport: "Transport") -> Capsule:
    path = record.extra.get("capsule") if record.extra else None
    if not path:
        raise SpecError(
            f"job {record.job_id} has no capsule (it was adopted, or submitted before jobs had capsules)",
            hint="its script is still there: `hpc-launch logs` and its record (`hpc-launch status --json`)",
        )
    manifest_path = f"{path}/{CAPSULE_MANIFEST}"
    text = _read_text(transport, manifest_path, record)
    if text is None:
        where = "" if record.host == LOCAL_HOST else f" on {record.host}"
        raise SpecError(
            f"job {record.job_id}'s capsule {path}{where} is gone",
            hint="it lived in the job's work dir: was .hpc-launch/ removed there?",
        )
    manifest = _manifest(record, manifest_path, text)
    runs = []
    for line in (_read_text(transport, f"{path}/{CAPSULE_RUNS}", record) or "").splitlines():
        try:
            run = json.loads(line)
        except ValueError:
            continue  # a line cut by a node that died while writing it
        if isinstance(run, dict):
            runs.append(run)
    return Capsule(path, manifest, runs)


def read_code(capsule: Capsule, transport: "Transport") -> List[Tuple[str, bytes]]:
    """The capsule's copy of the user's code as (path under code/, bytes), the script first: a
    snapshot's files, each checked against its recorded sha256; a script copied on the cluster
    alone; none for the shipped entrypoint. `rerun` submits this copy elsewhere."""
    import hashlib

    code = capsule.manifest.get("code", {})
    if code.get("kind") == "snapshot":
        wanted = [(f["path"], f.get("sha256")) for f in code.get("files", [])]
    elif code.get("kind") == "copied on the cluster" and code.get("script"):
        wanted = [(str(code["script"]).rstrip("/").rsplit("/", 1)[-1], None)]
    else:
        return []
    out, total = [], 0
    for rel, digest in wanted:
        norm = os.path.normpath(rel)
        if os.path.isabs(norm) or norm == ".." or norm.startswith("../"):
            raise SpecError(f"capsule {capsule.path} names a code file outside it: {rel!r}")
        path = f"{capsule.path}/{CAPSULE_CODE}/{norm}"
        data, offset = b"", 0
        if transport.size(path) is None:
            raise SpecError(
                f"the capsule's copy of {rel} ({path}) is gone",
                hint="give the code again with --script FILE",
            )
        while True:
            chunk = transport.read_from(path, offset)
            if not chunk:
                break
            data += chunk
            offset += len(chunk)
            total += len(chunk)
            if total > MAX_BYTES:
                raise SpecError(f"the capsule's code in {capsule.path} is over 16 MiB", hint="give --script FILE")
        if digest and hashlib.sha256(data).hexdigest() != digest:
            raise SpecError(
                f"the capsule's copy of {rel} ({path}) changed since submit (its sha256 differs)",
                hint="give the code with --script FILE",
            )
        out.append((norm, data))
    return out


def describe(capsule: Capsule) -> List[str]:
    """`hpc-launch show`'s lines: the submission, its code, the profile, each start of the job."""
    from .capsule_probe import differences

    m = capsule.manifest
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.get("submitted_at", 0)))
    lines = [
        f"{m['name']} on {m['cluster']}: submitted {when} from "
        f"{m.get('submitted_from')} by hpc-launch {m.get('hpc_launch')}",
        f"  capsule   {capsule.path}",
        f"  asked     {m.get('nodes')} node(s) x {m.get('procs_per_node')} rank(s), {m.get('gpus_per_node')} GPU(s) "
        f"a node, walltime {m.get('walltime_s')} s"
        + (f", queue {m['queue']}" if m.get("queue") else "")
        + (f", chain of {m['chain']}" if m.get("chain", 1) > 1 else ""),
    ]
    code = m.get("code", {})
    if code.get("kind") == "snapshot":
        files = code.get("files", [])
        lines.append(
            f"  code      {len(files)} file(s) from {code.get('source')}, "
            f"{sum(f['bytes'] for f in files)} bytes: the job runs this copy"
        )
        repo = code.get("git")
        if repo:
            dirty = (
                f", {len(repo['changed'])} file(s) changed: {CAPSULE_GIT_DIFF}" if repo.get("changed") else ", clean"
            )
            lines.append(
                f"  git       {repo['commit'][:12]} on {repo.get('branch') or '(detached)'} in {repo['root']}{dirty}"
            )
    elif code.get("kind") == "shipped entrypoint":
        lines.append(
            f"  code      the shipped entrypoint of hpc-launch {code.get('hpc_launch')} in the job's Python environment"
        )
    else:
        lines.append(f"  code      {code.get('script')}, copied on the cluster at submit: the job runs this copy")
    env = m.get("venv") or m.get("conda") or "the profile's python"
    lines.append(f"  python    {env}; modules asked: {' '.join(m.get('modules') or []) or '(none)'}")
    if m.get("train_args"):
        lines.append(f"  args      {' '.join(m['train_args'])}")
    profile = m.get("profile", {})
    lines.append(
        f"  profile   {profile.get('name')} ({profile.get('dialect')}, launcher "
        f"{profile.get('launch', {}).get('launcher')}), recorded whole in {CAPSULE_MANIFEST}"
    )
    if not capsule.runs:
        lines.append("  runs      none yet (the job records what it finds when it starts)")
    for i, run in enumerate(capsule.runs):
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("started_at", 0)))
        head = (
            f"  run {i + 1}     job {run.get('job_id')} on {run.get('host')} at {at}: Python {run.get('python')}, "
            f"{len(run.get('packages', []))} packages"
        )
        if run.get("modules"):
            head += f", modules {' '.join(run['modules'])}"
        lines.append(head)
        for change in differences(capsule.runs[0], run) if i else []:
            lines.append(f"            {change}")
    return lines


def as_json(capsule: Capsule) -> Dict[str, Any]:
    return {"path": capsule.path, "manifest": capsule.manifest, "runs": capsule.runs}
