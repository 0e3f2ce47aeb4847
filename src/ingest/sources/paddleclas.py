"""PaddlePaddle/PaddleClas model-zoo latency tables: Paddle Inference + TensorRT on a Tesla V100 and a Tesla T4.

The measurements are Markdown tables in documentation (SOURCE.md):
- 14 family cards `docs/zh_CN/models/ImageNet1k/<Family>.md`: section 1.3.1 (V100; FP32, TensorRT 8.0.3.4 by the
  note under the table) with `Latency(ms) bs=1/4/8` columns, and 1.3.2 (T4) with FP16 and FP32 columns at bs 1/4/8;
- `docs/en/models/Mobile_en.md` section 4 (T4, FP16/FP32 at bs 1/4/8); its section 3 times an ARM CPU (SD855);
- `docs/zh_CN/models/ImageNet1k/model_list.md`: per-series tables whose `time(ms) bs=N` columns are V100 FP32 +
  TensorRT 8.0.3.4 (the page's stated environment); its SD855 and Intel Xeon columns (and the PP-LCNet `*`/`**`
  columns, Intel CPUs by their footnotes) are CPU timings.

A table is a timing table when a header cell is a latency column (`Latency(ms)`, `time(ms)` or `... (ms)` with a batch
size). Every (table row, latency column) is one row read. CPU columns are quarantined as CPU timings ("not a GPU"),
cells without a number ('-', empty) as "not measured", rows with the wrong number of cells as truncated. A latency
header without a batch size, or a first column that is not the model name, stops the parse with an error naming
file and line (the columns would otherwise be guessed). DPN.md's T4 header lists three FP32 columns for six values;
SOURCE.md (and the English card) reads them as FP16 bs 1/4/8 then FP32 bs 1/4/8, which `HEADER_FIXES` applies.

Units: milliseconds per batch -> `latency_ms` (`latency_stat` "mean": the tools average 2000 timed runs after 100
warm-up runs); framework "paddle", compile_mode "tensorrt" (`--use_tensorrt=True`); the TensorRT version is in
`variant` (V100: 8.0.3.4 as noted; T4: uncertain, SOURCE.md), with the file the table comes from: the family cards
and model_list.md are different measurement rounds (ResNet50 bs 1 on the V100: 2.19 vs 2.54 ms), so they are two
deployment contexts, never one. Input size: the `Size`/`Crop Size` column; tables
without one (model_list.md, Mobile_en.md) take the size the family cards give the same model, else a size in the name
(`_384`), else Mobile_en's 224 (every model of that card is a 224-px ImageNet model); otherwise the row is quarantined.
`_ssld` (distilled weights) and `_wsl` rows repeat an architecture, and some pages copy another page's values: a row
whose time equals an earlier row of the same architecture, GPU, precision, batch and size (any file) is quarantined
as a repeat, never counted twice. `variant` holds the Paddle spelling, so two Paddle models that map to one timm
name with different times stay two deployments.

Names: Paddle's spelling stays in `model`; `PADDLE_TO_TIMM` rules give the timm/torchvision name of the same
architecture for `model_key` where one exists (`_vd` is timm's `d` variant: deep stem and average-pool shortcut).
Transformers and other attention models (ViT, DeiT, Swin, CSWin, PVT, Twins, LeViT, TNT, MobileViT) are kept with
`is_cnn` False.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..gpus import resolve_device
from ..records import ParseResult, quarantined, to_float, workload

SOURCE = "paddleclas"
MIRROR_DIR = "PaddlePaddle-PaddleClas"
CARDS_DIR = f"{MIRROR_DIR}/docs/zh_CN/models/ImageNet1k"
MOBILE = f"{MIRROR_DIR}/docs/en/models/Mobile_en.md"
MODEL_LIST = f"{CARDS_DIR}/model_list.md"
NAME_HEADERS = ("Models", "Model", "模型")
SIZE_HEADERS = ("Size", "Crop Size")
# (file name, GPU) -> the latency header the values really follow (SOURCE.md caveat on DPN.md).
HEADER_FIXES = {("DPN.md", "Tesla T4"): [f"{p} bs={b}" for p in ("FP16", "FP32") for b in (1, 4, 8)]}
TRT_NOTE = {"Tesla V100": "TensorRT 8.0.3.4", "Tesla T4": "TensorRT version uncertain (SOURCE.md)"}
DEFAULT_SIZE = {MOBILE: 224}
CPU_MARKERS = ("SD855", "Intel", "thread=", "<sup>*</sup>", "<sup>**</sup>")
CPU_HEADINGS = ("SD855", "Intel", "CPU")
NON_CNN_PREFIXES = ("vit_", "deit_", "swin", "cswin", "pvt_", "pcpvt", "alt_gvt", "levit_", "tnt_", "mobilevit")
# Paddle spelling (lower case, `_ssld`/`_wsl`/footnotes removed) -> timm/torchvision name. Regex rules in order.
PADDLE_TO_TIMM: list[tuple[str, str]] = [
    (r"^resnet(\d+)_vd$", r"resnet\1d"),
    (r"^resnet(\d+)_vc$", r"resnet\1c"),
    (r"^se_resnet(\d+)_vd$", r"seresnet\1d"),
    (r"^resnext(\d+)_vd_(\d+x\d+d)$", r"resnext\1d_\2"),
    (r"^se_resnext(\d+)_vd_(\d+x\d+d)$", r"seresnext\1d_\2"),
    (r"^se_resnext(\d+)_(\d+x\d+d)$", r"seresnext\1_\2"),
    (r"^res2net(\d+)_vd_26w_4s$", r"res2net\1d"),
    (r"^hrnet_w(\d+)_c$", r"hrnet_w\1"),
    # the DenseNet paper's DenseNet-264 (k = 32, 33.7 M parameters); timm's densenet264 is another net (k = 48)
    (r"^densenet264$", "densenet264_k32"),
    (r"^efficientnetb(\d)$", r"efficientnet_b\1"),
    (r"^regnetx_(\d+)gf$", r"regnetx_GF\1"),
    (r"^regnetx_(\d+)mf$", r"regnetx_MF\1"),
    (r"^inceptionv(\d)$", r"inception_v\1"),
    (r"^mobilenetv1$", "mobilenetv1_100"),
    (r"^mobilenetv2$", "mobilenetv2_100"),
    (r"^mobilenetv3_(large|small)_x(\d)_(\d+)$", r"mobilenetv3_\1_W\2_\3"),
    (r"^mobilenetv([12])_x(\d)_(\d+)$", r"mobilenetv\1_W\2_\3"),
    (r"^ghostnet_x(\d)_(\d+)$", r"ghostnet_W\1_\2"),
    (r"^shufflenetv2$", "shufflenet_v2_x1_0"),
    (r"^shufflenetv2_x(\d)_(\d)$", r"shufflenet_v2_x\1_\2"),
    (r"^resnest50$", "resnest50d"),
    (r"^resnest(\d+)$", r"resnest\1e"),
    (r"^pphgnet_(tiny|small|base)$", r"hgnet_\1"),
    (r"^repvgg_([ab]\d(?:g\d)?)$", r"repvgg_\1"),
    (r"^rexnet_(\d)_(\d)$", r"rexnet_\1\g<2>0"),
    (r"^mixnet_([sml])$", r"mixnet_\1"),
    (r"^vit_(.+)$", r"vit_\1"),
    (r"^deit_(.+)$", r"deit_\1"),
    (r"^swintransformer_(.+)$", r"swin_\1"),
    (r"^swintransformerv2_(.+)$", r"swinv2_\1"),
    (r"^pvt_v2_(b\d)$", r"pvt_v2_\1"),
    (r"^pcpvt_(.+)$", r"twins_pcpvt_\1"),
    (r"^alt_gvt_(.+)$", r"twins_svt_\1"),
]


class MarkdownTableError(ValueError):
    """A timing table whose header cannot be read without guessing."""


def _clean(cell: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<br\s*/?>", " ", cell)).strip()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def timm_name(paddle: str) -> str:
    """The timm/torchvision name of a Paddle architecture (lower-case Paddle name where no rule applies)."""
    name = re.sub(r"<sup>.*?</sup>|<br\s*/?>|\s", "", paddle).lower()
    name = re.sub(r"_(ssld|wsl)$", "", re.sub(r"_ssld_int8$", "", name))
    for pattern, repl in PADDLE_TO_TIMM:
        if re.match(pattern, name):
            mapped = re.sub(pattern, repl, name)
            # RegNetX_400MF -> regnetx_004, RegNetX_4GF -> regnetx_040; width x0_75 -> 075, x1_3 -> 130 (timm)
            mapped = re.sub(r"MF(\d+)", lambda m: f"{int(m.group(1)) // 100:03d}", mapped)
            mapped = re.sub(r"GF(\d+)", lambda m: f"{int(m.group(1)) * 10:03d}", mapped)
            return re.sub(r"W(\d)_(\d+)", lambda m: f"{round(float(f'{m.group(1)}.{m.group(2)}') * 100):03d}", mapped)
    return name


def _latency_column(header: str) -> dict[str, Any] | None:
    """(precision, batch, cpu) of a latency header cell; None if the cell is not a latency column."""
    text = _clean(header)
    if not re.search(r"(latency|time)\s*\(ms\)|\(ms\)", text, re.IGNORECASE):
        return None
    cpu = any(marker in header for marker in CPU_MARKERS)
    batch = re.search(r"(?:bs|batch size)\s*=\s*(\d+)", text, re.IGNORECASE)
    precision = "fp16" if "FP16" in text.upper() else "fp32" if "FP32" in text.upper() else None
    return {"batch": int(batch.group(1)) if batch else None, "precision": precision, "cpu": cpu, "header": text}


def _gpu_of(heading: str, rel: str) -> str | None:
    if "V100" in heading:
        return "Tesla V100"
    if "T4" in heading:
        return "Tesla T4"
    return "Tesla V100" if rel == MODEL_LIST else None


def _tables(lines: list[str]) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """(header line number, heading above it, [(line number, row line)]) of every Markdown table."""
    tables, heading, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line
        if line.strip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[i + 1]):
            rows, j = [], i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append((j + 1, lines[j]))
                j += 1
            tables.append((i + 1, heading, [(i + 1, line)] + rows))
            i = j
            continue
        i += 1
    return tables


def parse_file(path: Path, rel: str, commit: str, sizes: dict[str, int],
               seen: dict[tuple, str] | None = None) -> ParseResult:
    """Every timing table of one Markdown file; `sizes` maps Paddle names to input sizes seen in the cards, `seen`
    the rows already taken from earlier files (a value copied onto another page is one measurement)."""
    result = ParseResult()
    seen = {} if seen is None else seen
    for header_line, heading, table in _tables(path.read_text(encoding="utf-8").splitlines()):
        header = _cells(table[0][1])
        columns = {i: col for i, h in enumerate(header) if (col := _latency_column(h)) is not None}
        if not columns:
            continue  # accuracy / size tables: no measurement in them
        if _clean(header[0]) not in NAME_HEADERS:
            raise MarkdownTableError(f"{rel}:{header_line}: first column {header[0]!r} is not the model name")
        if any(marker in heading for marker in CPU_HEADINGS):  # e.g. Mobile_en "... based on SD855": an ARM CPU
            columns = {i: {**c, "cpu": True} for i, c in columns.items()}
        gpu = None if all(c["cpu"] for c in columns.values()) else _gpu_of(heading, rel)
        fix = HEADER_FIXES.get((Path(rel).name, gpu))
        for line_no, line in table[1:]:
            cells = _cells(line)
            cols = columns
            if fix and len(cells) == len(header) + len(fix) - len(columns):
                first = min(columns)
                cols = {first + k: _latency_column(f"{h} (ms)") for k, h in enumerate(fix)}
            for index, col in cols.items():
                result.n_read += 1
                key = f"line {line_no}:{col['header']}"
                if col["batch"] is None and not col["cpu"]:
                    raise MarkdownTableError(f"{rel}:{header_line}: latency column {col['header']!r} has no batch size")
                reason = _cell_problem(cells, header, cols, index, col, gpu)
                if reason:
                    result.quarantine.append(quarantined(SOURCE, rel, key, reason, line))
                    continue
                row = _row(rel, commit, gpu, cells, header, index, col, key, line, sizes)
                if isinstance(row, str):
                    result.quarantine.append(quarantined(SOURCE, rel, key, row, line))
                    continue
                twin = (row["model_key"], row["gpu"], row["precision"], row["batch_size"], row["img_size"],
                        row["latency_ms"])
                if twin in seen:
                    reason = f"repeats {seen[twin]} (same architecture, GPU, precision, batch and time)"
                    result.quarantine.append(quarantined(SOURCE, rel, key, reason, line))
                    continue
                seen[twin] = row["measurement_id"]
                result.rows.append(row)
    return result


def _cell_problem(cells, header, cols, index, col, gpu) -> str | None:
    if col["cpu"]:
        return f"CPU timing ({col['header']}), not a GPU"
    if gpu is None:
        return "timing table outside a V100 / T4 section: GPU not stated"
    expected = len(header) + (len(cols) - sum(1 for h in header if _latency_column(h)))
    if len(cells) != expected:
        return f"truncated row: {len(cells)} of {expected} cells"
    value = to_float(_clean(cells[index]))
    if value is None:
        return f"not measured: {_clean(cells[index])!r}"
    if value <= 0:
        return f"non-positive latency: {value:g}"
    return None


def _size(cells, header, rel: str, paddle: str, sizes: dict[str, int]) -> int | None:
    for i, h in enumerate(header):
        if _clean(h) in SIZE_HEADERS:
            value = to_float(_clean(cells[i]))
            return int(value) if value and value == int(value) else None
    if paddle in sizes:
        return sizes[paddle]
    named = re.search(r"_(\d{3})$", paddle)
    return int(named.group(1)) if named else DEFAULT_SIZE.get(rel)


def _row(rel, commit, gpu, cells, header, index, col, key, line, sizes) -> dict[str, Any] | str:
    paddle = re.sub(r"<sup>.*?</sup>|<br\s*/?>|\s", "", cells[0])
    # the spelling with its footnote (`[1]`: ImageNet-22k weights, another row of the same architecture)
    label = re.sub(r"<sup>(.*?)</sup>|<br\s*/?>|\s", r"\1", cells[0])
    img = _size(cells, header, rel, paddle, sizes)
    if img is None:
        return "input size not stated (no Size column, no card row, none in the name)"
    name = timm_name(paddle)
    latency = float(to_float(_clean(cells[index])))
    device = resolve_device(f"{gpu} paddleclas", where=rel)
    work = workload(name, "timm")
    if name.startswith(NON_CNN_PREFIXES):
        work["is_cnn"] = False
    precision = col["precision"] or "fp32"  # V100 tables: FP32 by their note / the page's environment line
    return {
        "measurement_id": f"{SOURCE}:{rel}:{key}", "source": SOURCE, "source_file": rel, "upstream_commit": commit,
        "gpu": device.gpu, "device_raw": gpu, "is_cpu": False, "num_gpus": 1, "framework": "paddle",
        "framework_version": "", "cuda_version": "", "precision": precision, "memory_layout": "nchw",
        "compile_mode": "tensorrt", "variant": f"Paddle Inference, {TRT_NOTE[gpu]}; table {Path(rel).stem}; {label}",
        **work, "model": paddle, "img_size": img, "batch_size": col["batch"], "mode": "inference",
        "latency_ms": latency, "throughput": col["batch"] / latency * 1000.0, "latency_stat": "mean",
        "latency_spread_ms": None, "n_samples": None, "param_count_m": None, "gmacs": None, "activations_m": None,
        "_raw": line, "_row_key": key,
    }


def card_sizes(files: dict[str, Path]) -> dict[str, int]:
    """Paddle name -> input size from the family cards' `Size` columns (for tables that have none)."""
    sizes: dict[str, int] = {}
    for rel in sorted(r for r in files if r.startswith(CARDS_DIR) and r != MODEL_LIST and r.endswith(".md")):
        for _, _, table in _tables(files[rel].read_text(encoding="utf-8").splitlines()):
            header = _cells(table[0][1])
            where = [i for i, h in enumerate(header) if _clean(h) in SIZE_HEADERS]
            if not where:
                continue
            for _, line in table[1:]:
                cells = _cells(line)
                value = to_float(_clean(cells[where[0]])) if len(cells) > where[0] else None
                if value:
                    sizes.setdefault(re.sub(r"<sup>.*?</sup>|<br\s*/?>|\s", "", cells[0]), int(value))
    return sizes


