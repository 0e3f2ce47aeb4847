"""The point answer MAPE asks for: a log shift of the learned efficiency, estimated on training rows only.

A learner fitted to log(measured / estimate) with squared error answers the middle (mean ~ median) of the log
efficiency. MAPE is not symmetric in log space: a prediction 2x too slow costs 100 %, one 2x too fast 50 %, so the
point that minimises expected MAPE lies below the median, the more so the wider the error (Gneiting 2011, "Making
and evaluating point forecasts", JASA 106: the MAPE is consistent for the median of the density proportional to
f(y) / y; for a log-normal error of spread s that is the median x exp(-s^2)). On a held-out family or GPU the error
is wider than on the training rows, so the right shift depends on the protocol; it is read from the protocol's own
grouped tuning CV.

Two estimates of it, neither seeing a held-out row:
- out of fold (`oof`): the chosen trial's tuning-CV predictions (grouped like the protocol). Pessimistic: those
  models were fitted on half of at most `sweep.tune_max_rows` rows, and their errors are wider than the final
  model's;
- in sample (`train`): the final model on the same tuning rows (all of them in its training part). Optimistic.
They are blended with Efron's .632 weights (Efron 1983; Efron & Tibshirani 1997), the classic compromise between
an apparent and an out-of-sample error: shift = 0.368 x train + 0.632 x oof.
"""

from __future__ import annotations

from src.features.mape_point import mape_optimal_shift

#: Efron's weight of the out-of-sample estimate; the in-sample one gets 1 - OOF_WEIGHT.
OOF_WEIGHT = 0.632
#: The point rules a target config may name (`target.point`): `median` keeps the learner's answer, `mape` shifts it.
POINT_RULES = ("median", "mape")

__all__ = ["OOF_WEIGHT", "POINT_RULES", "blended_shift", "check_rule", "mape_optimal_shift"]


def blended_shift(train_shift: float, oof_shift: float) -> float:
    """Efron's .632 blend of the in-sample and out-of-fold shifts."""
    return (1.0 - OOF_WEIGHT) * float(train_shift) + OOF_WEIGHT * float(oof_shift)


def check_rule(rule: str | None) -> str:
    """`target.point` as a rule name (None: `median`); an unknown name is an error naming the choices."""
    rule = "median" if rule is None else str(rule)
    if rule not in POINT_RULES:
        raise ValueError(f"target.point: {rule!r} is not one of {list(POINT_RULES)}")
    return rule
