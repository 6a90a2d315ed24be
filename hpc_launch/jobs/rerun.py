"""`hpc-launch rerun JOB --cluster OTHER`: the same training, from the job's capsule, on another site.

What the training is travels: the code the job ran (the capsule's copy), its training arguments,
nodes, GPUs per node where the other site's node has them, walltime, chain, the user's own --env
and the --pass-env names (their values come from this shell, at this submit: the capsule holds
names only). What the site is never travels: modules, venv, queue, group, directives, work dir and
the profile's environment come from the other profile and this command's options (a module name
of one site means nothing on another).
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ..site import profiles
from ..capsule_read import Capsule, load, read_code
from ..errors import SpecError
from ..protocol import CAPSULE_CODE, LOCAL_HOST
from ..records import JobRecord, JobStore
from ..walltime import hms
from .connect import transport_for
from .groups import lookup

if TYPE_CHECKING:
    from ..prepare import Prepared


@dataclass
class RerunUI:
    say: Callable[[str], Any]  # a line for the user (stderr)
    dry_run: Callable[["Prepared"], Any]  # print the script and the submit command
    on_recorded: Callable[[JobRecord], Any]  # the new job is submitted and recorded


def rerun(
    store: JobStore,
    ident: str,
    options: Dict[str, Any],
    ui: RerunUI,
    *,
    from_cluster: Optional[str] = None,
    profile_file: profiles.ProfileFiles = None,
    dry_run: bool = False,
) -> Optional[JobRecord]:
    """Submit job `ident`'s training again on options["cluster"] (default: its own cluster);
    `options` are submit's, given ones only (they win over what the capsule carries)."""
    record = lookup(store, ident, from_cluster).records[0]
    transport = transport_for(record.host)
    found = load(record, transport)
    m = found.manifest
    options = {k: v for k, v in options.items() if v is not None}
    cluster = options.pop("cluster", None) or m.get("cluster") or record.cluster
    profile = profiles.load(cluster, profile_file=profile_file)

    with tempfile.TemporaryDirectory(prefix="hpc-launch-rerun-") as scratch:
        carried, said = _carried(m, found, record, transport, profile, options, scratch)
        from ..prepare import prepare
        from ..spec import spec_from

        spec = spec_from(carried, options)
        prepared = prepare(spec, profile_file=profile_file, note=ui.say)
        ui.say(f"rerun of job {record.job_id} ({m.get('cluster')}) on {profile.name}:")
        for line in differences(m, prepared):
            ui.say(line)
        ui.say("carried over: " + "; ".join(said))
        ui.say("from " + profile.name + "'s profile and your options: modules, python environment, queue, group")
        if dry_run:
            ui.dry_run(prepared)
            return None
        from .submission import submit

        return submit(prepared, store=store, on_recorded=ui.on_recorded)


def _carried(
    m: Dict[str, Any],
    found: Capsule,
    record: JobRecord,
    transport: Any,
    profile: profiles.Profile,
    options: Dict[str, Any],
    scratch: str,
) -> Tuple[Dict[str, Any], List[str]]:
    """The JobSpec values the old job hands on, and a few words for each."""
    carried: Dict[str, Any] = {
        "cluster": profile.name,
        "name": m.get("name") or record.name,
        "chain": int(m.get("chain") or 1),
    }
    said: List[str] = []
    if "script" not in options:
        script, words = _code(found, record, transport, scratch)
        if script:
            carried["script"] = script
        said.append(words)
    if options.get("train_args") == []:  # an explicit empty --train-args '': no arguments at all
        options.pop("train_args")
        carried["train_args"] = []
    elif "train_args" not in options:
        carried["train_args"] = [str(a) for a in m.get("train_args") or []]
        said.append("train args " + (shlex.join(carried["train_args"]) or "(none)"))
    if m.get("nodes") and "nodes" not in options:
        carried["nodes"] = int(m["nodes"])
        said.append(f"{carried['nodes']} node(s)")
    if m.get("walltime_s") and "walltime" not in options:
        carried["walltime"] = hms(int(m["walltime_s"]))
        said.append(f"walltime {carried['walltime']}")
    if "gpus_per_node" not in options and m.get("gpus_per_node") is not None:
        old = int(m["gpus_per_node"])
        has = profile.node_gpus(options.get("queue") or profile.default_queue)
        if 0 < old <= has:
            carried["gpus_per_node"] = old
            said.append(f"{old} GPU(s) per node")
        elif old:  # more than the other site's node has: all of it, as submit's default
            said.append(f"not {old} GPU(s) per node: a {profile.name} node has {has}")
    # the user's own --env: the old profile's entries are that site's, not the training's
    site_env = (m.get("profile") or {}).get("env") or {}
    env = {k: str(v) for k, v in (m.get("env") or {}).items() if site_env.get(k) != v}
    if env:
        carried["env"] = env
        said.append("env " + " ".join(sorted(env)))
    notify = m.get("notify")
    if notify and "notify" not in options:  # the webhook's variable name: its value comes from this shell
        carried["notify"] = str(notify)
        said.append(f"notify via ${notify}")
    names = [n for n in m.get("pass_env_names") or [] if n != notify]
    if names:  # the names only: the values are read from this shell when the job is submitted
        options["pass_env"] = list(dict.fromkeys(names + list(options.get("pass_env") or [])))
        said.append("pass-env names " + " ".join(names) + " (values from this shell)")
    image = (m.get("container") or {}).get("image")
    if image and "container" not in options:  # the same image unless told otherwise (--container)
        carried["container"] = str(image)
        said.append(f"container image {image}")
    if carried["chain"] > 1 and "chain" not in options:
        said.append(f"chain of {carried['chain']}")
    return carried, said


