"""`python -m src.e2e [hydra-style overrides]`: fit/evaluate the end-to-end model and compare with the global one.

Overrides are those of the training config (e.g. `features=engineered seed=1`) plus `e2e.<key>=<value>` for the
keys in src.e2e.run.DEFAULTS (e.g. `e2e.protocols=[largest] e2e.contexts=[strict]`).
"""

from __future__ import annotations

import json
import logging
import sys

from omegaconf import OmegaConf

from src.config import compose
from src.e2e.run import run


def config(overrides: list[str]) -> dict:
    """Training config composed with the non-e2e overrides, plus the e2e section from `e2e.*` overrides."""
    base = [o for o in overrides if not o.lstrip("+").startswith("e2e.")]
    e2e = [o.lstrip("+")[len("e2e."):] for o in overrides if o.lstrip("+").startswith("e2e.")]
    c = OmegaConf.to_container(compose(base), resolve=True)
    if e2e:
        c["e2e"] = {**(c.get("e2e") or {}), **OmegaConf.to_container(OmegaConf.from_dotlist(e2e), resolve=True)}
    return c


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        summary = run(config(list(sys.argv[1:] if argv is None else argv)))
    except (ValueError, FileNotFoundError) as exc:  # a setting or an input table: named in the message
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for ctx, protos in summary["results"].items():
        for proto, r in protos.items():
            line = f"{ctx:8s} {proto:11s} rows {r.get('rows', 0):5d}"
            if r.get("rows"):
                line += f"  e2e MAPE {r['e2e_mape']:6.2f} %  proportional {r['proportional_mape']:6.2f} %"
            cmp_ = r.get("global_comparison")
            if cmp_:
                line += (f" | same {cmp_['rows']} rows: e2e {cmp_['e2e_mape']:6.2f} %, global "
                         f"{cmp_['global_mape']:6.2f} %")
            print(line)
    it = summary["iterations"]
    if "all" in it:
        for mode in ("inference", "training"):
            v = it.get(mode)
            if v:
                print(f"iterations {mode:9s} {v['series']} series x {v['median_iters']:.0f} iters: total time from "
                      f"a short profile MAPE {v['product_short_mape']:.2f} % (iters*step), "
                      f"{v['warmup_short_mape']:.2f} % (+warm-up term)")
    print(json.dumps({"wall_seconds": summary["wall_seconds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
