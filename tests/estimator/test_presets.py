"""Model and GPU presets: every preset is a valid spec, shapes match the published tables."""

from __future__ import annotations

import dataclasses

import pytest

from estimator.errors import NotFoundError
from estimator.flops import model_parameters
from estimator.presets import (
    GPU_PRESETS,
    MODEL_PRESETS,
    GpuPreset,
    gpu_preset,
    model_preset,
)
from estimator.specs import ModelSpec, Precision


def megatron_eq2(spec: ModelSpec) -> float:
    """Narayanan et al. SC21 eq. 2: N = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h))."""
    l, h = spec.num_layers, spec.hidden_size
    v, s = spec.vocab_size, spec.seq_length
    return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))


# The published totals are rounded (30.5B, 235B): half a percent covers the rounding.
MODEL_COUNT_TOLERANCE = 0.005

GPT3_KEYS = [
    "gpt3-125m",
    "gpt3-350m",
    "gpt3-760m",
    "gpt3-1.3b",
    "gpt3-2.7b",
    "gpt3-6.7b",
    "gpt3-13b",
    "gpt3-175b",
]
SC21_KEYS = [
    "megatron-1.7b",
    "megatron-3.6b",
    "megatron-7.5b",
    "megatron-18.4b",
    "megatron-39.1b",
    "megatron-76.1b",
    "megatron-145.6b",
    "megatron-310.1b",
    "megatron-529.6b",
    "megatron-1t",
]
OPEN_KEYS = [
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
]


def test_all_requested_presets_exist() -> None:
    assert set(GPT3_KEYS + SC21_KEYS + OPEN_KEYS) == set(MODEL_PRESETS)
    assert set(GPU_PRESETS) == {
        "v100-sxm2-32gb",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h100-hbm2e-96gb-500w",
        "h200-sxm-141gb",
        "rtx-3090",
    }


@pytest.mark.parametrize("key", sorted(MODEL_PRESETS))
def test_each_model_preset_is_a_valid_spec_with_a_source(key: str) -> None:
    preset = MODEL_PRESETS[key]
    assert preset.key == key
    spec = model_preset(key)
    assert isinstance(spec, ModelSpec)
    assert spec is preset.spec
    # Re-validate through the constructor (frozen dataclass: rebuild from its fields).
    rebuilt = ModelSpec(**{f: getattr(spec, f) for f in ModelSpec.__dataclass_fields__})
    assert rebuilt == spec
    assert preset.source
    assert preset.published_parameters is None or preset.published_parameters > 0


def test_gpt3_175b_shape() -> None:
    spec = model_preset("gpt3-175b")
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads) == (96, 12288, 96)
    assert (spec.seq_length, spec.vocab_size) == (2048, 51200)


def test_gpt3_family_uses_padded_gpt2_vocab_and_2048_context() -> None:
    for key in GPT3_KEYS:
        spec = model_preset(key)
        assert spec.vocab_size == 51200 and spec.seq_length == 2048
        assert spec.tied_embeddings and spec.ffn == 4 * spec.hidden_size


@pytest.mark.parametrize("key", GPT3_KEYS)
def test_gpt3_published_parameters_match_megatron_eq2(key: str) -> None:
    # Brown et al. printed N rounded and counted with the unpadded 50257 vocabulary; eq. 2 with
    # V=51200 lands within 2.5 % of every Table 2.1 row (largest: 350M at +1.95 %).
    preset = MODEL_PRESETS[key]
    assert preset.published_parameters is not None
    assert megatron_eq2(preset.spec) == pytest.approx(preset.published_parameters, rel=0.025)


@pytest.mark.parametrize("key", SC21_KEYS)
def test_sc21_published_parameters_are_eq2_rounded_to_0_1_billion(key: str) -> None:
    # SC21 Table 1 prints eq. 2 (V=51200, s=2048) in billions with one decimal: the exact value
    # must lie within half a printed unit (0.05 B) of the printed one.
    preset = MODEL_PRESETS[key]
    assert preset.published_parameters is not None
    assert abs(megatron_eq2(preset.spec) - preset.published_parameters) <= 0.05e9


