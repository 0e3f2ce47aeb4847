"""Shared fixtures of the PTX tests: the committed nvcc outputs in tests/ptx/fixtures (see cuda/)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from src.ptx import PtxSyntaxError, parse_ptx

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


@functools.cache
def vector_add_ptx() -> str:
    """The header and the vector_add kernel of the O3 fixture: a small real nvcc output to corrupt in tests."""
    text = O3.read_text()
    start = text.index(".visible .entry vector_add(")
    end = text.index("\n}\n", start) + 3
    return text[: text.index("\n", text.index(".address_size")) + 1] + "\n" + text[start:end]


def edit(text: str, old: str, new: str) -> tuple[str, int]:
    """text with its one occurrence of `old` replaced by `new`, and the 1-based line where `new` starts."""
    assert text.count(old) == 1, old
    i = text.index(old)
    return text[:i] + new + text[i + len(old):], text.count("\n", 0, i) + 1


def header(target: str) -> str:
    """The module header nvcc 13 writes (`.version 9.0`), for kernels inlined in tests."""
    return f".version 9.0\n.target {target}\n.address_size 64\n"


def rejected_at(text: str, old: str, new: str, fragment: str, fast: bool = True,
                name: str = "bad.ptx") -> PtxSyntaxError:
    """Parse `text` with its one `old` replaced by `new` and check the error: a PtxSyntaxError whose message holds
    `fragment`, on the edited line, named `name:line:` (returned for further checks)."""
    text, line = edit(text, old, new)
    with pytest.raises(PtxSyntaxError) as ei:
        parse_ptx(text, name, fast=fast)
    err = ei.value
    assert fragment in err.message, str(err)
    assert err.line_no == line and str(err).startswith(f"{name}:{line}: "), str(err)
    assert err.line_text == text.split("\n")[line - 1]
    return err
