"""`Coded`: a list of values of which few are distinct (the probed headers of a pack's files, its pairs' sizes), kept
as one small integer code per item and each distinct value once: 1 or 2 bytes an item where a list of references
took 8 (a pack of 10^8 pairs holds two headers and two sizes a pair)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence

_WIDER = {"B": "H", "H": "I", "I": "Q"}


class Coded(Sequence):
    """A read-only-once-filled sequence of hashable values, filled with `append`/`extend`; indexing gives the values
    (a slice, a list of them), `distinct()` each value once, in the order first seen. Equal values are one object."""

    __slots__ = ("_values", "_code", "_codes")

    def __init__(self, values: Iterable = ()):
        self._values: list = []
        self._code: dict = {}
        self._codes = array("B")
        self.extend(values)

    def append(self, value) -> None:
        code = self._code.get(value)
        if code is None:
            code = self._code[value] = len(self._values)
            self._values.append(value)
            if code >= 1 << (8 * self._codes.itemsize):  # a wider code: the codes so far copied once
                self._codes = array(_WIDER[self._codes.typecode], self._codes)
        self._codes.append(code)

    def extend(self, values: Iterable) -> None:
        for value in values:
            self.append(value)

    def __len__(self) -> int:
        return len(self._codes)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._values[c] for c in self._codes[index]]
        return self._values[self._codes[index]]

    def __iter__(self) -> Iterator:
        values = self._values
        return (values[c] for c in self._codes)

    def distinct(self) -> list:
        """Each value once, in the order first appended."""
        return list(self._values)

    def __repr__(self) -> str:
        return f"Coded({list(self)!r})"

    def __eq__(self, other) -> bool:
        if isinstance(other, (Coded, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # (mutable, as a list)
