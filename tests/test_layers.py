"""The house's one rule: data flows one way, so no module imports a package above it in the flow.

The allowed order is written once, here (and drawn in README.md): a package may import its own modules and
packages of strictly lower layers. Upward imports are listed with the module and line that makes them. Run
`python -m pytest tests/test_layers.py -q` (or `python tests/test_layers.py` to print the package graph).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# Bottom to top. Same layer = independent neighbours, which must not import each other either.
LAYERS: list[tuple[str, ...]] = [
    ("config",),                 # repo root, config composition, resolvers: imports nothing of ours
    ("tracking",),               # MLflow plumbing (store, experiment, reproducibility tags)
    ("ingest",),                 # raw public sources -> measurement / GPU tables
    ("ptx",),                    # PTX parser, CFG, slices, dynamic analysis
    ("zoo", "profiling"),        # CNN -> static features + PTX; our own GPU measurements
    ("features",),               # dataset table, engineered features, the served pyfunc's feature path
    ("train",),                  # protocols, tuning, fitting (the one way to fit a model)
    ("evaluate",),               # per-model reports -> reports/metrics.json
    ("register",),               # reported runs -> registry aliases
    ("serve", "predict", "e2e"),  # serving, GPU ranking, end-to-end time model
]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
# Other layers fit models only through the training package's public entry (src/train/__init__.py).
TRAIN_PUBLIC = "src.train"


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every `src.*` import in a file, including those inside functions."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("src.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "src":
                out += [(f"src.{a.name}", node.lineno) for a in node.names]
            elif node.module.startswith("src."):
                out.append((node.module, node.lineno))
    return out


def package_of(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        pkg = package_of(path)
        if pkg == "__init__":
            continue
        if pkg not in LEVEL:
            found.append(f"{path.relative_to(SRC.parent)}: package {pkg!r} has no place in LAYERS")
            continue
        for module, line in imports(path):
            target = module.split(".")[1]
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if target == pkg:
                continue
            if target not in LEVEL:
                found.append(f"{where}: imports {module} (package not in LAYERS)")
            elif LEVEL[target] >= LEVEL[pkg]:
                found.append(f"{where}: {pkg} (layer {LEVEL[pkg]}) imports {module} (layer {LEVEL[target]})")
            elif target == "train" and module != TRAIN_PUBLIC:
                found.append(f"{where}: {pkg} imports training internals {module}; use `from src.train import ...`")
    return found


def test_no_module_imports_a_layer_above_or_beside_its_own():
    bad = violations()
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


def test_config_imports_nothing_of_ours():
    assert imports(SRC / "config.py") == []


def test_every_package_has_a_layer():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert packages == set(LEVEL), (f"not in LAYERS: {sorted(packages - set(LEVEL))}; "
                                    f"gone: {sorted(set(LEVEL) - packages)}")


if __name__ == "__main__":
    for line in violations() or ["no upward imports"]:
        print(line)
