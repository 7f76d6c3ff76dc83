import dataclasses

import pytest

from estimator.errors import LayoutError, ValidationError
from estimator.specs import LayoutSpec, ModelSpec, TrainingSpec, validate_layout

GPT3_175B = ModelSpec(
    num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200
)


def test_heads_not_divisible_by_tensor_names_field_value_and_rule() -> None:
    with pytest.raises(LayoutError) as err:
        validate_layout(
            GPT3_175B,
            TrainingSpec(global_batch_size=1536),
            LayoutSpec(pipeline=8, tensor=7, data=1),
            8,
        )
    assert err.value.field == "layout.tensor"
    assert err.value.value == 7
    assert "num_attention_heads=96" in err.value.rule


def test_global_batch_not_divisible_by_b_times_d_is_refused() -> None:
    with pytest.raises(LayoutError, match="divisible by micro_batch_size·data"):
        validate_layout(
            GPT3_175B,
            TrainingSpec(global_batch_size=1000, micro_batch_size=1),
            LayoutSpec(pipeline=8, tensor=8, data=24),
            8,
        )


def test_interleaving_needs_micro_batches_multiple_of_pipeline() -> None:
    with pytest.raises(LayoutError, match="multiple of pipeline"):
        validate_layout(
            GPT3_175B,
            TrainingSpec(global_batch_size=36),
            LayoutSpec(pipeline=8, tensor=8, data=3, virtual_stages=2),
            8,
        )


def test_unknown_precision_lists_the_choices() -> None:
    with pytest.raises(ValidationError, match="fp16"):
        # a bad string on purpose: refused at run time, not by the type checker
        TrainingSpec(global_batch_size=8, precision="fp12")  # type: ignore[arg-type]


def test_zero_layers_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"model\.num_layers"):
        ModelSpec(num_layers=0, hidden_size=8, num_attention_heads=1, seq_length=8, vocab_size=8)


# BigScience's 02-17 shape (chronicles-prequel.md): h 14,400 with 96 heads at t 8.
MISALIGNED = ModelSpec(
    num_layers=80, hidden_size=14400, num_attention_heads=96, seq_length=2048, vocab_size=250880
)


def test_a_shape_off_the_tensor_core_grid_is_named_in_warnings() -> None:
    warnings = validate_layout(
        MISALIGNED,
        TrainingSpec(global_batch_size=2048),
        LayoutSpec(pipeline=10, tensor=8, data=1),
        8,
    )
    joined = "\n".join(warnings)
    assert "head dimension hidden_size/num_attention_heads = 14400/96 = 150" in joined
    assert "hidden_size/tensor = 14400/8 = 1800 columns per GPU" in joined
    assert "ffn_hidden_size/tensor = 57600/8 = 7200 columns per GPU" in joined
    assert len(warnings) == 3


def test_aligned_shapes_and_aligned_slices_give_no_shape_warning() -> None:
    # GPT-3 175B: head dimension 128, 1,536 and 6,144 columns per GPU at t 8.
    assert not validate_layout(
        GPT3_175B, TrainingSpec(global_batch_size=1536), LayoutSpec(pipeline=8, tensor=8, data=1), 8
    )
    # The same 14,400 model on one GPU per layer slice keeps a 150-wide head, and only that.
    warnings = validate_layout(
        MISALIGNED,
        TrainingSpec(global_batch_size=2048),
        LayoutSpec(pipeline=10, tensor=1, data=1),
        8,
    )
    assert len(warnings) == 1 and "head dimension" in warnings[0]


def test_an_expert_width_off_the_grid_is_named_too() -> None:
    # GPT-3's aligned shape with experts 14,200 wide: 3,550 columns per GPU at t 4.
    moe = dataclasses.replace(GPT3_175B, moe_num_experts=8, moe_top_k=2, moe_ffn_hidden_size=14200)
    warnings = validate_layout(
        moe, TrainingSpec(global_batch_size=64), LayoutSpec(pipeline=1, tensor=4, data=8), 8
    )
    assert warnings == [w for w in warnings if w.startswith("moe_ffn_hidden_size/tensor")]
    assert len(warnings) == 1 and "14200/4 = 3550 columns per GPU" in warnings[0]


def test_experts_folded_over_tp_are_checked_at_their_own_width() -> None:
    """Experts 1,408 wide (22 x 64): at t 4 each GPU holds 352 columns of them, off the grid;
    folded over TP (expert TP 1) each expert is whole, on the grid, and nothing is named."""
    moe = dataclasses.replace(GPT3_175B, moe_num_experts=8, moe_top_k=2, moe_ffn_hidden_size=1408)
    training = TrainingSpec(global_batch_size=64)
    at_tp = validate_layout(
        moe, training, LayoutSpec(pipeline=1, tensor=4, data=8, sequence_parallel=True), 8
    )
    assert len(at_tp) == 1 and "1408/4 = 352 columns per GPU" in at_tp[0]
    folded = LayoutSpec(
        pipeline=1, tensor=4, data=8, sequence_parallel=True, expert_tensor_parallel=1
    )
    assert validate_layout(moe, training, folded, 8) == []
    narrow = dataclasses.replace(moe, moe_ffn_hidden_size=1400)  # whole, still off the grid
    [warning] = validate_layout(narrow, training, folded, 8)
    assert warning.startswith("moe_ffn_hidden_size/expert_tensor_parallel = 1400/1 = 1400")
