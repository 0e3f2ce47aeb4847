"""Raw-file resolution: mirror copies are hash-checked; absent files are downloaded and verified."""

import hashlib
import http.server
import threading
from functools import partial

import pytest

from src.ingest.manifest import ManifestError, RawFile, load_manifest, resolve, sha256_of, upstream_of


def _entry(path, data, url):
    return RawFile(path, hashlib.sha256(data).hexdigest(), len(data), "c0ffee", url)


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "upstream"
    root.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_manifest_covers_the_mirror_with_matching_hashes(mirror):
    manifest = load_manifest()
    # Every file of every source the ingest reads is pinned. Source folders that appeared in the mirror since
    # (issue 16's new sources) are not read until their parser lands, so they are not required here yet.
    sources = {k.split("/", 1)[0] for k in manifest}
    files = {p.relative_to(mirror).as_posix() for p in mirror.rglob("*")
             if p.is_file() and p.relative_to(mirror).parts[0] in sources}
    assert set(manifest) == files
    sample = manifest["timm/benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv"]
    assert sha256_of(mirror / sample.path) == sample.sha256
    assert sample.url.startswith("https://raw.githubusercontent.com/huggingface/pytorch-image-models/")


def test_urls_are_pinned_to_commits():
    commit, url = upstream_of("ryujaehun-pytorch-gpu-benchmark/branch-ti/results/x.csv", {})
    assert commit == "4376de862a5104826bbf1c3439dc2dfddca59781"
    assert url.endswith(f"ryujaehun/pytorch-gpu-benchmark/{commit}/results/x.csv")
    assert upstream_of("lambda-tensorflow-benchmark/DERIVED_logs_total_images_per_sec.csv", {})[1] == ""


def test_changed_mirror_file_is_an_error(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n")
    entry = RawFile("a.csv", "0" * 64, 4, "c0ffee", "")
    with pytest.raises(ManifestError, match="sha256 differs"):
        resolve(entry, tmp_path, tmp_path / "cache")


def test_absent_file_without_downloads_is_an_error(tmp_path):
    with pytest.raises(ManifestError, match="missing from the mirror"):
        resolve(RawFile("a.csv", "0" * 64, 4, "c", "http://127.0.0.1:9/a.csv"), tmp_path, tmp_path, False)


def test_absent_file_is_downloaded_and_verified(tmp_path, server):
    root, base = server
    data = b"model,x\nresnet50,1\n"
    (root / "f (1).csv").write_bytes(data)
    entry = _entry("src/f (1).csv", data, f"{base}/f (1).csv")
    path = resolve(entry, tmp_path / "mirror", tmp_path / "cache")
    assert path == tmp_path / "cache" / "src/f (1).csv" and path.read_bytes() == data


def test_download_with_wrong_hash_is_rejected(tmp_path, server):
    root, base = server
    (root / "f.csv").write_bytes(b"tampered\n")
    entry = _entry("f.csv", b"original\n", f"{base}/f.csv")
    with pytest.raises(ManifestError, match="sha256 of the download"):
        resolve(entry, tmp_path / "mirror", tmp_path / "cache")
    assert not (tmp_path / "cache" / "f.csv").exists()
