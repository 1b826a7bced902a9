"""Fixed-size history: a table of float columns that overwrites its oldest row when full.

Memory is allocated once (capacity x columns float64) and never grows, so a sampler can run
all day. Missing values are NaN, which plots draw as gaps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class RingTable:
    """Rows of floats with named columns, oldest first when read."""

    def __init__(self, columns: Sequence[str], capacity: int):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.columns = tuple(columns)
        self._column_index = {name: i for i, name in enumerate(self.columns)}
        self._data = np.full((capacity, len(self.columns)), np.nan)
        self._next = 0
        self._count = 0
        self.appended = 0
        """Rows ever appended (grows past capacity)."""

    @property
    def capacity(self) -> int:
        return self._data.shape[0]

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def __len__(self) -> int:
        return self._count

    def append(self, values: Sequence[float | None]) -> None:
        """Add one row (``None`` -> NaN), overwriting the oldest when full."""
        row = self._data[self._next]
        for i, value in enumerate(values):
            row[i] = np.nan if value is None else value
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)
        self.appended += 1

    def column(self, name: str) -> np.ndarray:
        """A copy of one column, oldest row first."""
        return self._ordered(self._data[:, self._column_index[name]])

    def rows(self) -> np.ndarray:
        """A copy of the whole table, oldest row first."""
        return self._ordered(self._data)

    def _ordered(self, data: np.ndarray) -> np.ndarray:
        if self._count < self.capacity:
            return data[: self._count].copy()
        return np.concatenate((data[self._next:], data[: self._next]))

    def clear(self) -> None:
        self._data.fill(np.nan)
        self._next = self._count = 0
