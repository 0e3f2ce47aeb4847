"""PaddleClas latency tables: the real mirror files, and small corrupt copies of them."""

from collections import Counter

import pytest

from src.ingest.gpus import UnknownGPUError
from src.ingest.sources import paddleclas
from src.ingest.validate import validate
from tests.ingest.conftest import copy_mirror_file

TOP = "PaddlePaddle-PaddleClas"
RESNET = f"{paddleclas.CARDS_DIR}/ResNet.md"
DPN = f"{paddleclas.CARDS_DIR}/DPN.md"


def _files(root):
    return {p.relative_to(root).as_posix(): p for p in (root / TOP).rglob("*.md")}


@pytest.fixture(scope="module")
def parsed(mirror):
    files = _files(mirror)
    result = paddleclas.parse(files, {rel: "d178931fca43" for rel in files})
    frame, rejected = validate(result.rows)
    return result, frame, rejected


def test_real_files_accounting(parsed):
    result, frame, rejected = parsed
    assert result.n_read == len(result.rows) + len(result.quarantine) == 1923
    reasons = Counter(q["reason"].split(" (")[0].split(":")[0] for q in result.quarantine)
    assert reasons["CPU timing"] == 46 * 3 + 37 + 8 + 3 + 1  # SD855 x3 threads, Mobile_en SD855, Intel CPUs
    assert reasons["not measured"] == 164 and reasons["input size not stated"] == 103
    assert all(r["reason"].startswith("exact duplicate of") for r in rejected)
    counts = frame.groupby(["gpu", "precision"]).size().to_dict()
    assert counts == {("Tesla T4", "fp16"): 349, ("Tesla T4", "fp32"): 349, ("Tesla V100 SXM2 16 GB", "fp32"): 582}
    assert set(frame["batch_size"]) == {1, 4, 8} and set(frame["compile_mode"]) == {"tensorrt"}


def test_real_values_and_names(parsed):
    _, frame, _ = parsed
    r50 = frame[(frame["source_file"] == RESNET) & (frame["model"] == "ResNet50")]
    got = {(g, p, b): v for g, p, b, v in r50[["gpu", "precision", "batch_size", "latency_ms"]].itertuples(index=False)}
    # ResNet.md: V100 | ResNet50 | 224 | 2.19 | 3.77 | 6.22 ; T4 | ResNet50 | 224 | 2.63824 ... | 3.47712 ...
    assert got[("Tesla V100 SXM2 16 GB", "fp32", 1)] == 2.19 and got[("Tesla V100 SXM2 16 GB", "fp32", 8)] == 6.22
    assert got[("Tesla T4", "fp16", 1)] == 2.63824 and got[("Tesla T4", "fp32", 1)] == 3.47712
    names = dict(zip(frame["model"], frame["model_key"], strict=False))
    assert names["ResNet50_vd"] == "resnet50d" and names["RegNetX_4GF"] == "regnetx_040"
    assert names["HRNet_W18_C"] == "hrnet_w18" and names["MobileNetV3_large_x1_0"] == "mobilenetv3_large_100"
    vit = frame[frame["model"].str.startswith("ViT_")]
    assert len(vit) and not vit["is_cnn"].any()


def test_dpn_t4_six_values_under_three_headers(parsed):
    _, frame, _ = parsed
    dpn68 = frame[(frame["source_file"] == DPN) & (frame["model"] == "DPN68") & (frame["gpu"] == "Tesla T4")]
    assert sorted(zip(dpn68["precision"], dpn68["batch_size"], strict=True)) == [
        ("fp16", 1), ("fp16", 4), ("fp16", 8), ("fp32", 1), ("fp32", 4), ("fp32", 8)]


def test_distilled_repeats_are_quarantined_once(parsed):
    result, _, _ = parsed
    repeats = [q for q in result.quarantine if q["reason"].startswith("repeats ")]
    assert any("ResNet34_vd_ssld" in q["raw"] for q in repeats)


def test_bad_number_and_truncated_row(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, RESNET)
    text = path.read_text()
    text = text.replace("| ResNet18         | 224       | 1.08 ", "| ResNet18         | 224       | abc ", 1)
    full = "| ResNet34         | 224       | 1.83               | 2.41               | 4.23               |"
    text = text.replace(full, "| ResNet34         | 224       | 1.83 |", 1)
    path.write_text(text)
    result = paddleclas.parse_file(path, RESNET, "", {})
    reasons = [q["reason"] for q in result.quarantine]
    assert "not measured: 'abc'" in reasons
    assert reasons.count("truncated row: 3 of 5 cells") == 3
    assert result.n_read == len(result.rows) + len(result.quarantine)


def test_latency_header_without_batch_is_an_error(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, RESNET)
    path.write_text(path.read_text().replace("| Latency(ms)<br>bs=4 |", "| Latency(ms) |", 1))
    with pytest.raises(paddleclas.MarkdownTableError, match=r"ResNet.md:84: latency column .* has no batch size"):
        paddleclas.parse_file(path, RESNET, "", {})


def test_wrong_first_column_is_an_error(mirror, tmp_path):
    path = copy_mirror_file(mirror, tmp_path, RESNET)
    path.write_text(path.read_text().replace("| Models                 | Size |", "| Net | Size |", 1))
    with pytest.raises(paddleclas.MarkdownTableError, match=r"ResNet.md:84: first column 'Net'"):
        paddleclas.parse_file(path, RESNET, "", {})


def test_unknown_gpu_section_stops_naming_it(mirror, tmp_path, monkeypatch):
    path = copy_mirror_file(mirror, tmp_path, RESNET)
    monkeypatch.setitem(paddleclas.TRT_NOTE, "Tesla P40", "")
    monkeypatch.setattr(paddleclas, "_gpu_of", lambda heading, rel: "Tesla P40")
    with pytest.raises(UnknownGPUError, match="Tesla P40 paddleclas"):
        paddleclas.parse_file(path, RESNET, "", {})


def test_timm_names():
    assert paddleclas.timm_name("ResNeXt101_vd_<br>32x4d") == "resnext101d_32x4d"
    assert paddleclas.timm_name("RegNetX_400MF") == "regnetx_004"
    assert paddleclas.timm_name("GhostNet_x1_3_ssld") == "ghostnet_130"
    assert paddleclas.timm_name("SwinTransformer_tiny_patch4_window7_224<sup>[1]</sup>") == (
        "swin_tiny_patch4_window7_224")


def test_missing_size_column_quarantines_with_the_reason(mirror, tmp_path):
    """A V100 table without its Size column: sizes are not guessed, every cell is quarantined saying why."""
    path = copy_mirror_file(mirror, tmp_path, RESNET)
    lines = path.read_text().splitlines()
    start = lines.index("#### 1.3.1 基于 V100 GPU 的预测速度")
    end = lines.index("#### 1.3.2 基于 T4 GPU 的预测速度")
    for i in range(start, end):
        if lines[i].startswith("|"):
            cells = lines[i].strip().strip("|").split("|")
            lines[i] = "|" + "|".join(cells[:1] + cells[2:]) + "|"
    path.write_text("\n".join(lines) + "\n")
    result = paddleclas.parse_file(path, RESNET, "", {})
    v100 = [q for q in result.quarantine if int(q["row_key"].split()[1].split(":")[0]) <= end]
    assert len(v100) == 18 * 3 and {q["reason"] for q in v100} == {
        "input size not stated (no Size column, no card row, none in the name)"}
    assert result.n_read == len(result.rows) + len(result.quarantine)
