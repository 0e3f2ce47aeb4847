"""DVC tells the truth: every file a stage reads is one of its `deps`, every file it writes one of its outputs.

The cheap stages of dvc.yaml run for real, each in its own Python process started as
`python -c "<install audit hook>; runpy.run_module('src.<stage>', run_name='__main__')"` with dvc.yaml's own
command arguments (`${item.*}` matrix entries and `${...}` params from params.yaml resolved as DVC does) plus a few
Hydra overrides that make them quick (`data.max_rows=2000`, one model, one protocol, one trial). The process logs:

- every `open` (path, read or write) seen by an audit hook (`sys.addaudithook`), plus SQLite connects, renames,
  copies, removals and directory listings;
- parquet reads: pandas 3 hands local parquet paths to pyarrow's C++ layer, which no audit event sees, so the
  process wraps `pyarrow.parquet.read_table` / `ParquetFile` / `ParquetDataset` / `pyarrow.dataset.dataset` to log
  the path they are given;
- at exit, the file of every imported module and the top-level keys of the composed Hydra config that our code
  read (the config dict from `OmegaConf.to_container` is wrapped to record them).

Writes are also found independently of the hook: the sandbox tree is snapshotted (size, mtime, inode) before and
after each stage, so a file written in C (parquet outputs, SQLite) is caught too.

The stages run in a sandbox: a copy of the checkout's `src/`, `conf/`, `params.yaml`, `dvc.yaml`, `data/own` and
the committed `data/processed/{static_features,ptx_counts}.parquet` and `ptx_failures.csv` (outputs of the `ptx`
stage), with the raw mirror linked at the same relative place (`<sandbox>/../shared/data/raw`). `src.config.
REPO_ROOT` is then the sandbox, so every default path (data/processed, reports/, mlflow.db, optuna.db, outputs/)
lands in it and maps 1:1 onto the repo-relative paths dvc.yaml names; nothing is written into the checkout (the
test fails if the process touches it). Each stage reads what the previous ones wrote, as under `dvc repro`.

Checks per stage: every data/config file read inside the sandbox or the mirror is covered by a dep (the same path
or a path under a declared directory); every imported `src` module is covered by a code dep (`src/<pkg>` or
`src/<file>.py`); every file written is covered by `outs`/`metrics`/`plots`. Hydra composes the whole defaults
list, so a stage opens every group's file; a group file is required only when the stage's code reads that group
(or a required file interpolates it, e.g. `conf/model/*.yaml` -> `${sweep.*}`); `conf/config.yaml` (defaults list,
`seed`, `reports_dir`) always. See ALLOWED_* below for what is not a pipeline input or output, and docs/pipeline.md.

Audited: ingest, layer_efficiency, layers (reusing the committed per-layer rows), features, train@dt, evaluate,
register, calibrate@dt (K = 2 on the quick dataset), e2e (with e2e.max_groups=3 and one context/protocol). A stage
may read back its own `persist: true` outputs (the incremental `layers` stage's committed table is its cache).
Not audited: `ptx` (needs the zoo extra - TVM, nvcc - and takes hours; its inputs are the two tables it declares).
Not seen: files opened in C by other libraries given a path, and subprocesses (`git`; logged as such).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# Run in each stage process: the log file is opened before the hook is installed, so its own writes are no events.
AUDIT_PROGRAM = r'''
import json, os, sys
_log = open(os.environ["CNNPERF_AUDIT_LOG"], "a", buffering=1)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _emit(kind, path):
    """Log [kind, absolute path, what the path was when the event fired: f(ile), d(ir) or - (absent)]."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    elif hasattr(path, "__fspath__"):
        path = os.fspath(path)
    if isinstance(path, str) and path and not path.startswith((":", "file:")):
        state = "d" if os.path.isdir(path) else "f" if os.path.exists(path) else "-"
        _log.write(json.dumps([kind, os.path.abspath(path), state]) + "\n")


