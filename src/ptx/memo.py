"""Identity memo of the driver: results computed from arrays, cached by the identity of those arrays.

Loop iterations that see the same operand arrays get the same result objects back, so masks keep their
identity (recorded masks merge into one entry with a multiplicity) and an iteration costs dictionary
lookups instead of work proportional to the number of threads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from src.ptx.lazy import Aff, CMask
from src.ptx.regvalues import Unknown

MEMO_BYTES = 384 << 20


def vkey(v: object) -> object:
    """Cache key of a value: arrays by identity (the cache keeps them alive), scalars by value."""
    if v is None or v is True or v is False:
        return v
    if isinstance(v, np.ndarray | Unknown | CMask | Aff):
        return ("#", id(v))
    return (type(v).__name__, v)


class Memo:
    """LRU cache, bounded in bytes, of results computed from array operands identified by identity.

    A loop whose iterations see the same operand arrays (values that do not depend on the loop
    counter) gets the same result objects back, so its masks keep their identity and the per-iteration
    cost is a dictionary lookup instead of work proportional to the number of threads.
    """

    def __init__(self, budget: int):
        self.d: OrderedDict = OrderedDict()
        self.bytes = 0
        self.budget = budget

    def get(self, key: Hashable) -> object | None:
        """The cached value of key (now the most recently used), or None."""
        e = self.d.get(key)
        if e is None:
            return None
        self.d.move_to_end(key)
        return e[1]

    def put(self, key: Hashable, keep: object, value: object, nbytes: int) -> None:
        """Cache value under key; keep holds the operands alive so the ids in key stay theirs."""
        if nbytes > self.budget // 4:
            return
        self.d[key] = (keep, value, nbytes)
        self.bytes += nbytes
        while self.bytes > self.budget and self.d:
            _, (_, _, nb) = self.d.popitem(last=False)
            self.bytes -= nb


def nbytes_of(*vals: object) -> int:
    """Approximate bytes held by values (arrays, nested in lists/tuples), for the memo's budget."""
    n = 64
    for v in vals:
        if isinstance(v, np.ndarray):
            n += v.nbytes
        elif isinstance(v, list | tuple):
            n += nbytes_of(*v)
    return n
