"""Parameter and FLOP counts of a GPT-style decoder (scalar- and array-agnostic).

Every function works on Python floats and on numpy arrays alike (plain arithmetic only), so
the single estimate and the vectorised sweep share one code path.
"""

from __future__ import annotations

from estimator.bandwidth import Num
from estimator.specs import ModelSpec


def megatron_parameters(model: ModelSpec) -> float:
    """N = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)) (Megatron-LM SC21, eq. 2)."""
    l, h = float(model.num_layers), float(model.hidden_size)
    v, s = float(model.vocab_size), float(model.seq_length)
    return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h))


def _norm_and_attention_tensors(model: ModelSpec, t: Num) -> tuple[Num, ...]:
    """The 2 LayerNorms (weight, bias), QKV and output projection (weight, bias), per GPU
    (Q and the attention output ``hq`` wide: h unless the model sets kv_channels)."""
    h, hq, kv = float(model.hidden_size), float(model.attention_width), float(model.kv_hidden)
    return (h, h, h, h, h * (hq + 2.0 * kv) / t, (hq + 2.0 * kv) / t, hq * h / t, h)


def _mlp_tensors(model: ModelSpec, f: float, t: Num) -> tuple[Num, ...]:
    """An FFN of width f per GPU: fc1/fc2 weights and biases, or a SwiGLU's three bias-free
    matrices (as in Llama)."""
    h = float(model.hidden_size)
    if model.swiglu:
        return (h * f / t, h * f / t, f * h / t)
    return (h * f / t, f / t, f * h / t, h)


def layer_parameters(model: ModelSpec, *, moe: bool) -> float:
    """Parameters of one transformer layer (weights + biases + 2 layernorms).

    With f = 4h, no GQA and no gating this is 12h² + 13h, the per-layer part of eq. 2.
    A gated (SwiGLU) FFN has three h×f matrices and, as in Llama, no biases.
    """
    shared = float(sum(_norm_and_attention_tensors(model, 1.0)))
    mlp = float(sum(_mlp_tensors(model, float(model.expert_ffn if moe else model.ffn), 1.0)))
    if moe:
        mlp = model.moe_num_experts * mlp + float(model.hidden_size) * model.moe_num_experts
    return shared + mlp


def layer_tensor_sizes(model: ModelSpec, t: Num = 1.0) -> tuple[Num, ...]:
    """Elements per GPU of each parameter tensor of one dense layer, the ones
    ``layer_parameters`` sums. Column-parallel tensors (QKV, fc1, their biases, the gate and up
    matrices) and row-parallel weights are split over ``t``; the row-parallel biases and the
    norms are replicated."""
    return _norm_and_attention_tensors(model, t) + _mlp_tensors(model, float(model.ffn), t)


def embedding_parameters(model: ModelSpec) -> float:
    """Word (V·h) and learned position (s·h) embeddings."""
    return float(model.vocab_size) * model.hidden_size + float(model.seq_length) * (
        model.hidden_size
    )


def model_parameters(model: ModelSpec) -> float:
    """Total parameters from the layer shapes (eq. 2 generalised); N when the user gives it."""
    if model.num_parameters is not None:
        return float(model.num_parameters)
    moe_layers = model.num_moe_layers
    dense_layers = model.num_layers - moe_layers
    total = dense_layers * layer_parameters(model, moe=False) + embedding_parameters(model)
    total += moe_layers * layer_parameters(model, moe=True)
    total += 2.0 * model.hidden_size  # final layernorm
    if not model.tied_embeddings:
        total += float(model.vocab_size) * model.hidden_size
    return total


def layer_forward_flops(model: ModelSpec, tokens: Num, seq: Num, *, moe: bool) -> Num:
    """Forward FLOPs of one layer for ``tokens`` = b·s tokens of sequences of length ``seq``.

    f = 4h, no GQA: 24·b·s·h² + 4·b·s²·h (Megatron-LM SC21 §5.1 / appendix); Q, K, V and
    the attention output are as wide as the model's heads make them (kv_channels).
    """
    h, hq, kv = float(model.hidden_size), float(model.attention_width), float(model.kv_hidden)
    qkv_out = 2.0 * tokens * (h * (hq + 2.0 * kv) + hq * h)
    scores = 4.0 * tokens * seq * hq  # Q·Kᵀ and attention·V
    f = float(model.expert_ffn if moe else model.ffn)
    mlp = 2.0 * tokens * h * f * (3.0 if model.swiglu else 2.0)
    if moe:
        mlp = model.moe_top_k * mlp + 2.0 * tokens * h * model.moe_num_experts
    return qkv_out + scores + mlp


def last_gemm_forward_flops(model: ModelSpec, tokens: Num) -> Num:
    """Forward FLOPs of every dense layer's last GEMM, the FFN's down projection (FC2): what a
    full recompute that stops early leaves out (estimator.frameworks, ``recompute_early_stop``;
    a MoE layer saves its experts' outputs after their FC2, so it replays them)."""
    dense_layers = float(model.num_layers) - float(model.num_moe_layers)
    return dense_layers * 2.0 * tokens * float(model.hidden_size) * float(model.ffn)


def attention_core_forward_flops(model: ModelSpec, tokens: Num, seq: Num) -> Num:
    """What selective recompute replays: Q·Kᵀ and attention·V (Korthikanti et al. 2022)."""
    return 4.0 * tokens * seq * float(model.attention_width)


def logit_forward_flops(model: ModelSpec, tokens: Num) -> Num:
    """Output (logit) layer: 2·b·s·h·V."""
    return 2.0 * tokens * float(model.hidden_size) * float(model.vocab_size)


def model_forward_flops(model: ModelSpec, tokens: Num) -> Num:
    """Forward FLOPs of the whole model over ``tokens`` tokens (sequences of length s)."""
    s = float(model.seq_length)
    moe_layers = float(model.num_moe_layers)
    dense_layers = float(model.num_layers) - moe_layers
    total = dense_layers * layer_forward_flops(model, tokens, s, moe=False)
    if moe_layers:
        total = total + moe_layers * layer_forward_flops(model, tokens, s, moe=True)
    return total + logit_forward_flops(model, tokens)


def megatron_iteration_flops(model: ModelSpec, global_batch: float) -> float:
    """F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full recompute (SC21 eq. 3)."""
    l, h = float(model.num_layers), float(model.hidden_size)
    s, v = float(model.seq_length), float(model.vocab_size)
    return 96.0 * global_batch * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))
