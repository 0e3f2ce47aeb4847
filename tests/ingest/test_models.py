import pytest

from src.ingest.models import NON_CNN_FAMILIES, is_cnn, model_family, model_key


@pytest.mark.parametrize(
    ("name", "key", "family"),
    [
        ("resnet50.a1_in1k", "resnet50", "resnet"),
        ("wide_resnet50_2", "wide_resnet50_2", "wide_resnet"),
        ("tf_efficientnet_b0", "tf_efficientnet_b0", "efficientnet"),
        ("inception-v3", "inception_v3", "inception"),
        ("inception_resnet_v2", "inception_resnet_v2", "inception_resnet"),
        ("vgg16_bn", "vgg16_bn", "vgg"),
        ("seresnext50_32x4d", "seresnext50_32x4d", "resnext"),
        ("vit_base_patch16_224.augreg_in21k", "vit_base_patch16_224", "vit"),
    ],
)
def test_key_and_family(name, key, family):
    assert model_key(name) == key
    assert model_family(name) == family


def test_cnn_flag():
    assert is_cnn("resnet") and is_cnn("densenet")
    assert not is_cnn("vit") and not is_cnn("swin")


# Every non-CNN family and the category its reason must start with ("<category>: <detail>"). A family added to or
# dropped from NON_CNN_FAMILIES has to be added or dropped here too, so the list is reviewed on each change.
EXPECTED_NON_CNN = {
    "transformer": {
        "vit", "deit", "swin", "swinv", "beit", "beitv", "cait", "xcit", "eva", "crossvit", "pit", "tnt", "twins",
        "convit", "coat", "davit", "flexivit", "gcvit", "hiera", "hieradet", "mvitv", "nest", "pvt", "volo",
        "samvit", "aimv", "naflexvit",
    },
    "hybrid": {
        "levit", "coatnet", "coatnext", "maxvit", "maxxvit", "mobilevit", "mobilevitv", "semobilevit",
        "efficientformer", "edgenext", "fastvit", "tiny_vit", "visformer", "vitamin", "caformer", "efficientvit",
        "shvit", "swiftformer", "nextvit", "csatv", "mobilenetv4_hybrid", "mobilenetv5", "botnet", "sebotnet",
        "halonet", "sehalonet", "halo", "haloregnetz", "lamhalobotnet", "lambda", "bat",
    },
    "mlp-mixer": {"mixer", "gmixer", "resmlp", "gmlp"},
    "rnn": {"sequencer"},
}


def test_non_cnn_families_and_reason_categories():
    expected = {fam: cat for cat, fams in EXPECTED_NON_CNN.items() for fam in fams}
    assert set(NON_CNN_FAMILIES) == set(expected)
    got = {fam: reason.split(":", 1)[0] for fam, reason in NON_CNN_FAMILIES.items()}
    assert got == expected


def test_every_non_cnn_family_has_a_reason():
    assert isinstance(NON_CNN_FAMILIES, dict)
    for fam, reason in NON_CNN_FAMILIES.items():
        assert isinstance(reason, str) and reason.strip(), fam
        category, _, detail = reason.partition(":")
        assert category in EXPECTED_NON_CNN and detail.strip(), (fam, reason)


# Convolutional architectures (token/spatial mixing by convolution or pooling only), named as in timm's benchmarks.
CNN_MODELS = [
    ("tresnet_m", "tresnet"),
    ("tresnet_v2_l", "tresnet"),
    ("hgnet_tiny", "hgnet"),
    ("hgnetv2_b0", "hgnet"),
    ("repvit_m1", "repvit"),
    ("fasternet_t0", "fasternet"),
    ("starnet_s1", "starnet"),
    ("rdnet_tiny", "rdnet"),
    ("mambaout_femto", "mambaout"),
    ("inception_next_tiny", "inception_next"),
    ("convformer_s18", "convformer"),
    ("poolformer_s12", "poolformer"),
    ("poolformerv2_s12", "poolformer"),
    ("focalnet_tiny_srf", "focalnet"),
    ("resnet50", "resnet"),
    ("convnext_tiny", "convnext"),
    ("mobilenetv4_conv_small", "mobilenet"),
    ("eca_nfnet_l0", "nfnet"),
    ("eca_resnet33ts", "resnet"),
    ("eca_resnext26ts", "resnext"),
    ("eca_vovnet39b", "vovnet"),
    ("adv_inception_v3", "inception"),
    ("ens_adv_inception_resnet_v2", "inception_resnet"),
    ("test_convnext2", "convnext"),
    ("test_resnet", "resnet"),
    ("test_efficientnet_gn", "efficientnet"),
    ("test_mambaout", "mambaout"),
    ("gcresnet33ts", "gcresnet"),
    ("convmixer_768_32", "convmixer"),
]

