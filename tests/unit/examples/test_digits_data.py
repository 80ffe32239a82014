"""The digits examples' data: scikit-learn's bundled digits, split without importing it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from examples.digits_data import TEST_SHARE, load_data, stratified_split
from tests.support.digits_job import NUM_TRAIN

pytestmark = [pytest.mark.unit]


def test_the_split_is_80_20_stratified_disjoint_and_whole() -> None:
    x_train, y_train, x_test, y_test = load_data(3)
    assert len(x_train) == len(y_train) == NUM_TRAIN
    assert len(x_test) == len(y_test) == 1797 - NUM_TRAIN
    assert x_train.dtype == np.float32 and 0.0 <= x_train.min() and x_train.max() <= 1.0
    train_counts, test_counts = np.bincount(y_train), np.bincount(y_test)
    share = test_counts / (train_counts + test_counts)
    assert np.all(np.abs(share - TEST_SHARE) < 0.01)  # each class as near a fifth as counts allow
    rows = {r.tobytes() for r in np.concatenate([x_train, x_test])}
    assert len(rows) > 1700  # no row dropped or repeated (the set holds a few exact duplicates)


def test_the_split_follows_the_seed() -> None:
    a, b, c = load_data(0), load_data(0), load_data(1)
    assert all(np.array_equal(a[i], b[i]) for i in range(4))
    assert not np.array_equal(a[0], c[0])


def test_the_test_mask_has_ceil_of_the_share_whatever_the_counts() -> None:
    y = np.array([0] * 7 + [1] * 3 + [2], dtype=np.int64)
    mask = stratified_split(y, 0.3, seed=5)
    assert mask.sum() == 4  # ceil(0.3 * 11)
    # exact shares 2.55 / 1.09 / 0.36: floors 2 / 1 / 0, the one left to the largest remainder
    assert [int(mask[y == c].sum()) for c in (0, 1, 2)] == [3, 1, 0]


@pytest.mark.slow
def test_a_trainer_start_does_not_import_scikit_learn() -> None:
    probe = (
        "import sys, examples.digits_data as d; d.load_data(0); "
        "print('sklearn' in sys.modules, 'scipy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
