"""Collecting the suite imports no training framework. Every pytest process imports every test
module to collect it (five in CI, one per xdist worker in the fast tier), so a framework imported at
a module's top is paid by all of them: transformers at the top of one module took 2.5-3.3 CPU-s of
each process's collection (3.9 -> 1.5 CPU-s once it moved into its test). Tests import them where
they run."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
HEAVY = {"torch", "torchvision", "deepspeed", "transformers", "accelerate", "lightning", "wandb", "tensorboard"}


def _top_level_imports(tree: ast.Module) -> list:
    """Modules imported when the module itself is imported: its body, and the bodies of top-level
    if/try blocks (not functions, classes' methods or strings holding scripts)."""
    names, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append((node.lineno, node.module))
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, "finalbody", [])
            todo += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
    return names


def test_no_test_module_imports_a_training_framework_at_its_top():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if "golden" in path.relative_to(TESTS).parts:
            continue  # the users' scripts the doctor tests read: data, never imported
        for line, name in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if name.split(".")[0] in HEAVY:
                found.append(f"{path.relative_to(TESTS)}:{line} imports {name}")
    assert found == [], "\n".join(found)


def test_the_check_sees_an_import_at_the_top_and_inside_a_try_but_not_in_a_function():
    tree = ast.parse(
        "import torch\ntry:\n    from transformers import Trainer\nexcept ImportError:\n    pass\n"
        "def f():\n    import deepspeed\nSCRIPT = 'import lightning'\n"
    )
    assert sorted(name for _, name in _top_level_imports(tree)) == ["torch", "transformers"]
