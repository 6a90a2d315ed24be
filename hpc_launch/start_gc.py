"""Fewer garbage collections while a rank starts.

A rank's start is imports (torch; torch._dynamo, which the first optimizer step imports; DeepSpeed)
and building the model and engine: millions of objects made and few freed, over which CPython's
default young-generation threshold (700) runs the cyclic collector thousands of times. Raised to
50,000 until the rank's first optimizer step, then put back: the imports alone took 8 % less CPU
(3.30 -> 3.00 CPU-s), a two-rank start-to-end of the entrypoint 12 % (5.11 -> 4.50 CPU-s; both
`farm-bench --vs`, docs/launch-cost.md). The training loop's garbage is collected as Python always
does; before the first step at most some 50,000 unreachable objects wait (a few MB of small ones).
Standard library only: it runs in every rank."""

from __future__ import annotations

import gc

START_THRESHOLD = 50_000
_put_back: list[tuple[int, ...]] = []  # the thresholds before relax(), while relaxed


def relax() -> None:
    """Until restore(): the young generation collected every START_THRESHOLD allocations, not 700."""
    if not _put_back:
        before = gc.get_threshold()
        _put_back.append(before)
        gc.set_threshold(START_THRESHOLD, *before[1:])


def restore() -> None:
    """The thresholds as they were, unless the script set its own meanwhile (then it keeps them)."""
    if _put_back:
        before = _put_back.pop()
        if gc.get_threshold()[0] == START_THRESHOLD:
            gc.set_threshold(*before)
