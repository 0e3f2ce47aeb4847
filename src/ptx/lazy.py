"""Compact forms of block x thread values for the analyzer: blocks that behave alike are counted once.

Aff:   a 32-bit value u[b] + v[t] (block part (B,1), thread part (1,T)) kept apart while it stays in
       [0, 2^31), the typical `blockIdx.x * blockDim.x + threadIdx.x` index; never materialised as (B,T)
       unless a consumer needs it.
CMask: a (B,T) boolean as one row per class of blocks: mask[b, t] = rows[cls[b], t]. A comparison of an
       Aff with a block-level threshold, v[t] < theta[b], has at most T+1 distinct rows (the rank of
       theta[b] among the sorted thread parts decides the row), so interior blocks of a bounds check
       share one class and boundary blocks get their own.
"""

from __future__ import annotations

import numpy as np

INT31 = (1 << 31) - 1
MIN_LANES = 1 << 16  # below this many block x thread lanes plain arrays are cheaper than compact forms


class Aff:
    __slots__ = ("u", "v", "_full")

    def __init__(self, u: np.ndarray, v: np.ndarray):
        self.u = u
        self.v = v
        self._full = None

    def full(self) -> np.ndarray:
        if self._full is None:
            self._full = self.u + self.v
        return self._full


def _parts(x):
    """(block part, thread part) of a value, or None when it is neither (full (B,T) or float or other)."""
    if type(x) is Aff:
        return x.u, x.v
    if type(x) is int:
        return x, 0
    if type(x) is np.ndarray and x.dtype == np.int64 and x.ndim == 2:
        if x.shape[1] == 1:
            return x, 0
        if x.shape[0] == 1:
            return 0, x
    return None


def _mixed(u, v) -> bool:
    return (type(u) is np.ndarray and type(v) is np.ndarray and u.shape[0] > 1 and v.shape[1] > 1
            and u.shape[0] * v.shape[1] >= MIN_LANES)


def _in_range(u, v) -> bool:
    lo = int(u.min()) + int(v.min())
    hi = int(u.max()) + int(v.max())
    return lo >= 0 and hi <= INT31


def aff_add(a, b, sign: int):
    """a + sign*b as an Aff when the result mixes block and thread parts and stays in [0, 2^31)."""
    pa, pb = _parts(a), _parts(b)
    if pa is None or pb is None:
        return None
    if type(a) is not Aff and type(b) is not Aff and (type(pa[1]) is np.ndarray) == (type(pb[1]) is np.ndarray):
        return None  # both block-level or both thread-level: plain arithmetic is cheap
    u = pa[0] + sign * pb[0] if sign > 0 else pa[0] - pb[0]
    v = pa[1] + pb[1] if sign > 0 else pa[1] - pb[1]
    if not _mixed(u, v) or not _in_range(u, v):
        return None
    return Aff(u, v)


def aff_scale(a, c: int, shift: bool = False):
    """a * c (or a << c) for an Aff and a launch-uniform integer c."""
    if type(a) is not Aff or type(c) is not int:
        return None
    if shift:
        if not 0 <= c < 31:
            return None
        c = 1 << c
    if not 0 <= c <= INT31:
        return None
    if int(a.u.max()) + int(a.v.max()) > INT31 // max(c, 1):
        return None
    u, v = a.u * c, a.v * c
    if not _in_range(u, v):
        return None
    return Aff(u, v)


_OPS = {"lt": "lt", "lo": "lt", "le": "le", "ls": "le", "gt": "gt", "hi": "gt", "ge": "ge", "hs": "ge",
        "eq": "eq", "ne": "ne"}


def aff_compare(op: str, a, b):
    """setp on integers where a or b is an Aff: CMask (or None when the form does not apply)."""
    if type(a) is not Aff and type(b) is not Aff:
        return None
    op = _OPS.get(op)
    pa, pb = _parts(a), _parts(b)
    if op is None or pa is None or pb is None:
        return None
    u = pa[0] - pb[0]
    v = pa[1] - pb[1]
    if type(v) is not np.ndarray or type(u) is not np.ndarray:
        return None
    return cmask_threshold(op, v, -u)


