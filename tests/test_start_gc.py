"""hpc_launch.start_gc: the young generation's collection threshold raised while a rank starts and
put back at its first step, unless the script chose its own meanwhile."""

from __future__ import annotations

import gc

import pytest

from hpc_launch import start_gc


@pytest.fixture(autouse=True)
def _thresholds_kept():
    before = gc.get_threshold()
    yield
    start_gc._put_back.clear()
    gc.set_threshold(*before)


def test_relaxed_until_restored_then_as_before():
    gc.set_threshold(700, 10, 10)
    start_gc.relax()
    assert gc.get_threshold() == (start_gc.START_THRESHOLD, 10, 10)
    start_gc.relax()  # twice (the layer, then the entrypoint it runs): one restore undoes it
    start_gc.restore()
    assert gc.get_threshold() == (700, 10, 10)
    start_gc.restore()  # a second first step changes nothing
    assert gc.get_threshold() == (700, 10, 10)


def test_a_scripts_own_threshold_is_kept():
    gc.set_threshold(700, 10, 10)
    start_gc.relax()
    gc.set_threshold(5000, 20, 20)  # the user's script tuned its collector before its first step
    start_gc.restore()
    assert gc.get_threshold() == (5000, 20, 20)
