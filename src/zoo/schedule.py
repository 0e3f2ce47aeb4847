"""dlight's default GPU schedules, one PrimFunc at a time, so that a rule that fails is left out only where it fails.

TVM's `dl.ApplyDefaultSchedule(Matmul, GEMV, Reduction, GeneralReduction, Fallback)` gives each PrimFunc to the
first rule that claims it. Some rules claim shapes they cannot handle: GEMV asserts on reparameterised 1x1 branches
(timm mobileone_*), Matmul's cache-write check asserts on squeeze-excite matmuls at batch > 1, and Reduction's
cross-thread schedule of ResNeSt's grouped 1x1 conv on a pooled map does not lower. An assertion aborts the whole
pass, so the stage used to schedule the whole module again without that rule: one squeeze-excite matmul then sent
every convolution of the CNN to the naive Fallback schedule (at batch 32, 176 of 396 CNNs; their counts said more
about the fallback than about the CNN, docs/zoo.md). Here each function is scheduled alone:

- a rule that raises while scheduling a function declines it, and the next rule is tried (dlight's own checks
  raise AssertionError; its Matmul analysis raises AttributeError on the FloorDiv index maps of timm's
  ecaresnet*_pruned at batch 32);
- a function whose schedule does not lower is scheduled again without the rule that took it (tvmgen).

A function no rule fails on gets exactly what ApplyDefaultSchedule gives it, so cached records of such functions
stay valid. `ScheduledFunc.without` names the rules a function was scheduled without.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# dlight's default GPU rules, in the order TVM applies them.
RULES: tuple[str, ...] = ("matmul", "gemv", "reduction", "general_reduction", "fallback")


@dataclass(frozen=True)
class ScheduledFunc:
    """A PrimFunc after scheduling: the rule that took it ('' when none did: left as it was, as dlight does) and
    the rules it was scheduled without (they asserted on it, or were excluded because their schedule of it did
    not lower)."""

    func: Any
    rule: str
    without: tuple[str, ...]


def _rule(name: str) -> Any:
    import tvm.s_tir.dlight as dl

    return {"matmul": dl.gpu.Matmul, "gemv": dl.gpu.GEMV, "reduction": dl.gpu.Reduction,
            "general_reduction": dl.gpu.GeneralReduction, "fallback": dl.gpu.Fallback}[name]()


def is_scheduled(func: Any) -> bool:
    """Whether a PrimFunc was scheduled already (dlight skips those)."""
    attrs = func.attrs
    return attrs is not None and "tirx.is_scheduled" in attrs and int(attrs["tirx.is_scheduled"]) == 1


def schedule_func(func: Any, target: Any, excluded: frozenset[str] = frozenset()) -> ScheduledFunc:
    """The first rule in dlight's order, `excluded` left out, that schedules `func`; a rule that raises declines.

    If every rule raises, the first rule's error propagates (a schedule failure)."""
    from tvm import s_tir

    if is_scheduled(func):
        return ScheduledFunc(func, "", tuple(sorted(excluded)))
    declined: set[str] = set(excluded)
    first_error: Exception | None = None
    func_target = (func.attrs.get("target") if func.attrs is not None else None) or target
    with target:
        for name in RULES:
            if name in excluded:
                continue
            try:
                space = _rule(name).apply(func, func_target, False)
            except Exception as exc:  # a rule claiming what it cannot handle: the next rule
                declined.add(name)
                first_error = first_error or exc
                continue
            if space is None:
                continue
            schedules = [space] if isinstance(space, s_tir.Schedule) else list(space)
            if len(schedules) != 1:  # ApplyDefaultSchedule asserts the same
                raise RuntimeError(f"dlight rule {name} gave {len(schedules)} schedules, expected one")
            scheduled = schedules[0].mod["main"].with_attr("tirx.is_scheduled", True)
            return ScheduledFunc(scheduled, name, tuple(sorted(declined)))
    if first_error is not None:  # no rule scheduled it and one failed on it (Fallback included)
        raise first_error
    return ScheduledFunc(func, "", tuple(sorted(declined)))


def rules_dropped(without: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Notes for a compiled module: for each rule, how many of its PrimFuncs were scheduled without it."""
    out: dict[str, int] = {}
    for rules in without.values():
        for rule in rules:
            key = f"funcs_scheduled_without_{rule}"
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))
