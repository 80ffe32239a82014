"""The digits data every example trains on, free of any framework (both frameworks import it)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

Arrays = tuple[
    npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]
]


def load_data(seed: int) -> Arrays:
    """The 1797 8x8 digits bundled with scikit-learn (no download), 80/20 split, scaled to 0-1."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y
    )
    return x_train, y_train, x_test, y_test
