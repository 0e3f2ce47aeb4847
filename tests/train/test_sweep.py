"""src.train.sweep trains the chosen models in one process and records the sweep's wall time."""

import json

import pytest

from src.train.sweep import main
from tests.train.tiny import overrides


def test_sweep_two_models_records_wall_time(tmp_path):
    ov = overrides(tmp_path, protocols="[random]")
    out = main(["--models", "dt,lr", *ov])
    assert out["models"] == ["dt", "lr"] and out["wall_seconds"] > 0
    assert set(out["per_model_seconds"]) == {"dt", "lr"}
    assert set(out["results"]["dt"]) == {"random"}
    saved = json.loads((tmp_path / "reports" / "sweep.json").read_text())
    assert saved["wall_seconds"] == pytest.approx(out["wall_seconds"])


def test_sweep_rejects_unknown_model(tmp_path):
    with pytest.raises(SystemExit):
        main(["--models", "svm"])