def _code(found: Capsule, record: JobRecord, transport: Any, scratch: str) -> Tuple[Optional[str], str]:
    """The --script the rerun submits: the capsule's copy of the code (None: the shipped entrypoint)."""
    kind = found.manifest.get("code", {}).get("kind")
    files = read_code(found, transport)  # checked against the sha256 recorded at submit
    if not files:
        if kind != "shipped entrypoint":
            raise SpecError(
                f"job {record.job_id}'s capsule records no code the rerun can take", hint="give it with --script FILE"
            )
        return None, "code: the shipped entrypoint (python -m hpc_launch.train)"
    words = f"code: the capsule's copy of {files[0][0]}" + (
        f" and {len(files) - 1} file(s) beside it" if len(files) > 1 else ""
    )
    if record.host == LOCAL_HOST:
        return f"{found.path}/{CAPSULE_CODE}/{files[0][0]}", words
    # the capsule is on the old site's login host: its copy comes here for the time of the submit
    for rel, data in files:
        path = os.path.join(scratch, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    return os.path.join(scratch, files[0][0]), words + f" (from {record.host})"


def differences(m: Dict[str, Any], prepared: "Prepared") -> List[str]:
    """The table of what differs, for this job, between the old site and the new one."""
    job = prepared.job
    new = job.profile
    old: Dict[str, Any] = m.get("profile") or {}
    old_queue = ((old.get("queues") or {}).get(m.get("queue") or "") or {}) if m.get("queue") else {}
    new_queue = new.queues.get(job.queue) if job.queue else None
    rows = [
        ("scheduler", old.get("dialect"), new.dialect),
        ("launcher", (old.get("launch") or {}).get("launcher"), new.launch.launcher),
        (
            "GPUs per node",
            f"{m.get('gpus_per_node')} of {(old.get('node') or {}).get('gpus')}",
            f"{job.gpus_per_node} of {new.node_gpus(job.queue)}",
        ),
        ("ranks", f"{m.get('nodes')} x {m.get('procs_per_node')}", f"{job.nodes} x {job.procs_per_node}"),
        ("queue", m.get("queue"), job.queue),
        ("walltime limit", old_queue.get("max_walltime"), new_queue.max_walltime if new_queue else None),
        ("modules", " ".join(m.get("modules") or []), " ".join(job.modules)),
        ("interface", old.get("net_if"), new.net_if),
    ]
    shown = [(what, str(a or "-"), str(b or "-")) for what, a, b in rows if str(a or "-") != str(b or "-")]
    if not shown:
        return ["  the two sites agree on scheduler, launcher, GPUs, ranks, queue, modules and interface"]
    left = max(len(str(m.get("cluster"))), *(len(a) for _, a, _ in shown))
    lines = [f"  {'':<15}{str(m.get('cluster')):<{left}}  {new.name}"]
    lines += [f"  {what:<15}{a:<{left}}  {b}" for what, a, b in shown]
    return lines
