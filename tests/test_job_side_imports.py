"""What a job runs on a compute node imports only the standard library and a few named leaves of
the package: a node's Python may lack the launcher's own dependencies (msgspec, jinja2, typer...),
and each import there is paid by every job. The entries are read from the job script templates
(every `-m hpc_launch.X` they run), so a new one is checked without editing this file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The package's modules a job-side entry may pull in besides its own: each is standard library only.
LEAVES = {
    "hpc_launch",
    "hpc_launch.protocol",
    "hpc_launch.paths",
    "hpc_launch.capsule_probe",
    "hpc_launch.stage_nodes",
    "hpc_launch.stage_wire",
    "hpc_launch.stage_stream",
    "hpc_launch.node_launch",
    "hpc_launch.one_line",
    "hpc_launch.start_gc",
}
# The payload is the one entry that imports torch and DeepSpeed: that is its job.
PAYLOAD = "hpc_launch.train"
# Started by code rather than by a template line: the job layer every `--script` rank starts
# through (`MODULE_FLAG hpc_launch.joblayer`), and the failure diagnosis notify runs as a child.
STARTED_BY_CODE = {"hpc_launch.joblayer", "hpc_launch.notify.cause"}


def _template_entries() -> set:
    found = set()
    for path in (REPO / "templates").rglob("*.j2"):
        found |= set(re.findall(r"(?:-m|--module) (hpc_launch(?:\.\w+)+)", path.read_text()))
    return found


ENTRIES = sorted((_template_entries() | STARTED_BY_CODE) - {PAYLOAD})


def _imported_by(module: str) -> list:
    code = (
        "import importlib, json, sys; before = set(sys.modules); importlib.import_module(%r); "
        "print(json.dumps(sorted(set(sys.modules) - before)))" % module
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_templates_name_the_entries_this_test_checks():
    # the scan finds what the job scripts run today: an empty or shrunken list would check nothing
    assert {"hpc_launch.notify", "hpc_launch.stage", "hpc_launch.gather", "hpc_launch.rendezvous_port"} <= set(ENTRIES)
    assert PAYLOAD in _template_entries()


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_job_side_entry_imports_only_the_standard_library_and_named_leaves(entry):
    loaded = _imported_by(entry)
    third_party = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"hpc_launch"})
    assert third_party == [], (entry, third_party)
    own = entry if entry.count(".") == 1 else entry.rsplit(".", 1)[0]
    ours = [m for m in loaded if m.startswith("hpc_launch") and m not in LEAVES]
    outside = [m for m in ours if m != own and not m.startswith(own + ".")]
    assert outside == [], (entry, outside)
