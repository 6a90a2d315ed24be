"""The digits data: scikit-learn's own scans, read without importing scikit-learn, split by class."""

import gzip

import numpy as np
import pytest

from ds_launch import run_python
from hpc_launch.train.data import digits_file, stratified_split


@pytest.mark.train
def test_a_rank_loads_the_digits_without_importing_scikit_learn(tmp_path):
    code = (
        "import sys\n"
        "from hpc_launch.train.data import build_data\n"
        "d = build_data('digits')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy'))\n"
        "print(len(d.train), len(d.val), d.num_classes, heavy[:3])\n"
    )
    proc = run_python(["-c", code], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "1437 360 10 []"


def test_the_file_read_holds_scikit_learns_digits():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    with gzip.open(digits_file(), "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    assert np.array_equal(table[:, :-1], x) and np.array_equal(table[:, -1], y)


def test_the_split_keeps_every_class_in_proportion_and_is_the_same_each_time():
    labels = np.repeat(np.arange(5), [50, 31, 7, 100, 12])
    train, val = stratified_split(labels, 0.2, seed=0)
    assert len(val) == 40 and len(train) == 160  # ceil(200 * 0.2)
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(200))  # disjoint, complete
    for cls, size in enumerate([50, 31, 7, 100, 12]):
        assert abs((labels[val] == cls).sum() - size * 0.2) < 1
    again = stratified_split(labels, 0.2, seed=0)
    assert np.array_equal(again[1], val)
    assert not np.array_equal(stratified_split(labels, 0.2, seed=1)[1], val)