def _hook(event, args):
    try:
        if event == "open":
            path, mode, flags = args
            write = bool(flags & _WRITE_FLAGS) if mode is None else any(c in mode for c in "wax+")
            _emit("w" if write else "r", path)
        elif event == "sqlite3.connect":
            _emit("rw", args[0])
        elif event in ("os.rename", "shutil.copyfile", "shutil.copytree"):
            _emit("r" if event.startswith("shutil") else "rm", args[0])
            _emit("w", args[1])
        elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
            if len(args) < 2 or args[1] is None:  # names relative to a dir_fd (rmtree of a temp dir): skipped
                _emit("rm", args[0])
        elif event in ("os.listdir", "os.scandir"):
            _emit("ls", args[0] if args[0] is not None else ".")
        elif event == "subprocess.Popen":
            _log.write(json.dumps(["popen", [str(a) for a in (args[1] or [])], ""]) + "\n")
    except Exception:  # never let the audit change what the stage does
        pass


sys.addaudithook(_hook)

# Reads done in pyarrow's C++ layer (pandas.read_parquet on a local path) raise no audit event: log their path.
import pyarrow.dataset, pyarrow.parquet


def _logged(fn):
    def wrapper(*args, **kwargs):
        source = args[0] if args else kwargs.get("source")
        if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__"):
            _emit("r", source)
        return fn(*args, **kwargs)
    return wrapper


def _logged_init(cls):
    init = cls.__init__
    def __init__(self, *args, **kwargs):
        _logged(lambda *a, **k: None)(*args, **kwargs)
        init(self, *args, **kwargs)
    cls.__init__ = __init__


pyarrow.parquet.read_table = _logged(pyarrow.parquet.read_table)
pyarrow.dataset.dataset = _logged(pyarrow.dataset.dataset)
_logged_init(pyarrow.parquet.ParquetFile)
_logged_init(pyarrow.parquet.ParquetDataset)

_used = set()


class _Tracked(dict):
    """The composed config as our code sees it: records the top-level keys it reads."""
    def _all(self):
        _used.update(dict.keys(self))
    def __getitem__(self, k):
        _used.add(k)
        return dict.__getitem__(self, k)
    def get(self, k, default=None):
        _used.add(k)
        return dict.get(self, k, default)
    def pop(self, k, *default):
        _used.add(k)
        return dict.pop(self, k, *default)
    def __iter__(self):
        self._all()
        return dict.__iter__(self)
    def items(self):
        self._all()
        return dict.items(self)
    def values(self):
        self._all()
        return dict.values(self)
    def copy(self):
        self._all()
        return dict(dict.items(self))
    def __reduce_ex__(self, protocol):
        self._all()
        return dict.__reduce_ex__(self, protocol)


from omegaconf import OmegaConf
_to_container = OmegaConf.to_container


def _tracking_to_container(*args, **kwargs):
    out = _to_container(*args, **kwargs)
    caller = sys._getframe(1).f_globals.get("__name__", "")
    ours = caller in ("src", "__main__") or caller.startswith("src.")  # not Hydra/OmegaConf saving it
    if ours and isinstance(out, dict) and {"data", "model"} <= out.keys():
        return _Tracked(out)
    return out


OmegaConf.to_container = staticmethod(_tracking_to_container)
import runpy
sys.argv = json.loads(os.environ["CNNPERF_AUDIT_ARGV"])
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
finally:
    for _m in list(sys.modules.values()):
        _emit("import", getattr(_m, "__file__", None))
    _log.write(json.dumps(["cfg", sorted(str(k) for k in _used), ""]) + "\n")
    _log.close()
