"""The house rule of issue 30: no module in hpc_launch/ (the payload included) above 450 lines,
no function above 80. A module or function that grows past them is split by what it does."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hpc_launch"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_longer_than_the_rule():
    long = {str(p.relative_to(PACKAGE)): n for p in _modules() if (n := p.read_text().count("\n")) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_longer_than_the_rule():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    assert long == {}


def test_the_walk_finds_the_package():
    assert len(_modules()) > 100 and (PACKAGE / "site" / "profiles.py") in _modules()
