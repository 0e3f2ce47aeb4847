"""Shared fixtures of the PTX tests: the committed nvcc outputs in tests/ptx/fixtures (see cuda/)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from src.ptx import parse_ptx

FIXTURES = Path(__file__).parent / "fixtures"
PTX_FILES = sorted(FIXTURES.glob("*.ptx"))
O3 = FIXTURES / "kernels_sm_86_O3.ptx"


@functools.cache
def load(path: Path):
    return parse_ptx(path.read_text(), str(path))


@pytest.fixture(scope="session")
def o3():
    return load(O3)


def named(module, kernel: str, values: dict[int, int | float]) -> dict[str, int | float]:
    """Parameter values by index -> by PTX name."""
    names = [p[0] for p in module.kernels[kernel].params]
    return {names[i]: v for i, v in values.items()}