'''

# ---- allow-list: what the stages touch that is not a pipeline input/output (repo-relative; "x/" = folder) -------
ALLOWED_WRITES = {
    # Hydra's run directory (.hydra/{config,hydra,overrides}.yaml and the job log): timestamped, gitignored.
    "outputs/": "Hydra run dir",
    # MLflow tracking/registry store and Optuna study storage: outside DVC by design (see the `register` stage's
    # comment in dvc.yaml). DVC outputs name no run; only `register` reads runs back (named by the run logs below),
    # and it checks each against reports/metrics.json and the data md5 first. Studies are recreated, never resumed.
    "mlflow.db": "MLflow store",
    "mlartifacts/": "MLflow artifacts",
    "optuna.db": "Optuna storage",
    # Run logs (src.tracking.run_log_path, gitignored): the MLflow run ids, commit and timings of a stage's last
    # run. `train` writes them and `register` reads its models' run ids from them, checking each run against its
    # row of reports/metrics.json and the data md5 first, as it does with the store.
    "reports/train/runs/": "run logs",
    "reports/e2e/runs/": "run log",
    "reports/layers/runs/": "run log",
}
# ingest's download cache (`python -m src.ingest --cache`, gitignored): a raw file missing from the mirror is
# downloaded there from its pinned URL and checked against the manifest's sha256, like a mirror file.
RAW_CACHE = "data/raw"
ALLOWED_READS = {
    **ALLOWED_WRITES,
    # Empty package marker of `src` (no code), imported by every stage.
    "src/__init__.py": "package marker",
    # git internals (MLflow's source tags, `git status` in a subprocess): provenance tags, not inputs.
    ".git/": "git internals",
}


# ---- dvc.yaml, resolved as DVC does ----------------------------------------------------------------------------
def _interpolate(value: str, ctx: dict) -> str:
    def look(m: re.Match) -> str:
        node = ctx
        for part in m.group(1).strip().split("."):
            node = node[part]
        return str(node)

    return re.sub(r"\$\{([^}]+)\}", look, value)


def _paths(entries) -> list[str]:
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries or []]


def dvc_stages(root: Path = REPO) -> dict[str, dict]:
    """name (`train@dt` for matrix and foreach entries) -> {cmd, deps, outs (outs+metrics+plots), params}, ${}
    resolved (`${item.*}` and `${key}` of a foreach over a mapping, `${item}` of one over a list)."""
    dvc = yaml.safe_load((root / "dvc.yaml").read_text())
    params = yaml.safe_load((root / "params.yaml").read_text())
    stages = {}
    for name, st in dvc["stages"].items():
        items: list[tuple[str | None, dict]] = [(None, {})]
        if "matrix" in st:
            ((key, values),) = st["matrix"].items()
            items = [(str(v), {key: v}) for v in values]
        elif "foreach" in st:
            each = st["foreach"]
            items = [(str(k), v) for k, v in each.items()] if isinstance(each, dict) else [(str(v), v) for v in each]
            st = st["do"]
        for suffix, item in items:
            ctx = {**params, "item": item, "key": suffix}
            full = name if suffix is None else f"{name}@{suffix}"
            stages[full] = {
                "cmd": _interpolate(" ".join(st["cmd"].split()), ctx),
                "deps": [os.path.normpath(_interpolate(p, ctx)) for p in _paths(st.get("deps"))],
                "outs": [os.path.normpath(_interpolate(p, ctx))
                         for k in ("outs", "metrics", "plots") for p in _paths(st.get(k))],
                "params": st.get("params") or [],
                # outputs DVC keeps between runs (`persist: true`): an incremental stage reads them back as its cache
                "persist": [os.path.normpath(_interpolate(next(iter(e)), ctx)) for k in ("outs", "metrics", "plots")
                            for e in st.get(k) or [] if isinstance(e, dict) and next(iter(e.values())).get("persist")],
            }
    return stages


def covered(path: str, declared: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in declared)


def _allowed(path: str, allow: dict) -> bool:
    return any(path == a or (a.endswith("/") and path.startswith(a)) for a in allow)


# ---- sandbox ------------------------------------------------------------------------------------------------------
@functools.cache
def _mirror_rel() -> str:
    return os.path.normpath(yaml.safe_load((REPO / "params.yaml").read_text())["ingest"]["mirror"])


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    mirror = (REPO / _mirror_rel()).resolve()
    if not mirror.is_dir():
        pytest.fail(f"the raw data mirror {mirror} is missing: clone the project with ../shared beside it")
    box = tmp_path_factory.mktemp("dvcaudit") / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "src", box / "src", ignore=ignore)
    shutil.copytree(REPO / "conf", box / "conf", ignore=ignore)
    shutil.copytree(REPO / "data" / "own", box / "data" / "own")
    for f in ("params.yaml", "dvc.yaml"):
        shutil.copy2(REPO / f, box / f)
    # layer_efficiency is argparse (no Hydra overrides): quick through its params section instead (fewer trees, a
    # subsample of each source's training rows); neither changes what it reads or writes.
    params = yaml.safe_load((box / "params.yaml").read_text())
    quick = params["layer_efficiency"]
    quick["max_rows_per_source"] = 2000
    quick["xgb"] = {**(quick.get("xgb") or {}), "n_estimators": 20}
    params["calibrate"]["k"] = 2  # the calibrate stage's cross-conformal folds (argparse, resolved into its command)
    (box / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (box / "data" / "processed").mkdir(parents=True)
    # committed outputs of the `ptx` and `layers` stages (the zoo extra builds them; CI reuses them)
    for f in ("static_features.parquet", "ptx_counts.parquet", "ptx_failures.csv", "layers.parquet",
              "layers_failures.csv"):
        if (REPO / "data" / "processed" / f).exists():
            shutil.copy2(REPO / "data" / "processed" / f, box / "data" / "processed" / f)
    link = Path(os.path.normpath(box / _mirror_rel()))
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(mirror, target_is_directory=True)
    return box


def _snapshot(box: Path) -> dict[str, tuple]:
    """Repo-relative file -> (size, mtime_ns, inode) for the sandbox and the mirror behind its link."""
    snap = {}
    for base, prefix in ((box, ""), ((box / _mirror_rel()).resolve(), _mirror_rel() + "/")):
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not os.path.islink(os.path.join(dirpath, d))]
            for f in filenames:
                p = os.path.join(dirpath, f)
                st = os.lstat(p)
                snap[prefix + os.path.relpath(p, base)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return snap


def _env(log: Path, argv: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_", "OPTUNA_"))}
    env.update(CNNPERF_AUDIT_LOG=str(log), CNNPERF_AUDIT_ARGV=json.dumps(argv), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH="", OMP_NUM_THREADS="1")
    return env


def run_stage(box: Path, name: str, stage: dict, overrides: dict[str, str]) -> dict:
    """Run dvc.yaml's command of `stage` (`key=value` args replaced/added from `overrides`) under the audit."""
    argv = shlex.split(stage["cmd"])
    assert argv[:2] == ["python", "-m"], stage["cmd"]
    args = argv[3:]
    for key, value in overrides.items():
        args = [a for a in args if a.split("=", 1)[0] != key] + [f"{key}={value}"]
    log = box.parent / f"audit-{name.replace('@', '-')}.jsonl"
    log.unlink(missing_ok=True)
    before = _snapshot(box)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", AUDIT_PROGRAM], cwd=box, env=_env(log, [argv[2], *args]),
                          capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, f"stage {name} failed ({argv[2]} {args}):\n{proc.stderr[-4000:]}"
    after = _snapshot(box)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {"events": events, "seconds": seconds, "before": set(before), "changed": changed}


# ---- audit ---------------------------------------------------------------------------------------------------------
# The interpreter and its installed packages (the venv may live inside the checkout): never pipeline inputs.
PYTHON_PREFIXES = tuple(sorted({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}))


@functools.cache
def _mirror_real() -> str:
    return str((REPO / _mirror_rel()).resolve())


def _where(path: str, box: Path) -> tuple[str, str] | None:
    """(sandbox | mirror | checkout, repo-relative path) of an absolute path; None = elsewhere (site-packages...)."""
    mirror_rel = _mirror_rel()
    if os.path.normpath(path).startswith(PYTHON_PREFIXES):
        return None
    real = os.path.realpath(path)
    if real.startswith(PYTHON_PREFIXES):
        return None
    mirror_real = _mirror_real()
    for base, where in ((str(box), "sandbox"), (mirror_real, "mirror"), (str(REPO), "checkout")):
        for p in (os.path.normpath(path), real):
            if p != base and not p.startswith(base + os.sep):
                continue
            rel = os.path.relpath(p, base)
            if where == "mirror":
                return "mirror", os.path.normpath(os.path.join(mirror_rel, rel))
            if where == "sandbox" and rel.startswith(".."):
                continue
            return where, rel
    return None


def _manifest_paths(box: Path) -> set[str]:
    with open(box / "src" / "ingest" / "manifest.csv", newline="") as f:
        return {row["path"] for row in csv.DictReader(f)}


def _needed_groups(used: set[str], conf_files: dict[str, str]) -> set[str]:
    """Config groups the stage depends on: keys its code read + groups their files interpolate (transitively)."""
    needed = set(used)
    changed = True
    while changed:
        changed = False
        for p, text in conf_files.items():
            parts = p.split("/")
            if len(parts) == 3 and parts[1] in needed:
                for ref in set(re.findall(r"\$\{(\w+)\.", text)) - needed - {"oc", "hydra"}:
                    needed.add(ref)
                    changed = True
    return needed


def audit(box: Path, run: dict, stage: dict) -> dict[str, list[str]]:
    """Undeclared reads / writes / code / checkout touches of one stage run (all empty = DVC tells the truth)."""
    mirror_rel = _mirror_rel()
    deps, outs = stage["deps"], stage["outs"]
    reads, writes, code, lists, popen, used = set(), set(), set(), set(), [], set()
    checkout, probed = set(), set()
    for kind, payload, state in run["events"]:
        if kind == "popen":
            popen.append(" ".join(payload))
            continue
        if kind == "cfg":
            used = set(payload)
            continue
        where_rel = _where(payload, box)
        if where_rel is None:
            continue
        where, rel = where_rel
        if where == "checkout":
            checkout.add(f"{kind} {rel}")
        if kind == "import" or (kind == "r" and re.search(r"\.pyc?$", rel)):
            code.add(re.sub(r"__pycache__/([^./]+)\.[^/]*\.pyc$", r"\1.py", rel))
        elif kind in ("r", "rw"):
            if state == "d":
                continue  # a directory opened as a handle (os.scandir, rmtree), not file contents
            if state == "-":
                probed.add(rel)  # an absent path (optional input not there, or a name relative to a dir_fd)
                continue
            if rel not in run["before"] and where != "mirror":
                continue  # reads back a file this stage wrote (e.g. to log it to MLflow)
            reads.add(rel)
        elif kind in ("w", "rw", "rm") and "__pycache__/" not in rel and os.path.lexists(payload):
            writes.add(rel)  # transient files (created and removed in the run) are not outputs
        elif kind == "ls" and state == "d":
            lists.add(rel)
    writes |= {p for p in run["changed"] if "__pycache__/" not in p}

    manifest = _manifest_paths(box) if covered("src/ingest/manifest.csv", deps) else set()

    def pinned(rel: str) -> bool:
        """A raw file of the manifest, in the mirror or in ingest's download cache (`--cache`, data/raw)."""
        return any(rel.startswith(base + "/") and os.path.relpath(rel, base) in manifest
                   for base in (mirror_rel, RAW_CACHE))

    conf_files = {p: (box / p).read_text() for p in reads if p.startswith("conf/")}
    needed = _needed_groups(used, conf_files)
    bad_reads, composed_unused = [], []
    for rel in sorted(reads):
        if covered(rel, deps) or covered(rel, stage.get("persist", [])) or _allowed(rel, ALLOWED_READS):
            continue
        if rel == "params.yaml" and stage["params"]:
            continue  # params.yaml values reach DVC through the stage's `params:` section
        if pinned(rel):
            continue  # a raw file pinned by sha256 in the declared manifest (checked on every ingest run)
        parts = rel.split("/")
        if parts[0] == "conf" and len(parts) == 3 and parts[1] not in needed:
            composed_unused.append(rel)  # composed by Hydra (defaults list), no value used by the stage
            continue
        bad_reads.append(rel)
    # A data folder the stage lists (glob) is an input too, unless it is the stage's own output folder.
    data_dirs = ("data/", "reports/", mirror_rel + "/")
    bad_reads += [f"{d}/ (listed)" for d in sorted(lists) if d.startswith(data_dirs) and not covered(d, deps)
                  and not covered(d, outs) and not any(o.startswith(d + "/") for o in outs)]
    return {
        "undeclared reads": bad_reads,
        "undeclared writes": sorted(w for w in writes if not covered(w, outs) and not _allowed(w, ALLOWED_WRITES)
                                    and not (w.startswith(RAW_CACHE + "/") and pinned(w))),
        "imported src modules not covered by a code dep": sorted(
            c for c in code if c.startswith("src/") and not covered(c, deps) and not _allowed(c, ALLOWED_READS)),
        "touched the real checkout": sorted(checkout),
        # informational (printed with -s / on failure)
        "_composed_unused": composed_unused,
        "_declared_data_unread": sorted(d for d in deps if not d.startswith(("src/", "conf/")) and not any(
            covered(r, [d]) for r in reads)),
        "_probed_absent": sorted(probed),
        "_popen": popen,
        "_used_config": sorted(used),
        "_reads": sorted(r for r in reads if not r.startswith(mirror_rel + "/")),
        "_mirror_files_read": sum(r.startswith(mirror_rel + "/") for r in reads),
        "_writes": sorted(w for w in writes if not _allowed(w, ALLOWED_WRITES)),
    }


# ---- the runs ------------------------------------------------------------------------------------------------------
MODEL = "dt"  # the cheapest estimator
QUICK = {  # stage -> overrides of its dvc.yaml command that make it quick (none change what it reads or writes)
    "ingest": {},
    "layer_efficiency": {},  # argparse, not Hydra: made quick in the sandbox's params.yaml (see `sandbox`)
    "layers": {},  # argparse; reuses the committed per-layer rows (builds nothing when they cover every target)
    "features": {"data.max_rows": "2000"},
    f"train@{MODEL}": {"split.protocols": "[random]", "sweep.n_trials": "1", "sweep.n_trials_slow": "1",
                       "sweep.perm_repeats": "1", "sweep.perm_max_rows": "200"},
    "evaluate": {},
    "register": {"register.allow_dirty": "true"},  # the sandbox is no git repository
    # the champion's dataset was built with the features stage's data.max_rows: the same override rebuilds its split
    f"calibrate@{MODEL}": {"data.max_rows": "2000"},
    # both contexts so that every coefficients_<context>.csv is written; one protocol, three deployment groups
    "e2e": {"e2e.max_groups": "3", "e2e.protocols": "[largest]", "e2e.compare_protocols": "[largest]"},
}


@pytest.fixture(scope="module")
def audits(sandbox) -> dict[str, dict]:
    stages = dvc_stages(sandbox)
    out = {}
    for name, overrides in QUICK.items():
        run = run_stage(sandbox, name, stages[name], overrides)
        out[name] = {**audit(sandbox, run, stages[name]), "seconds": round(run["seconds"], 1)}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(QUICK))
def test_stage_reads_and_writes_are_declared(audits, stage):
    a = audits[stage]
    print(json.dumps({stage: a}, indent=1))
    problems = {k: v for k, v in a.items() if not k.startswith("_") and k != "seconds" and v}
    assert not problems, (
        f"dvc.yaml stage `{stage}` does not tell the truth (declare these in its deps/outs, or explain them in "
        f"tests/test_dvc_stages.py's allow-list):\n{json.dumps(problems, indent=2)}\n"
        f"(config groups its code used: {a['_used_config']})")


@pytest.mark.slow
def test_audit_sees_parquet_io(audits):
    """The audit sees the I/O the stages do in C: parquet reads (pyarrow wrappers), writes (snapshot diff)."""
    assert {"data/processed/measurements.parquet", "data/processed/gpus.parquet",
            "data/processed/static_features.parquet"} <= set(audits["features"]["_reads"])
    assert "data/processed/dataset.parquet" in audits[f"train@{MODEL}"]["_reads"]
    assert {"data/processed/measurements.parquet", "data/processed/gpus.parquet",
            "data/processed/quarantine.parquet"} <= set(audits["ingest"]["_writes"])
    assert "data/processed/dataset.parquet" in audits["features"]["_writes"]
    assert audits["ingest"]["_mirror_files_read"] > 100


def test_dvc_yaml_resolution():
    stages = dvc_stages()
    assert {"ingest", "features", "evaluate", "register", "e2e", "ptx"} <= stages.keys()
    st = stages[f"train@{MODEL}"]
    assert covered(f"conf/model/{MODEL}.yaml", st["deps"])
    assert covered("conf/model/xgb.yaml", stages["train@dt"]["deps"])  # the distilled tree's teacher
    assert "conf/model/lr.yaml" in stages["train@lr"]["deps"] and not covered("conf/model/dt.yaml",
                                                                              stages["train@lr"]["deps"])
    assert f"reports/train/{MODEL}/metrics.json" in st["outs"]
    # DVC writes a dependency listed twice into the stage's dvc.lock entry twice when it reruns (a fresh clone's
    # `git status` was dirty after `make pipeline`)
    assert not {name: sorted({d for d in s["deps"] if s["deps"].count(d) > 1}) for name, s in stages.items()
                if len(set(s["deps"])) < len(s["deps"])}
    assert "${" not in st["cmd"] and f"model={MODEL}" in st["cmd"].split()


def test_only_the_registry_stages_are_always_changed():
    """A second `dvc repro` is a no-op except `register` and `calibrate`: their real input, the MLflow registry, is
    outside DVC, and a retrained run writes the same metrics.json (and registry.json), so only rerunning them keeps
    the aliases on the reported runs and those runs calibrated (a fresh clone's store is empty). Both take seconds
    when nothing changed (`calibrate --reuse`). Every other stage must be skipped when its deps are unchanged."""
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    always = sorted(n for n, st in dvc["stages"].items() if st.get("always_changed")
                    or (st.get("do") or {}).get("always_changed"))
    assert always == ["calibrate", "register"]
    assert "--reuse" in dvc["stages"]["calibrate"]["do"]["cmd"]


def test_audit_catches_an_undeclared_read(tmp_path):
    """The checker itself: a read outside the deps, a write outside the outs and an uncovered module are reported."""
    box = tmp_path / "repo"
    (box / "src" / "ingest").mkdir(parents=True)
    (box / "src" / "ingest" / "manifest.csv").write_text("path,sha256,size,commit,url\n")
    for f in ("data/x.csv", "conf/data/default.yaml", "conf/e2e/default.yaml", "src/a/m.py"):
        (box / f).parent.mkdir(parents=True, exist_ok=True)
        (box / f).write_text("k: ${sweep.n}\n" if f.startswith("conf/data") else "x\n")
    events = [["r", str(box / f), "f"] for f in ("data/x.csv", "conf/data/default.yaml", "conf/e2e/default.yaml")]
    events += [["import", str(box / "src/a/m.py"), "f"], ["w", str(box / "reports/y.json"), "-"],
               ["cfg", ["data"], ""]]
    run = {"events": events, "before": {"data/x.csv", "conf/data/default.yaml", "conf/e2e/default.yaml"},
           "changed": {"reports/y.json"}}
    a = audit(box, run, {"deps": ["src/b"], "outs": ["reports/z.json"], "params": []})
    assert a["undeclared reads"] == ["conf/data/default.yaml", "data/x.csv"]
    assert a["_composed_unused"] == ["conf/e2e/default.yaml"]
    assert a["undeclared writes"] == ["reports/y.json"]
    assert a["imported src modules not covered by a code dep"] == ["src/a/m.py"]
    a = audit(box, run, {"deps": ["src/a", "data", "conf/data"], "outs": ["reports"], "params": []})
    assert not any(a[k] for k in ("undeclared reads", "undeclared writes", "imported src modules not covered "
                                                                             "by a code dep"))
