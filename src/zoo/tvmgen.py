"""PTX without a GPU: model -> torch.export (or ONNX) -> TVM Relax -> default GPU schedules -> CUDA C -> nvcc PTX.

One inference's launch list comes from the compiled program itself: the Relax `main` calls each scheduled
PrimFunc (`call_tir`) in order, TVM's host/device split turns each PrimFunc into one or more device kernels
(`<func>_kernel`, `<func>_kernel_1`, ...), and each kernel's grid/block are its `launch_thread` extents.
Identical PrimFuncs are deduplicated by TVM, so launches are counted per call, not per function.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from src.zoo.resolve import Built, MissingFrameworkError

if TYPE_CHECKING:  # func_cache imports kernel_cache, which imports this module
    from src.zoo.func_cache import FuncCache

# The CUDA C is generated once per model with this TVM target arch; nvcc then compiles it per requested arch.
TVM_TARGET_ARCH = "sm_86"
# Fold constants by shape only (the weights' values never reach the kernels; src/zoo/shape_fold.py).
SHAPE_ONLY_FOLDING = True
# nvcc of CUDA 13 compiles sm_75 and newer; older GPUs get the nearest supported arch's PTX (recorded).
NVCC_MIN_ARCH = 75



def _bicubic_antialiased(node: Any, importer: Any) -> Any:
    """torch's anti-aliased bicubic resize as TVM's bicubic resize: the same output shape and one loop over it.

    timm's CLIP ResNets resample their attention pool's positional embedding with it, to the size it already has
    at the CNN's own input size (an identity resize: anti-aliasing widens the filter only when shrinking)."""
    return importer._upsample_bicubic2d(node)


def _group_norm_emit(importer: Any, x: Any, weight: Any, bias: Any, groups: int, eps: float) -> Any:
    """TVM's group norm of `x`, with ones / zeros where the graph has no affine weight / bias (None).

    TVM 0.27's converters hand a missing operand on as a null node and the import fails ("Found null pointer node
    while traversing AST"): timm's PoolFormerV2 normalises with `GroupNorm1NoBias` (a weight, no bias). A zero bias
    (a unit weight) is what the missing operand means; both are constants, folded where they meet the data."""
    import numpy as np
    from tvm import relax

    channels = int(importer.shape_of(x)[1])
    dtype = str(x.ty.dtype)
    gamma = importer.env[weight] if weight is not None else relax.const(np.ones(channels, dtype=dtype))
    beta = importer.env[bias] if bias is not None else relax.const(np.zeros(channels, dtype=dtype))
    dim = len(importer.shape_of(x))
    return importer.block_builder.emit(relax.op.nn.group_norm(
        x, gamma, beta, num_groups=groups, channel_axis=1, axes=list(range(2, dim)), epsilon=eps))


def _group_norm(node: Any, importer: Any) -> Any:
    """aten.group_norm(input, groups, weight, bias, eps) through `_group_norm_emit`."""
    args = list(node.args) + [None] * (5 - len(node.args))
    return _group_norm_emit(importer, importer.env[args[0]], args[2], args[3], args[1],
                            args[4] if args[4] is not None else 1e-05)


def _native_group_norm(node: Any, importer: Any) -> Any:
    """aten.native_group_norm(input, weight, bias, N, C, HxW, groups, eps) (what torch.export's decompositions
    leave) through `_group_norm_emit`; like TVM's own converter it gives the normalised tensor."""
    args = list(node.args) + [None] * (8 - len(node.args))
    return _group_norm_emit(importer, importer.env[args[0]], args[1], args[2], args[6] or 1,
                            args[7] if args[7] is not None else 1e-05)


# aten operators TVM's torch importer has no converter for (or converts wrongly), imported as the nearest it has.
CUSTOM_CONVERTERS = {"_upsample_bicubic2d_aa.default": _bicubic_antialiased, "group_norm.default": _group_norm,
                     "native_group_norm.default": _native_group_norm}

_LAUNCH = re.compile(r'T\.launch_thread\("(blockIdx|threadIdx)\.([xyz])",\s*([^)]+)\)')


class PtxGenerationError(RuntimeError):
    """A step of model -> PTX failed; `stage` names it (export, import, schedule, lower, nvcc)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


@dataclass
class Launch:
    """One kernel launch of an inference: which kernel, its geometry and how often it runs."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    calls: int
    params: dict[str, int] = field(default_factory=dict)  # scalar kernel arguments (none for static shapes)