def _rowcmp(op, v, th):
    if op == "lt":
        return v < th
    if op == "le":
        return v <= th
    if op == "gt":
        return v > th
    if op == "ge":
        return v >= th
    if op == "eq":
        return v == th
    return v != th


def cmask_threshold(op: str, v: np.ndarray, theta: np.ndarray):
    """Mask rows[b] = v (1,T) op theta[b] (theta (B,1)) grouped into classes of equal rows."""
    vs = np.unique(v)
    th = theta[:, 0]
    left = np.searchsorted(vs, th, "left")
    if op in ("lt", "ge"):
        key = left
    elif op in ("le", "gt"):
        key = np.searchsorted(vs, th, "right")
    else:
        right = np.searchsorted(vs, th, "right")
        key = np.where(right > left, left, -1)  # which thread value equals theta, if any
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    rows = _rowcmp(op, v, th[first][:, None])
    return simplify(CMask(inv.reshape(-1), rows))


class CMask:
    """Boolean (B,T) mask stored as per-class rows; behaves like a NumPy bool array for &, |, ^, ~."""

    __slots__ = ("cls", "rows")
    __array_ufunc__ = None  # NumPy defers to the reflected operators below
    dtype = np.dtype(bool)

    def __init__(self, cls: np.ndarray, rows: np.ndarray):
        self.cls = cls
        self.rows = rows

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.cls), self.rows.shape[1])

    def full(self) -> np.ndarray:
        return self.rows[self.cls]

    def any(self) -> bool:
        return bool(self.rows.any())

    def all(self) -> bool:
        return bool(self.rows.all())

    def __invert__(self):
        return CMask(self.cls, ~self.rows)

    def _combine(self, other, f):
        if isinstance(other, bool | np.bool_):
            return simplify(CMask(self.cls, f(self.rows, bool(other))))
        if type(other) is CMask:
            key = self.cls.astype(np.int64) * len(other.rows) + other.cls
            _, first, inv = np.unique(key, return_index=True, return_inverse=True)
            rows = f(self.rows[self.cls[first]], other.rows[other.cls[first]])
            return simplify(CMask(inv.reshape(-1), rows))
        if type(other) is np.ndarray:
            if other.shape[0] == 1:  # thread-level
                return simplify(CMask(self.cls, f(self.rows, other)))
            if other.shape[1] == 1:  # block-level
                key = self.cls.astype(np.int64) * 2 + other[:, 0].astype(np.int64)
                _, first, inv = np.unique(key, return_index=True, return_inverse=True)
                rows = f(self.rows[self.cls[first]], other[first])
                return simplify(CMask(inv.reshape(-1), rows))
            return f(self.full(), other)
        return NotImplemented

    def __and__(self, other):
        return self._combine(other, np.logical_and)

    __rand__ = __and__

    def __or__(self, other):
        return self._combine(other, np.logical_or)

    __ror__ = __or__

    def __xor__(self, other):
        return self._combine(other, np.logical_xor)

    __rxor__ = __xor__


def simplify(m: CMask):
    """Plainer form when possible: one class -> thread-level (1,T) row; constant rows -> block-level (B,1)."""
    rows = m.rows
    if len(rows) == 1:
        return rows
    const_true, const_false = rows.all(axis=1), ~rows.any(axis=1)
    if (const_true | const_false).all():
        return const_true[m.cls][:, None]
    return m


def lanes_warps_cmask(m: CMask, T: int, W: int) -> tuple[int, int]:
    """Active lanes and warps (with any active lane) summed over the blocks of a CMask."""
    counts = np.bincount(m.cls, minlength=len(m.rows))
    lanes = m.rows.sum(axis=1)
    pad = W * 32 - T
    rr = np.pad(m.rows, ((0, 0), (0, pad))) if pad else m.rows
    warps = rr.reshape(len(m.rows), W, 32).any(axis=2).sum(axis=1)
    return int((counts * lanes).sum()), int((counts * warps).sum())
