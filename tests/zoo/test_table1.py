"""The paper's Table I trainable-parameter column, reproduced exactly from Keras applications (weights=None).

Numbers: Metz, Goli, Drechsler (PAISE 2023), Table I, "trainable parameters" of the Keras-application CNNs
(identical to Keras' own model.summary() "Trainable params"). NASNet builds only on Keras' JAX backend, so it
is checked in a JAX subprocess through the CLI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import src.zoo.resolve  # noqa: E402,F401  (sets Keras' default backend to torch before Keras is imported)

pytest.importorskip("keras", reason="Keras not installed (zoo extra): Table I needs Keras applications")

TABLE_I_TRAINABLE = {
    "ResNet101": 44_601_832,
    "ResNet152": 60_268_520,
    "ResNet50V2": 25_568_360,
    "ResNet101V2": 44_577_896,
    "ResNet152V2": 60_236_904,
    "NASNetMobile": 5_289_978,
    "NASNetLarge": 88_753_150,
    "DenseNet121": 7_978_856,
    "DenseNet169": 14_149_480,
    "DenseNet201": 20_013_928,
    "MobileNet": 4_231_976,
    "InceptionV3": 23_817_352,
    "VGG16": 138_357_544,
    "VGG19": 143_667_240,
    "EfficientNetB0": 5_288_548,
    "EfficientNetB1": 7_794_184,
    "EfficientNetB2": 9_109_994,
    "EfficientNetB3": 12_233_232,
    "EfficientNetB4": 19_341_616,
    "EfficientNetB5": 30_389_784,
    "EfficientNetB6": 43_040_704,
    "EfficientNetB7": 66_347_960,
    "Xception": 22_855_952,
    "MobileNetV2": 3_504_872,
    "InceptionResNetV2": 55_813_192,
}
NASNET = ("NASNetMobile", "NASNetLarge")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in TABLE_I_TRAINABLE if n not in NASNET])
def test_table_i_trainable_params_torch_backend(name):
    import keras

    from src.zoo.resolve import build
    from src.zoo.static import keras_param_counts

    built = build("keras", name)
    trainable, total = keras_param_counts(built.keras_model)
    assert trainable == TABLE_I_TRAINABLE[name]
    assert total >= trainable
    keras.backend.clear_session()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                    reason="jax not installed: NASNet builds only on Keras' JAX backend (zoo extra)")
@pytest.mark.parametrize("name", NASNET)
def test_table_i_trainable_params_nasnet_on_jax(name):
    # The CLI notices NASNet under the torch backend and reruns itself on JAX.
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    proc = subprocess.run([sys.executable, "-m", "src.zoo", "static", "--source", "keras", "--model", name,
                           "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    obj = json.loads(proc.stdout.strip().splitlines()[-1])
    assert obj["framework"] == "keras-jax"
    assert obj["trainable_params"] == TABLE_I_TRAINABLE[name]
    assert obj["macs"] > 0 and obj["depth"] > 0


def test_nasnet_on_torch_backend_fails_clearly():
    from src.zoo.resolve import UnsupportedModelError, build, keras_backend

    if keras_backend() == "jax":
        pytest.skip("this process runs Keras on JAX")
    with pytest.raises(UnsupportedModelError, match="JAX"):
        build("keras", "NASNetMobile")
