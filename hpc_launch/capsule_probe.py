"""What a start of the job found where it runs, beside what was submitted.

Copied into the job's capsule at submit and run by the job script before the launch, with the
job's own Python: `python CAPSULE/probe.py CAPSULE JOB_ID`. Standard library only (a user's
--script environment need not have hpc-launch) and Python 3.8 syntax (the oldest a site may
give). It appends one JSON line to CAPSULE/runs.jsonl (Python, packages, loaded modules from
$HPC_LAUNCH_MODULES, the shipped entrypoint's code digest) and prints what differs from the
first start's line: a chain link or a requeue whose environment changed under it says so in its
log. It never fails the job: the job script ignores its exit status.
"""

import os
import sys
import time

# hashlib, json and socket are imported where used: hpc_launch.protocol imports this module, and
# `hpc-launch hostfile` (every node of every job) would pay for them without using them.

RUNS = "runs.jsonl"
NOTE = "[hpc-launch] capsule: "


def packages():
    from importlib import metadata

    found = set()
    for dist in metadata.distributions():
        name, version = name_and_version(dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "")
        if name:
            found.add("%s==%s" % (name, version))
    return sorted(found, key=str.lower)


def name_and_version(metadata_text):
    """The Name and Version fields of a METADATA file, read from its header alone: `dist.metadata`
    parses the long description after it too (0.11 s of CPU for a training venv's 126 packages, on
    every start of every job, against 0.01 s; the whole probe 0.16 -> 0.07 s, measured)."""
    fields = {}
    for line in metadata_text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in fields:
            fields[key] = value.strip()
    return fields.get("Name"), fields.get("Version")


def entrypoint_digest():
    """sha256 of the shipped entrypoint's files (hpc_launch/train/ and hpc_launch/train_entry.py) as this
    Python would import them, found without importing anything; None without hpc-launch."""
    from importlib.util import find_spec

    try:
        spec = find_spec("hpc_launch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    package = os.path.dirname(spec.origin)
    files = [os.path.join(package, "train_entry.py")]
    train = os.path.join(package, "train")
    for top, dirs, names in os.walk(train):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.join(top, n) for n in sorted(names) if n.endswith(".py")]
    import hashlib

    digest = hashlib.sha256()
    for path in files:
        try:
            with open(path, "rb") as fh:
                digest.update(os.path.relpath(path, os.path.dirname(package)).encode() + b"\0" + fh.read())
        except OSError:
            continue
    return digest.hexdigest()


def loaded_modules(terse):
    """Module names from `module -t list` (Lmod and Environment Modules): one a line, under a
    heading that ends with ':'."""
    lines = [line.strip() for line in terse.splitlines()]
    return [line for line in lines if line and not line.endswith(":") and not line.startswith("No modules")]


def found(job_id):
    import socket

    return {
        "job_id": job_id,
        "host": socket.gethostname(),
        "started_at": time.time(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "packages": packages(),
        "modules": loaded_modules(os.environ.get("HPC_LAUNCH_MODULES", "")),
        "entrypoint": entrypoint_digest(),
    }


def differences(first, now):
    """Lines naming what `now` has that the first start did not (packages, modules, Python, code)."""
    out = []
    before, after = set(first.get("packages", [])), set(now.get("packages", []))
    if before != after:
        gone, new = sorted(before - after, key=str.lower), sorted(after - before, key=str.lower)
        out.append(
            "Python packages changed since job %s: %s"
            % (first.get("job_id"), " ".join(["-" + p for p in gone] + ["+" + p for p in new]))
        )
    if first.get("modules") != now.get("modules"):
        out.append(
            "modules changed since job %s: %s -> %s"
            % (
                first.get("job_id"),
                " ".join(first.get("modules") or ["(none)"]),
                " ".join(now.get("modules") or ["(none)"]),
            )
        )
    if first.get("python") != now.get("python"):
        out.append("Python %s since job %s, now %s" % (first.get("python"), first.get("job_id"), now.get("python")))
    if first.get("entrypoint") != now.get("entrypoint"):
        out.append(
            "the shipped entrypoint's code differs from job %s's (hpc-launch was reinstalled or edited)"
            % first.get("job_id")
        )
    return out


def first_run(path):
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.readline()
        import json

        return json.loads(line) if line.strip() else None
    except (OSError, ValueError):
        return None


def main(argv):
    import json

    capsule, job_id = argv[1], argv[2]
    path = os.path.join(capsule, RUNS)
    now = found(job_id)
    first = first_run(path)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(now, sort_keys=True) + "\n")
    if first is None:
        print(
            "%sjob %s recorded: Python %s, %d packages%s"
            % (
                NOTE,
                job_id,
                now["python"],
                len(now["packages"]),
                ", modules " + " ".join(now["modules"]) if now["modules"] else "",
            )
        )
    else:
        changes = differences(first, now)
        for line in changes:
            print(NOTE + "warning: " + line)
        if not changes:
            print(
                "%sjob %s runs what job %s ran: same Python, packages and modules" % (NOTE, job_id, first.get("job_id"))
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