@dataclass
class Compiled:
    """CUDA C of every kernel plus the launch list of one inference (batch size `batch`)."""

    cuda_source: str
    launches: list[Launch]
    batch: int
    input_shape: tuple[int, ...]
    seconds: dict[str, float]
    non_kernel_calls: dict[str, int] = field(default_factory=dict)
    func_stats: dict[str, int] = field(default_factory=dict)  # PrimFuncs scheduled vs taken from the func cache
    gates_materialised: int = 0  # gate multiplies rewritten by src/zoo/gates.py (0: the default schedule)

    def launches_json(self) -> str:
        return json.dumps([asdict(x) for x in self.launches], indent=1)


_ELIDED = re.compile(r"\(\.\.\. \d+ lines skipped \.\.\.\)")


def describe(exc: BaseException, first: bool = False) -> str:
    """One line naming an exception: its type, a line of its message, and where it was raised if no message.

    TVM pass errors put the message first and a TVMScript dump (with "(... N lines skipped ...)" markers) after
    it, so for them the first line is the message whatever `first` says.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not _ELIDED.fullmatch(ln.strip())]
    if any(ln.startswith(("Error in pass", "Location (TVMScript)")) for ln in lines):
        first = True
    if lines:
        return f"{type(exc).__name__}: {(lines[0] if first else lines[-1])[:300]}"
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" at {tb.tb_frame.f_code.co_filename.split('site-packages/')[-1]}:{tb.tb_lineno}" if tb else ""
    return f"{type(exc).__name__} (no message){where}"


def arch_number(arch: str) -> int:
    """'sm_86' -> 86, with a clear error for anything else."""
    m = re.fullmatch(r"sm_(\d{2,3})a?", arch.strip())
    if not m:
        raise ValueError(f"bad CUDA arch {arch!r}: expected the form sm_86")
    return int(m.group(1))


def ptx_arch_for(arch: str) -> str:
    """The arch nvcc compiles for a requested one: itself, or sm_75 below what nvcc 13 supports."""
    return f"sm_{max(arch_number(arch), NVCC_MIN_ARCH)}"


def _tvm() -> Any:
    try:
        import tvm  # noqa: F401
    except ImportError as exc:  # pragma: no cover
        raise MissingFrameworkError("apache-tvm is not installed: install the zoo extra") from exc
    return tvm


def to_relax(built: Built, batch: int) -> tuple[Any, dict[str, float]]:
    """Import the model into a Relax IRModule at the given batch size."""
    _tvm()
    t0 = time.perf_counter()
    shape = (batch, *built.input_shape[1:])
    if built.framework == "onnx":
        from tvm.relax.frontend.onnx import from_onnx

        name = built.onnx_model.graph.input[0].name
        try:
            mod = from_onnx(built.onnx_model, shape_dict={name: list(shape)})
        except Exception as exc:
            raise PtxGenerationError("import", f"{type(exc).__name__}: {exc}") from exc
        return mod, {"export": 0.0, "import": time.perf_counter() - t0}
    if built.module is None:
        raise PtxGenerationError("export", f"{built.framework} models cannot be exported to TVM (no torch module)")
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    x = torch.randn(*shape)
    try:
        with torch.no_grad():
            ep = torch.export.export(built.module.eval(), (x,))
    except Exception as exc:
        raise PtxGenerationError("export", describe(exc, first=True)) from exc
    t1 = time.perf_counter()
    try:
        mod = from_exported_program(ep, keep_params_as_input=False, custom_convert_map=CUSTOM_CONVERTERS)
    except Exception as exc:
        raise PtxGenerationError("import", describe(exc, first=True)) from exc
    return mod, {"export": t1 - t0, "import": time.perf_counter() - t1}


def _extent(expr: str, kernel: str) -> int:
    text = expr.strip()
    m = re.fullmatch(r"(?:T\.int(?:32|64)\()?(\d+)\)?", text)
    if not m:
        raise PtxGenerationError("lower", f"kernel {kernel}: non-constant launch extent {text!r}")
    return int(m.group(1))


def kernel_geometry(script: str, kernel: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Grid and block of a lowered device kernel from its `T.launch_thread` statements."""
    dims = {"blockIdx": [1, 1, 1], "threadIdx": [1, 1, 1]}
    for kind, axis, extent in _LAUNCH.findall(script):
        dims[kind]["xyz".index(axis)] = max(dims[kind]["xyz".index(axis)], _extent(extent, kernel))
    g, b = dims["blockIdx"], dims["threadIdx"]
    return (g[0], g[1], g[2]), (b[0], b[1], b[2])


