"""The shared Megatron settings table, read as a log states its arguments."""

from __future__ import annotations

import pytest

from estimator.errors import ValidationError
from profiles.megatron_settings import BY_NAME, Value, build_request, canonical, convert

BASE: dict[str, Value] = {
    "num_layers": 24,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "seq_length": 2048,
    "padded_vocab_size": 50304,
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 1,
    "micro_batch_size": 1,
    "global_batch_size": 64,
    "fp16": False,
    "bf16": True,
    "world_size": 8,
}


def _log(**changes: Value) -> dict[str, object]:
    return build_request({**BASE, **changes}, source="log", field_name=lambda n: n).request


def test_convert_reads_log_spellings() -> None:
    assert convert(BY_NAME["num_experts"], "[8]") == 8  # Megatron-DeepSpeed prints a list
    assert convert(BY_NAME["num_experts"], "None") is None
    assert convert(BY_NAME["swiglu"], "True") is True
    assert convert(BY_NAME["zero_stage"], "0") == 0
    with pytest.raises(ValidationError) as info:
        convert(BY_NAME["num_layers"], "$LAYERS")
    assert "expand shell variables" in info.value.rule


def test_a_settings_own_name_wins_over_its_alias() -> None:
    assert canonical({"encoder_seq_length": 4096, "seq_length": 2048})["seq_length"] == 2048
    assert canonical({"seq_length": 2048, "encoder_seq_length": 4096})["seq_length"] == 2048
    assert canonical({"num_moe_experts": 8})["num_experts"] == 8


@pytest.mark.parametrize(
    ("changes", "recompute"),
    [
        ({"recompute_granularity": None}, "none"),
        ({"recompute_granularity": "full"}, "full"),
        ({"recompute_activations": True}, "selective"),
        ({"checkpoint_activations": True}, "full"),  # older Megatron
        ({"activations_checkpoint_method": "uniform"}, "full"),  # older Megatron, no granularity
        ({"recompute_granularity": None, "activations_checkpoint_method": "uniform"}, "none"),
    ],
)
def test_recompute_from_current_and_older_megatron_arguments(
    changes: dict[str, Value], recompute: str
) -> None:
    training = _log(**changes)["training"]
    assert isinstance(training, dict)
    assert training["recompute"] == recompute


def test_distributed_optimizer_is_zero_1_and_deepspeed_states_its_stage() -> None:
    layout = _log(use_distributed_optimizer=True)["layout"]
    assert isinstance(layout, dict) and layout["zero_stage"] == 1
    layout = _log(deepspeed=True, zero_stage=2)["layout"]
    assert isinstance(layout, dict) and layout["zero_stage"] == 2


def test_gqa_from_megatron_and_from_megatron_deepspeeds_key_value_heads() -> None:
    model = _log(group_query_attention=True, num_query_groups=4)["model"]
    assert isinstance(model, dict) and model["num_query_groups"] == 4
    model = _log(num_key_value_heads=4)["model"]  # no group_query_attention key
    assert isinstance(model, dict) and "num_query_groups" not in model  # alias not canonical
    model = _log(**canonical({"num_key_value_heads": 4}))["model"]
    assert isinstance(model, dict) and model["num_query_groups"] == 4


def test_kv_channels_are_kept_only_where_they_differ_from_h_over_heads() -> None:
    """Megatron logs kv_channels always (validate_args fills in hidden_size / heads): the
    default says nothing, a wider head (Qwen3's 128 on 1024 / 16 = 64) is the model's."""
    model = _log(kv_channels=64)["model"]
    assert isinstance(model, dict) and "kv_channels" not in model
    model = _log(kv_channels=128)["model"]
    assert isinstance(model, dict) and model["kv_channels"] == 128


def test_a_log_contradicting_its_world_size_is_refused() -> None:
    with pytest.raises(ValidationError) as info:
        _log(data_parallel_size=2)  # 8 GPUs / t 2 = 4
    assert info.value.field == "data_parallel_size"


def test_fp8_formats_of_megatron_and_megatron_deepspeed() -> None:
    for changes in ({"fp8": "hybrid"}, {"fp8_hybrid": True}, {"fp8_e4m3": True}):
        training = _log(**changes)["training"]
        assert isinstance(training, dict) and training["precision"] == "fp8"
