"""Block sampling of huge grids (count_launch max_lanes): exact where blocks are alike, and says what it did."""

from __future__ import annotations

import pytest

from src.ptx import count_launch
from src.ptx.driver import LANES_PER_CHUNK, chunk_plan


@pytest.mark.parametrize(("n_chunks", "max_chunks"), [(1, 4), (10, 10), (11, 10), (20, 4), (864, 64), (1000, 3)])
def test_chunk_plan_covers_every_chunk_once(n_chunks, max_chunks):
    plan = chunk_plan(n_chunks, max_chunks)
    assert sum(w for _, w in plan) == n_chunks
    assert len(plan) <= max(max_chunks, 3)
    assert plan[0] == (0, 1) and plan[-1] == (n_chunks - 1, 1)
    chunks = [c for c, _ in plan]
    assert chunks == sorted(set(chunks)) and all(0 <= c < n_chunks for c in chunks)


def test_chunk_plan_without_budget_is_every_chunk():
    assert chunk_plan(7, None) == [(c, 1) for c in range(7)]


def test_a_sampled_uniform_grid_counts_exactly(o3):
    """vector_add over 40,000 blocks of 256 (20 chunks) evaluated on 4: the ragged tail lies in the last chunk,
    which is always evaluated, so the sampled counts equal the exact ones."""
    grid, block = 40_000, 256
    n = grid * block - 1000
    exact = count_launch(o3, "vector_add", grid, block, {3: n})
    sampled = count_launch(o3, "vector_add", grid, block, {3: n}, max_lanes=4 * LANES_PER_CHUNK)
    assert exact.block_fraction == 1.0 and not [x for x in exact.notes if x.startswith("sampled")]
    evaluated = 3 * 2048 + (grid - 19 * 2048)  # chunks of 2048 blocks: the first, two strata, the short last one
    assert sampled.block_fraction == evaluated / grid
    assert any(x.startswith(f"sampled: {evaluated} of {grid} blocks") for x in sampled.notes)
    for k in ("thread_instructions", "warp_instructions", "predicated_off"):
        assert getattr(sampled, k) == getattr(exact, k)
    assert sampled.by_class == exact.by_class and sampled.bytes_by_space == exact.bytes_by_space
    assert exact.thread_instructions == 11 * grid * block + 11 * n  # the closed form of test_analyzer


def test_a_grid_within_the_budget_is_not_sampled(o3):
    r = count_launch(o3, "vector_add", 100, 256, {3: 25_000}, max_lanes=1 << 25)
    assert r.block_fraction == 1.0


def test_a_bad_budget_is_refused(o3):
    with pytest.raises(ValueError, match="max_lanes must be positive"):
        count_launch(o3, "vector_add", 100, 256, {3: 25_000}, max_lanes=0)