def _call_counts(main: Any) -> tuple[list[str], dict[str, int]]:
    """PrimFunc names called by `call_tir` in Relax main, in order with repetitions, plus other calls."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    order: list[str] = []
    other: dict[str, int] = {}

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call):
            if expr.op.same_as(call_tir):
                order.append(expr.args[0].name_hint)
            elif isinstance(expr.op, tvm.ir.Op):
                other[expr.op.name] = other.get(expr.op.name, 0) + 1
            elif isinstance(expr.op, tvm.ir.GlobalVar):
                other[expr.op.name_hint] = other.get(expr.op.name_hint, 0) + 1

    relax.analysis.post_order_visit(main.body, visit)
    return order, other


def _zero_pipeline(built: Built, batch: int, target: Any, secs: dict[str, float],
                   shape_only: bool | None = None, materialise_gates: bool = False) -> tuple[Any, int]:
    """Model -> Relax module through TVM's "zero" pipeline (legalised, fused), adding the seconds to `secs`;
    returns (module, gate multiplies rewritten).

    shape_only: constant folding decides what to fold as TVM's does but does not compute the folded weights
    (src/zoo/shape_fold.py), unless the module reads tensor values into shapes; default SHAPE_ONLY_FOLDING.
    materialise_gates: rewrite channel-gate multiplies first (src/zoo/gates.py), so that no gate convolution is
    fused into, and recomputed by, the full-size multiply."""
    from tvm import relax

    from src.zoo.gates import materialise_gate_broadcasts
    from src.zoo.shape_fold import needs_values, shape_only_folding

    mod, stage_secs = to_relax(built, batch)
    t0 = time.perf_counter()
    rewritten = 0
    try:
        if materialise_gates:
            mod, rewritten = materialise_gate_broadcasts(mod)
        with target:
            if (SHAPE_ONLY_FOLDING if shape_only is None else shape_only) and not needs_values(mod):
                with shape_only_folding():
                    mod = relax.get_pipeline("zero")(mod)
            else:
                mod = relax.get_pipeline("zero")(mod)
    except Exception as exc:
        raise PtxGenerationError("schedule", describe(exc)) from exc
    stage_secs["schedule"] = time.perf_counter() - t0
    for key, value in stage_secs.items():
        secs[key] = secs.get(key, 0.0) + value
    return mod, rewritten


def lower_prims(prims: dict, target: Any) -> tuple[str, dict[str, tuple]]:
    """Scheduled PrimFuncs (with their global symbols) -> (CUDA C of their device kernels, kernel geometry).

    Only the device half is code-generated: TVM's CUDA code generator on the device module gives the same
    source as a full build, without compiling the host module with LLVM (about a second per CNN).
    """
    import tvm
    from tvm.tirx.build import split_host_device_mods

    tir_mod = tvm.IRModule(prims)
    tir_mod = tvm.tirx.transform.BindTarget(target.with_host(tvm.target.Target("llvm")))(tir_mod)
    pipeline, _finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    with tvm.transform.PassContext(opt_level=3):
        lowered = pipeline(tir_mod)
    _host_mod, device_mods = split_host_device_mods(lowered)
    device_mods = {t: finalize_device()(m) for t, m in device_mods.items()}
    if len(device_mods) != 1:
        raise PtxGenerationError("lower", f"expected one CUDA device module, got {len(device_mods)}")
    dev = next(iter(device_mods.values()))
    geometry = {gv.name_hint: kernel_geometry(f.script(), gv.name_hint) for gv, f in dev.functions.items()}
    source = tvm.get_global_func("target.build.cuda")(dev, target).inspect_source()
    if "__global__" not in source and geometry:
        raise PtxGenerationError("lower", "TVM produced no CUDA kernels")
    return source, geometry


@contextmanager
def _timed_stage(stage: str, secs: dict[str, float], passthrough: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Time the block into secs[stage]; an error other than `passthrough` becomes PtxGenerationError(stage)."""
    t0 = time.perf_counter()
    try:
        yield
    except passthrough:
        raise
    except Exception as exc:
        raise PtxGenerationError(stage, describe(exc)) from exc
    finally:
        secs[stage] = secs.get(stage, 0.0) + time.perf_counter() - t0


def _lowers(gv: Any, func: Any, target: Any) -> bool:
    """Whether one scheduled PrimFunc lowers on its own."""
    try:
        lower_prims({gv: func}, target)
    except Exception:
        return False
    return True


