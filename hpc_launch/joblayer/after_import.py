"""Run a function right after a module is first imported, whoever imports it (standard library only).

The layer must never import torch or DeepSpeed itself (a rank that does not need them would pay
seconds), yet must act inside them once the user's code has: a finder at the head of
sys.meta_path notices the first import of a watched module, lets the real finder and loader do
their work, and calls the function on the finished module. The loader keeps its type (only this
one module's exec_module is wrapped, on the loader instance), so nothing that inspects
`__loader__` sees a difference.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence
from hpc_launch.one_line import say_ours

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

Action = Callable[[ModuleType], None]


def _say(line: str) -> None:
    say_ours(line)


def _run(name: str, actions: List[Action], module: ModuleType) -> None:
    for action in actions:
        try:
            action(module)
        except Exception as exc:  # noqa: BLE001 - the user's training must not fail for the layer's sake
            _say(f"note: the job layer's step after importing {name} failed ({type(exc).__name__}: {exc}); going on")


class _AfterImport:  # a meta path finder (importlib.abc itself costs ~7 ms of every rank's start)
    def __init__(self) -> None:
        self.pending: Dict[str, List[Action]] = {}

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname not in self.pending:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module") or not hasattr(loader, "__dict__"):
            return spec  # nothing to wrap (a namespace or built-in module): left as it is
        actions = self.pending.pop(fullname)
        real_exec = loader.exec_module

        def exec_then_act(module: ModuleType) -> None:
            try:
                real_exec(module)
            finally:
                loader.__dict__.pop("exec_module", None)  # this module only: the loader is itself again
            _run(fullname, actions, module)

        loader.exec_module = exec_then_act  # type: ignore[method-assign]
        return spec


_FINDER = _AfterImport()


def after_import(name: str, action: Action) -> None:
    """Call `action(module)` once `name` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        _run(name, [action], module)
        return
    _FINDER.pending.setdefault(name, []).append(action)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