# Transformers and conv/attention hybrids that must stay out of the CNN set.
NON_CNN_MODELS = [
    ("vit_base_patch16_224", "vit"),
    ("deit_small_patch16_224", "deit"),
    ("swin_tiny_patch4_window7_224", "swin"),
    ("coatnet_0_rw_224", "coatnet"),
    ("maxvit_tiny_rw_224", "maxvit"),
    ("maxxvitv2_nano_rw_256", "maxxvit"),
    ("levit_128", "levit"),
    ("levit_conv_128", "levit"),
    ("botnet26t_256", "botnet"),
    ("halonet26t", "halonet"),
    ("sehalonet33ts", "sehalonet"),
    ("eca_botnext26ts_256", "botnet"),
    ("eca_halonext26ts", "halonet"),
    ("lambda_resnet26t", "lambda"),
    ("bat_resnext26ts", "bat"),
    ("caformer_s18", "caformer"),
    ("tiny_vit_5m_224", "tiny_vit"),
    ("nextvit_small", "nextvit"),
    ("nest_tiny", "nest"),
    ("jx_nest_tiny", "nest"),
    ("sam2_hiera_tiny", "hieradet"),
    ("hieradet_small", "hieradet"),
    ("semobilevit_s", "semobilevit"),
    ("mobilenetv4_hybrid_medium", "mobilenetv4_hybrid"),
    ("mobilenetv5_300m_enc", "mobilenetv5"),
    ("csatv2", "csatv"),
    ("test_vit3", "vit"),
    ("edgenext_small", "edgenext"),
    ("efficientformerv2_s0", "efficientformer"),
    ("fastvit_sa12", "fastvit"),
    ("efficientvit_m0", "efficientvit"),
    ("shvit_s1", "shvit"),
    ("swiftformer_xs", "swiftformer"),
    ("sequencer2d_s", "sequencer"),
    ("mixer_b16_224", "mixer"),
    ("gmixer_12_224", "gmixer"),
    ("resmlp_12_224", "resmlp"),
    ("gmlp_s16_224", "gmlp"),
]


@pytest.mark.parametrize(("name", "family"), CNN_MODELS)
def test_convolutional_models_are_cnns(name, family):
    assert model_family(name) == family
    assert is_cnn(model_family(name)), f"{name} ({family}) is convolutional but flagged {NON_CNN_FAMILIES[family]!r}"


@pytest.mark.parametrize(("name", "family"), NON_CNN_MODELS)
def test_transformers_and_hybrids_are_not_cnns(name, family):
    assert model_family(name) == family
    assert not is_cnn(model_family(name)), f"{name} ({family}) has attention/MLP/RNN mixing but is flagged CNN"


def test_reparameterised_key_only_for_architectures_that_have_that_form():
    from src.ingest.models import REPARAM_SUFFIX, base_model_key, is_reparameterizable
    from src.ingest.records import workload

    row = workload("repvgg_a2.rvgg_in1k", "timm", reparameterized=True)
    assert row["model_key"] == "repvgg_a2" + REPARAM_SUFFIX and row["model"] == "repvgg_a2.rvgg_in1k"
    assert row["family"] == "repvgg" and row["is_cnn"]
    assert workload("resnet18", "timm", reparameterized=True)["model_key"] == "resnet18"  # nothing to fuse
    assert workload("repvgg_a2", "timm")["model_key"] == "repvgg_a2"
    assert base_model_key("mobileone_s0+reparam") == "mobileone_s0" == base_model_key("mobileone_s0")
    assert is_reparameterizable("ghostnetv3_100") and not is_reparameterizable("ghostnetv2_100")
    assert is_reparameterizable("efficientvit_m0") and not is_reparameterizable("efficientvit_b0")


def test_a_name_that_measured_another_network_joins_that_network():
    """timm's ecaresnext50t_32x4d rows ran ecaresnext26t_32x4d's network (same parameters, same times)."""
    assert model_key("ecaresnext50t_32x4d.ra2_in1k") == "ecaresnext26t_32x4d"
    assert model_family("ecaresnext50t_32x4d") == "ecaresnext"


def test_the_misnamed_rows_really_are_the_other_network(mirror):
    """The evidence for SAME_NETWORK in the real files: in every timm file listing both names, the parameters and
    GMACs are equal and the GPU times within 1 % (CPU runs within 3 %)."""
    from src.ingest.sources import timm

    files = sorted(mirror.glob("timm/benchmark-infer-*.csv"))
    pairs = 0
    for path in files:
        rows = timm.parse_file(path, f"timm/{path.name}", "x").rows
        named = {r["model"].split(".")[0]: r for r in rows}
        if {"ecaresnext26t_32x4d", "ecaresnext50t_32x4d"} <= set(named):
            a, b = named["ecaresnext26t_32x4d"], named["ecaresnext50t_32x4d"]
            assert a["param_count_m"] == b["param_count_m"] == 15.41
            tolerance = 0.03 if "-cpu-" in path.name else 0.01
            assert abs(float(b["latency_ms"]) / float(a["latency_ms"]) - 1) < tolerance, path.name
            pairs += 1
    assert pairs >= 20


def test_legacy_names_time_as_the_network_their_key_names(mirror):
    """The evidence for TIMM_LEGACY_NAMES (and timm's convnext-as-base rows): wherever a timm GPU file lists a
    legacy name and the architecture its key names at the same batch and size, the two times agree."""
    import numpy as np

    from src.ingest.models import is_alias, plain_model_key
    from src.ingest.sources import timm

    ratios = {}
    for path in sorted(mirror.glob("timm/benchmark-infer-*.csv")):
        if "-cpu-" in path.name:
            continue
        rows = timm.parse_file(path, f"timm/{path.name}", "x").rows
        plain = {(plain_model_key(r["model"]), r["img_size"], r["batch_size"]): r for r in rows}
        for r in rows:
            twin = plain.get((r["model_key"], r["img_size"], r["batch_size"]))
            if is_alias(r["model"]) and twin is not None:
                ratios[(path.name, r["model"])] = float(r["latency_ms"]) / float(twin["latency_ms"])
    values = np.array(list(ratios.values()))
    names = {name for _, name in ratios}
    assert len(names) >= 60 and len(values) >= 500
    assert abs(np.median(values) - 1) < 0.002 and np.mean(np.abs(values - 1) < 0.03) > 0.98
    assert ("benchmark-infer-amp-nchw-pt110-cu113-rtx3090.csv", "convnext_tiny_in22ft1k") in ratios  # run as base
