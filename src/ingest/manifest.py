"""The committed list of raw files: where each comes from upstream (URL pinned to a commit) and its sha256.

The ingest reads a raw file from the mirror folder when it is there and, if not, downloads it from its pinned
URL into `data/raw/` and checks the hash. Mirror files are hash-checked too, so the manifest (committed in
`src/ingest/manifest.csv`) identifies the exact data every run used.

Rebuild it (after a deliberate upstream update) with `python -m src.ingest.manifest --mirror ../shared/data/raw`.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MANIFEST_PATH = Path(__file__).with_name("manifest.csv")
RAW_GITHUB = "https://raw.githubusercontent.com"

# Top-level mirror folder -> upstream repository; sub-folders that are other commits of it are listed apart.
REPOS = {
    "timm": "huggingface/pytorch-image-models",
    "ryujaehun-pytorch-gpu-benchmark": "ryujaehun/pytorch-gpu-benchmark",
    "nicklhy-DLInfBench": "nicklhy/DLInfBench",
    "lambda-tensorflow-benchmark": "LambdaColdStorage/lambda-tensorflow-benchmark",
    # Single-layer conv timings (src/ingest/layers.py).
    "sitar-lab-NeuSight": "sitar-lab/NeuSight",
    "baidu-research-DeepBench": "baidu-research/DeepBench",
    "CDECatapult-ml-performance-prediction": "CDECatapult/ml-performance-prediction",
    # Whole-network rows from runtimes and GPUs the first four sources lack.
    "mlcommons-cm4mlperf-results": "mlcommons/cm4mlperf-results",
    "PaddlePaddle-PaddleClas": "PaddlePaddle/PaddleClas",
    "jcjohnson-cnn-benchmarks": "jcjohnson/cnn-benchmarks",
    "NVIDIA-AI-IOT-torch2trt": "NVIDIA-AI-IOT/torch2trt",
}
TIMM_HEAD = "aa4b5850c1543fa488abf260f18390eda46cf85d"
COMMITS = {
    ("ryujaehun-pytorch-gpu-benchmark", "master"): "3f47a9e2a43ca751ffade0add700b54b00e44bf0",
    ("ryujaehun-pytorch-gpu-benchmark", "branch-dgx"): "351b5efaa87f6070db184e85dcca48009bf82a3c",
    ("ryujaehun-pytorch-gpu-benchmark", "branch-ti"): "4376de862a5104826bbf1c3439dc2dfddca59781",
    ("nicklhy-DLInfBench", ""): "a626be297b20db165f439beb3ce6cb656313f081",
    ("lambda-tensorflow-benchmark", ""): "e086e0e7d88a19991642d0774793693d4b7cbe46",
    ("lambda-tensorflow-benchmark", "history_64f866ce"): "64f866ce093a97d926d9011431b29a97fa5c88c1",
    ("lambda-tensorflow-benchmark", "history_6595db3e"): "6595db3eb8b2a840924cb370ae60d610d8128f26",
    ("sitar-lab-NeuSight", ""): "6945927d9afcca2b9daf021f8395e53edc5b4eef",
    ("baidu-research-DeepBench", ""): "da81ba7820739e2e506dc27f382d15be5479f98f",
    ("CDECatapult-ml-performance-prediction", ""): "e649f32d354d8246411b6adafdc65b46811dd111",
    ("mlcommons-cm4mlperf-results", ""): "84d8b84c6d6e3d646e27d511e438fd12d144ade9",
    ("PaddlePaddle-PaddleClas", ""): "d178931fca432204e6b7422bac4f92e09ff22fa4",
    ("jcjohnson-cnn-benchmarks", ""): "83d441f852134f4a98aa3e665499d9369b6141c9",
    ("jcjohnson-cnn-benchmarks", "history_93014cd7"): "93014cd77b5478c51d93fbdc6549369765a64f80",
    ("NVIDIA-AI-IOT-torch2trt", ""): "4e820ae31b4e35d59685935223b05b2e11d47b03",
}


class ManifestError(RuntimeError):
    """A raw file that is missing, cannot be fetched, or does not match its recorded hash."""


@dataclass(frozen=True)
class RawFile:
    path: str  # relative to the mirror root, e.g. "timm/benchmark-infer-...csv"
    sha256: str
    size: int
    commit: str
    url: str  # empty for files derived by the data curator (no upstream copy)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_manifest(path: Path = MANIFEST_PATH) -> dict[str, RawFile]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {
            row["path"]: RawFile(row["path"], row["sha256"], int(row["size"]), row["commit"], row["url"])
            for row in csv.DictReader(handle)
        }


def _timm_commits(mirror: Path) -> dict[str, str]:
    """File -> commit from timm's SOURCE.md table (deleted files keep their last commit; others HEAD)."""
    commits = {}
    for line in (mirror / "timm" / "SOURCE.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].endswith(".csv"):
            commits[cells[0]] = TIMM_HEAD if cells[3] == "present_at_HEAD" else cells[1]
    return commits


def upstream_of(rel: str, timm_commits: dict[str, str]) -> tuple[str, str]:
    """(commit, URL) of a mirror-relative path; the URL is empty for curator-derived files."""
    top, _, rest = rel.partition("/")
    repo = REPOS[top]
    if rel.endswith("SOURCE.md") or Path(rel).name.startswith("DERIVED_"):
        return COMMITS.get((top, ""), ""), ""
    if top == "timm":
        commit = timm_commits[rest]
        return commit, f"{RAW_GITHUB}/{repo}/{commit}/results/{rest}"
    sub, _, inner = rest.partition("/")
    if (top, sub) in COMMITS:  # a sub-folder that holds another commit (branch or history) of the repo
        commit = COMMITS[(top, sub)]
        return commit, f"{RAW_GITHUB}/{repo}/{commit}/{inner}"
    commit = COMMITS[(top, "")]
    return commit, f"{RAW_GITHUB}/{repo}/{commit}/{rest}"


def build_manifest(mirror: Path, out: Path = MANIFEST_PATH) -> int:
    """Hash every mirror file of the sources the ingest reads (REPOS) and write the manifest; returns the count.

    Source folders that appear in the mirror before their parser lands are left out until they are added to REPOS.
    """
    timm_commits = _timm_commits(mirror)
    files = sorted(p for p in mirror.rglob("*") if p.is_file() and p.relative_to(mirror).parts[0] in REPOS)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["path", "sha256", "size", "commit", "url"])
        for path in files:
            rel = path.relative_to(mirror).as_posix()
            commit, url = upstream_of(rel, timm_commits)
            writer.writerow([rel, sha256_of(path), path.stat().st_size, commit, url])
    return len(files)