def schedule_and_lower(prims: dict, target: Any, secs: dict[str, float]
                       ) -> tuple[str, dict[str, tuple], dict[str, tuple[str, ...]]]:
    """Unscheduled PrimFuncs -> (CUDA C of their device kernels, kernel geometry, rules each was scheduled without).

    Each function is scheduled alone (src/zoo/schedule.py: a rule that asserts on it declines), then all are
    lowered together. If that fails, the functions that do not lower alone are scheduled again without the rule
    that took them, until they lower or only Fallback's schedule is left (then the lowering error is raised).
    Scheduling is timed into secs["schedule"], lowering (failed attempts too) into secs["lower"]; a function no
    rule schedules is a PtxGenerationError of stage "schedule" naming it.
    """
    from src.zoo.schedule import schedule_func

    excluded: dict[Any, frozenset[str]] = {gv: frozenset() for gv in prims}
    done: dict[Any, Any] = {}
    while True:
        with _timed_stage("schedule", secs, (PtxGenerationError,)):
            for gv, f in prims.items():
                if gv not in done:
                    try:
                        done[gv] = schedule_func(f, target, excluded[gv])
                    except Exception as exc:
                        raise PtxGenerationError("schedule", f"{gv.name_hint}: {describe(exc)}") from exc
        named = {gv: d.func.with_attr("global_symbol", gv.name_hint) for gv, d in done.items()}
        try:
            with _timed_stage("lower", secs, (PtxGenerationError,)):
                source, geometry = lower_prims(named, target)
            return source, geometry, {gv.name_hint: d.without for gv, d in done.items()}
        except PtxGenerationError as exc:
            with _timed_stage("lower", secs, ()):
                failing = [gv for gv in named if not _lowers(gv, named[gv], target)]
            stuck = [gv.name_hint for gv in failing if done[gv].rule in ("", "fallback")]
            if not failing or stuck:
                where = f" ({', '.join(sorted(stuck))} fail to lower under every rule)" if stuck else ""
                raise PtxGenerationError("lower", f"{exc}{where}") from exc
            for gv in failing:
                excluded[gv] = excluded[gv] | {done.pop(gv).rule}