def test_open_models_shapes() -> None:
    l3 = model_preset("llama3-405b")
    assert (l3.num_layers, l3.hidden_size, l3.num_attention_heads) == (126, 16384, 128)
    assert (l3.query_groups, l3.ffn, l3.vocab_size, l3.seq_length) == (8, 53248, 128256, 8192)
    assert l3.swiglu and not l3.tied_embeddings
    assert model_preset("llama2-7b").query_groups == 32  # plain multi-head attention
    assert model_preset("llama2-70b").query_groups == 8
    mix = model_preset("mixtral-8x7b")
    assert mix.is_moe and (mix.moe_num_experts, mix.moe_top_k) == (8, 2)
    assert mix.expert_ffn == 14336 and mix.query_groups == 8


@pytest.mark.parametrize(("key", "billions"), [("qwen3-30b-a3b", 30.5), ("qwen3-235b-a22b", 235)])
def test_qwen3_heads_wider_than_the_model_give_the_published_size(
    key: str, billions: float
) -> None:
    """Qwen3 Technical Report (arXiv:2505.09388) Table 2 names Qwen3-30B-A3B and -235B-A22B by
    their total parameters; with 128-wide heads (config.json head_dim) the layer shapes add up
    to them within 0.5 % (MODEL_COUNT_TOLERANCE), and with h/heads-wide heads they would not."""
    spec = model_preset(key)
    assert spec.kv_channels == 128 and spec.attention_width == 2 * spec.hidden_size
    assert model_parameters(spec) == pytest.approx(billions * 1e9, rel=MODEL_COUNT_TOLERANCE)
    narrow = dataclasses.replace(spec, kv_channels=None)
    assert abs(model_parameters(narrow) / (billions * 1e9) - 1.0) > 2 * MODEL_COUNT_TOLERANCE


def test_unknown_model_key_names_the_known_keys() -> None:
    with pytest.raises(NotFoundError) as info:
        model_preset("gpt5-1t")
    message = str(info.value)
    assert "gpt5-1t" in message
    for key in ("gpt3-175b", "megatron-1t", "llama3-405b", "mixtral-8x7b"):
        assert key in message
    assert info.value.context["known"] == sorted(MODEL_PRESETS)


def test_unknown_gpu_key_names_the_known_keys() -> None:
    with pytest.raises(NotFoundError) as info:
        gpu_preset("b200")
    for key in GPU_PRESETS:
        assert key in str(info.value)


def test_keys_are_case_and_space_insensitive() -> None:
    assert model_preset(" GPT3-175B ") is MODEL_PRESETS["gpt3-175b"].spec
    assert gpu_preset("H100-SXM5-80GB") is GPU_PRESETS["h100-sxm5-80gb"]


@pytest.mark.parametrize("key", sorted(GPU_PRESETS))
def test_each_gpu_preset_is_sane(key: str) -> None:
    gpu = gpu_preset(key)
    assert isinstance(gpu, GpuPreset) and gpu.key == key and gpu.source
    assert gpu.memory_bytes > 0
    assert Precision.FP32 in gpu.peak_flops and Precision.FP16 in gpu.peak_flops
    for value in gpu.peak_flops.values():
        assert 1e12 < value < 1e16
    # Tensor-core half precision is never slower than plain FP32.
    assert gpu.peak_flops[Precision.FP16] > gpu.peak_flops[Precision.FP32]


def test_gpu_datasheet_figures() -> None:
    a100 = gpu_preset("a100-sxm4-80gb").peak_flops
    assert a100[Precision.BF16] == a100[Precision.FP16] == 312e12
    assert (a100[Precision.TF32], a100[Precision.FP32]) == (156e12, 19.5e12)
    assert Precision.FP8 not in a100
    h100 = gpu_preset("h100-sxm5-80gb")
    assert h100.peak_flops[Precision.FP8] == 1979e12  # dense: half of 3,958 with sparsity
    assert h100.peak_flops[Precision.BF16] == pytest.approx(989e12, rel=1e-3)
    h200 = gpu_preset("h200-sxm-141gb")
    assert h200.peak_flops == h100.peak_flops and h200.memory_bytes == 141e9
    v100 = gpu_preset("v100-sxm2-32gb").peak_flops
    assert v100 == {Precision.FP32: 15.7e12, Precision.FP16: 125e12}
    assert gpu_preset("rtx-3090").peak_flops[Precision.FP16] == 71e12  # FP32 accumulate
    assert gpu_preset("a100-sxm4-40gb").memory_bytes == 40e9