def parse(files: dict[str, Path], commits: dict[str, str]) -> ParseResult:
    """The family cards, Mobile_en.md and model_list.md (`files`: mirror-relative path -> local path)."""
    result = ParseResult()
    sizes, seen = card_sizes(files), {}
    rels = sorted(r for r in files if r.startswith(f"{MIRROR_DIR}/docs/") and r.endswith(".md"))
    for rel in rels:
        result.extend(parse_file(files[rel], rel, commits.get(rel, ""), sizes, seen))
    return result


def published_complexity(text: str) -> dict[str, tuple[float, float]]:
    """Paddle name -> (GFLOPs, parameters in millions) from model_list.md's `FLOPs(G|M)` / `Params(M)` columns.

    Why: the architectures the zoo writes down for Paddle names (src/zoo/definitions.py) are checked against what
    PaddleClas published for them; `paddle.flops()` counts multiply-accumulates of the layers (ResNet50: 4.1 G).
    `FLOPs(M)` columns are converted to G. The first table that lists a name wins (the later `_ssld` tables repeat
    the numbers)."""
    out: dict[str, tuple[float, float]] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = _cells(line)
        cleaned = [re.sub(r"\s", "", _clean(c)) for c in cells]
        if any(c.startswith("Params") for c in cleaned):
            header = cleaned
            continue
        if header is None or set(line.strip()) <= set("|-: "):
            continue
        flops = next((i for i, h in enumerate(header) if h.startswith("FLOPs")), None)
        params = next((i for i, h in enumerate(header) if h.startswith("Params")), None)
        if flops is None or params is None or len(cells) <= max(flops, params):
            continue
        f, p = to_float(_clean(cells[flops])), to_float(_clean(cells[params]))
        if f is None or p is None:
            continue
        name = re.sub(r"<sup>.*?</sup>|<br\s*/?>|\s", "", cells[0])
        out.setdefault(name, (f / 1000.0 if "(M)" in header[flops] else f, p))
    return out