def _call_graph(mod: Any) -> tuple[list[str], dict[str, int], dict]:
    """(PrimFunc call order of `main`, non-kernel calls, the module's PrimFuncs by GlobalVar)."""
    import tvm
    from tvm import relax

    # PrimFuncs as the pipeline left them: a global symbol attribute would enter their structural hash (func_key)
    prims = {gv: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    order, other = _call_counts(relax.transform.AttachGlobalSymbol()(mod)["main"])
    return order, other, prims


class _NoCommonPreamble(Exception):
    """Cached PrimFuncs were generated with preambles no one of which contains the others."""


def _lower_through_cache(prims: dict, order: list[str], target: Any, cache: FuncCache, target_arch: str,
                         secs: dict[str, float]) -> tuple[str, dict[str, tuple], dict[str, tuple[str, ...]]]:
    """Like `schedule_and_lower`, but PrimFuncs found in the cache are neither scheduled nor lowered
    (src/zoo/func_cache.py); kernels are listed in first-call order, as TVM's whole-module code generation does."""
    from src.zoo.func_cache import assemble, func_key, records_from_cuda, superset_preamble

    keys = {gv.name_hint: func_key(f, target_arch) for gv, f in prims.items()}
    records = {name: cache.get(key) for name, key in keys.items()}
    new = {gv: f for gv, f in prims.items() if records[gv.name_hint] is None}
    cache.last = {"tvm_funcs": len(prims), "tvm_funcs_reused": len(prims) - len(new)}
    if new:
        source, geometry, without = schedule_and_lower(new, target, secs)
        with _timed_stage("lower", secs, (PtxGenerationError,)):
            kernels_of: dict[str, list[str]] = {gv.name_hint: [] for gv in new}
            for name in sorted(geometry, key=lambda n: (len(n), n)):
                m = re.fullmatch(r"(.+)_kernel(?:_(\d+))?", name)
                if not m or m.group(1) not in kernels_of:
                    raise PtxGenerationError("lower", f"unexpected device kernel name {name!r}")
                kernels_of[m.group(1)].append(name)
            fresh = records_from_cuda(source, kernels_of, geometry, without)
        for name, rec in fresh.items():
            cache.put(keys[name], rec)
            records[name] = rec
    preamble = superset_preamble([r.preamble for r in records.values() if r.kernels])
    if preamble is None and any(r.kernels for r in records.values()):
        raise _NoCommonPreamble
    first_call = {name: i for i, name in reversed(list(enumerate(order)))}
    names = sorted(records, key=lambda n: (first_call.get(n, len(order)), n))
    source = assemble(preamble or "", [(name, records[name]) for name in names])
    geometry = {name + k.suffix: (k.grid, k.block) for name in names for k in records[name].kernels}
    return source, geometry, {name: records[name].without for name in names}


def compile_cuda(built: Built, batch: int = 1, target_arch: str = TVM_TARGET_ARCH,
                 func_cache: FuncCache | None = None, materialise_gates: bool = False) -> Compiled:
    """Model -> CUDA C of every kernel + the launch list of one inference (no GPU needed).

    Each PrimFunc gets dlight's default GPU schedules alone; a rule that cannot handle a function is left out for
    that function only (`schedule_and_lower`, src/zoo/schedule.py), and `non_kernel_calls` says how many functions
    went without which rule (`funcs_scheduled_without_<rule>`). Results of the earlier module-wide fallback carry
    `schedule_without_<rules>` instead (plausibility.module_fallback).

    With `func_cache`, PrimFuncs scheduled and lowered for an earlier CNN (same structure) are taken from it
    (src/zoo/func_cache.py): the CUDA C is then assembled from per-PrimFunc kernels, whose parameter names are
    replaced by position, and `func_stats` says how many were reused.

    materialise_gates: the variant for a CNN whose default schedule recomputes its squeeze-excite gates
    (src/zoo/gates.py); `gates_materialised` says how many gate multiplies were rewritten.
    """
    from src.zoo.schedule import rules_dropped

    tvm = _tvm()
    target = tvm.target.Target({"kind": "cuda", "arch": target_arch})
    secs: dict[str, float] = {}
    mod, gates = _zero_pipeline(built, batch, target, secs, materialise_gates=materialise_gates)
    order, other, prims = _call_graph(mod)
    if func_cache is not None:
        try:
            source, geometry, without = _lower_through_cache(prims, order, target, func_cache, target_arch, secs)
        except _NoCommonPreamble:
            whole = compile_cuda(built, batch, target_arch, materialise_gates=materialise_gates)
            whole.seconds = {k: secs.get(k, 0.0) + whole.seconds.get(k, 0.0) for k in {*secs, *whole.seconds}}
            return whole
    else:
        source, geometry, without = schedule_and_lower(prims, target, secs)
    stats = dict(func_cache.last) if func_cache is not None else {}
    return Compiled(source, launch_list(order, geometry), batch, (batch, *built.input_shape[1:]), secs,
                    {**other, **rules_dropped(without)}, func_stats=stats, gates_materialised=gates)


def launch_list(order: list[str], geometry: dict[str, tuple]) -> list[Launch]:
    """Kernels of each called PrimFunc, multiplicity = number of calls; kernels listed in first-call order."""
    by_func: dict[str, list[str]] = {}
    for name in geometry:
        m = re.fullmatch(r"(.+)_kernel(?:_(\d+))?", name)
        if not m:
            raise PtxGenerationError("lower", f"unexpected device kernel name {name!r}")
        by_func.setdefault(m.group(1), []).append(name)
    calls: dict[str, int] = {}
    for func in order:
        kernels = by_func.get(func)
        if kernels is None:
            # A PrimFunc with no device kernel would run on the host: not expected for a CUDA target.
            raise PtxGenerationError("lower", f"PrimFunc {func!r} has no CUDA kernel")
        for k in sorted(kernels, key=lambda n: (len(n), n)):
            calls[k] = calls.get(k, 0) + 1
    return [Launch(k, geometry[k][0], geometry[k][1], n) for k, n in calls.items()]


def nvcc_path() -> str:
    path = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
    if path is None:
        raise MissingFrameworkError("nvcc not found: install the CUDA toolkit or the nvidia-cuda-nvcc wheel")
    return path


def cuda_to_ptx(source: str, arch: str, timeout: float = 600.0) -> str:
    """Compile TVM's CUDA C to PTX for one arch with nvcc (no GPU needed)."""
    ptx_arch = ptx_arch_for(arch)
    with tempfile.TemporaryDirectory(prefix="zoo_nvcc_") as tmp:
        cu = Path(tmp) / "kernels.cu"
        cu.write_text(source)
        out = Path(tmp) / "kernels.ptx"
        cmd = [nvcc_path(), "-ptx", f"-arch={ptx_arch}", "-w", "-o", str(out), str(cu)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise PtxGenerationError("nvcc", (proc.stderr or proc.stdout).strip()[-500:])
        return out.read_text()


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]