def fetch(entry: RawFile, cache: Path, timeout: float = 60.0) -> Path:
    """Download a raw file to `cache/<path>` from its pinned URL and check its sha256."""
    if not entry.url:
        raise ManifestError(
            f"{entry.path} is absent from the mirror and has no upstream URL (it was derived by the data "
            "curator); put it in the mirror folder"
        )
    target = cache / entry.path
    if target.exists() and sha256_of(target) == entry.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    quoted = re.sub(r"[ ()]", lambda m: {" ": "%20", "(": "%28", ")": "%29"}[m.group(0)], entry.url)
    try:
        with urllib.request.urlopen(quoted, timeout=timeout) as response:
            data = response.read()
    except OSError as exc:
        raise ManifestError(f"{entry.path}: download from {entry.url} failed: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise ManifestError(f"{entry.path}: sha256 of the download is {digest}, expected {entry.sha256}")
    target.write_bytes(data)
    return target


def resolve(
    entry: RawFile, mirror: Path, cache: Path, download_missing: bool = True, verify: bool = True
) -> Path:
    """Path of a raw file: the mirror copy (hash-checked) or, if absent there, a verified download."""
    local = mirror / entry.path
    if local.exists():
        if verify and sha256_of(local) != entry.sha256:
            raise ManifestError(f"{local}: sha256 differs from the manifest ({entry.sha256}); mirror file changed")
        return local
    if not download_missing:
        raise ManifestError(f"{entry.path} is missing from the mirror {mirror} and downloads are disabled")
    return fetch(entry, cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mirror", type=Path, default=Path("../shared/data/raw"))
    parser.add_argument("--out", type=Path, default=MANIFEST_PATH)
    args = parser.parse_args()
    print(f"{build_manifest(args.mirror, args.out)} files -> {args.out}")


if __name__ == "__main__":
    main()
