"""Named model shapes and GPU datasheet figures, each with the source it was read from.

Models are ``ModelSpec`` shapes exactly as their authors published them (paper table, model card
or ``config.json``); where a published shape is internally inconsistent the preset says what it
kept and why. GPUs carry dense peak FLOP/s (no 2:4 sparsity) per precision and memory from the
vendor's datasheet or architecture whitepaper.

Conventions of this module (ours):

* ``memory_bytes`` is the datasheet "GB" figure times 10^9. HBM stacks are binary-sized, so the
  usable capacity in bytes is at least this; it errs on the side of "does not fit".
* NVIDIA datasheets print Hopper tensor-core rates *with* sparsity and mark them so; the dense
  rate is exactly half of the printed figure, which is what ``peak_flops`` holds.
* GPT-3 and Megatron SC21 shapes use V = 51200: GPT-2's 50257-token BPE vocabulary padded to a
  multiple of 1024, as Megatron-LM pads it and as the SC21 paper states for its Table 1 ("All
  models use a vocabulary size (denoted by V) of 51,200 (multiple of 1024)", §5.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.errors import NotFoundError
from estimator.specs import ModelSpec, Precision

__all__ = [
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "GpuPreset",
    "ModelPreset",
    "gpu_preset",
    "model_preset",
]

_TERA = 1e12
_GB = 1e9

GPT2_VOCAB_PADDED = 51200  # 50257 padded to a multiple of 1024 (Megatron-LM; SC21 §5.1)
GPT3_SEQ = 2048  # Brown et al. 2020, §2.1: "n_ctx = 2048 tokens" for all eight models


@dataclass(frozen=True, slots=True)
class GpuPreset:
    """One GPU model: datasheet memory and dense peak FLOP/s per precision it supports."""

    key: str
    name: str
    memory_bytes: float
    peak_flops: dict[Precision, float]  # dense (no sparsity), FLOP/s
    source: str
    memory_bandwidth_gbps: float | None = None  # HBM/GDDR, GB/s (10^9), datasheet
    # FlashAttention-2's efficiency relative to this GPU's GEMMs: 1 on the generations FA2 was
    # written for; Hopper: FA2 reaches ~35 % of the H100 peak where FA3 / cuDNN reach ~75 %
    # (Shah et al. 2024, FlashAttention-3, §1 and §4.1): 0.5.
    flash2_efficiency: float = 1.0

    @property
    def cuda_core_peak_flops(self) -> float | None:
        """The FP32 rate without tensor cores (the datasheet's FP32 figure), None if unlisted."""
        return self.peak_flops.get(Precision.FP32)


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A published model shape and the parameter count its authors printed (if any)."""

    key: str
    spec: ModelSpec
    source: str
    published_parameters: float | None


# --------------------------------------------------------------------------------------------
# GPT-3 family. Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
# (n_params, n_layers, d_model, n_heads, d_head); n_ctx = 2048 for all models (§2.1).
# Tied input/output embeddings as in GPT-2. V = 51200 (padded GPT-2 vocabulary, see above);
# the paper's own counts used the unpadded 50257, so published N and eq. 2 differ by ~2 %.
# --------------------------------------------------------------------------------------------
_GPT3_SOURCE = "Brown et al. 2020 (arXiv:2005.14165), Table 2.1; V=51200 = GPT-2's 50257 padded"


def _gpt3(
    key: str, layers: int, hidden: int, heads: int, published: float, note: str = ""
) -> ModelPreset:
    spec = ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        seq_length=GPT3_SEQ,
        vocab_size=GPT2_VOCAB_PADDED,
        name=key,
    )
    source = _GPT3_SOURCE + (f"; {note}" if note else "")
    return ModelPreset(key=key, spec=spec, source=source, published_parameters=published)


_GPT3 = [
    # Table 2.1 row "GPT-3 Small": 125M, 12 layers, d_model 768, 12 heads, d_head 64.
    _gpt3("gpt3-125m", 12, 768, 12, 125e6),
    # "GPT-3 Medium": 350M, 24, 1024, 16 heads, d_head 64.
    _gpt3("gpt3-350m", 24, 1024, 16, 350e6),
    # "GPT-3 Large": 760M, 24, 1536, 16 heads, d_head 96.
    _gpt3("gpt3-760m", 24, 1536, 16, 760e6),
    # "GPT-3 XL": 1.3B, 24, 2048, n_heads 24, d_head 128. 24·128 = 3072 ≠ 2048, so the row is
    # inconsistent; we keep d_model (which fixes N and the FLOPs) and d_head = 128 -> 16 heads.
    _gpt3(
        "gpt3-1.3b",
        24,
        2048,
        16,
        1.3e9,
        "Table 2.1 prints n_heads=24 with d_head=128, inconsistent with d_model=2048; "
        "kept d_model and d_head=128, i.e. 16 heads (N and FLOPs do not depend on heads)",
    ),
    # "GPT-3 2.7B": 2.7B, 32, 2560, 32 heads, d_head 80.
    _gpt3("gpt3-2.7b", 32, 2560, 32, 2.7e9),
    # "GPT-3 6.7B": 6.7B, 32, 4096, 32 heads, d_head 128.
    _gpt3("gpt3-6.7b", 32, 4096, 32, 6.7e9),
    # "GPT-3 13B": 13.0B, 40, d_model printed 5140, 40 heads, d_head 128. 40·128 = 5120 and 5140
    # is not divisible by 40: we use 5120 (the printed 5140 reads as a typo).
    _gpt3(
        "gpt3-13b",
        40,
        5120,
        40,
        13.0e9,
        "Table 2.1 prints d_model=5140, not divisible by n_heads=40; used 40·d_head = 5120",
    ),
    # "GPT-3 175B or 'GPT-3'": 175.0B, 96, 12288, 96 heads, d_head 128.
    _gpt3("gpt3-175b", 96, 12288, 96, 175.0e9),
]

# --------------------------------------------------------------------------------------------
# Megatron-LM SC21: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
# Clusters Using Megatron-LM", SC 2021 (arXiv:2104.04473), Table 1: number of parameters
# (billion), attention heads, hidden size, number of layers. s = 2048, V = 51200 (§5.1).
# The printed N is eq. 2 rounded to 0.1 B.
# --------------------------------------------------------------------------------------------
_SC21_SOURCE = "Narayanan et al. SC21 (arXiv:2104.04473), Table 1; s=2048, V=51200 (§5.1)"


def _sc21(key: str, billions: float, heads: int, hidden: int, layers: int) -> ModelPreset:
    spec = ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        seq_length=2048,
        vocab_size=51200,
        name=key,
    )
    return ModelPreset(key=key, spec=spec, source=_SC21_SOURCE, published_parameters=billions * 1e9)


_SC21 = [
    _sc21("megatron-1.7b", 1.7, 24, 2304, 24),
    _sc21("megatron-3.6b", 3.6, 32, 3072, 30),
    _sc21("megatron-7.5b", 7.5, 32, 4096, 36),
    _sc21("megatron-18.4b", 18.4, 48, 6144, 40),
    _sc21("megatron-39.1b", 39.1, 64, 8192, 48),
    _sc21("megatron-76.1b", 76.1, 80, 10240, 60),
    _sc21("megatron-145.6b", 145.6, 96, 12288, 80),
    _sc21("megatron-310.1b", 310.1, 128, 16384, 96),
    _sc21("megatron-529.6b", 529.6, 128, 20480, 105),
    _sc21("megatron-1t", 1008.0, 160, 25600, 128),
]


# --------------------------------------------------------------------------------------------
# Current open models: SwiGLU FFN, RoPE (no learned positions), untied embeddings.
# --------------------------------------------------------------------------------------------
def _open(
    key: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    groups: int | None,
    ffn: int,
    vocab: int,
    seq: int,
    published: float,
    source: str,
    experts: int = 1,
    top_k: int = 1,
    kv_channels: int | None = None,
) -> ModelPreset:
    spec = ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        seq_length=seq,
        vocab_size=vocab,
        ffn_hidden_size=ffn,
        swiglu=True,
        num_query_groups=groups,
        tied_embeddings=False,
        moe_num_experts=experts,
        moe_top_k=top_k,
        moe_ffn_hidden_size=ffn if experts > 1 else None,
        kv_channels=kv_channels,
        name=key,
    )
    return ModelPreset(key=key, spec=spec, source=source, published_parameters=published)


_LLAMA2 = (
    "Touvron et al. 2023, 'Llama 2' (arXiv:2307.09288), Table 1 (7B/13B/70B, 4k context, GQA "
    "for 70B); shapes from config.json of meta-llama/Llama-2-{size}-hf"
)
_LLAMA3 = (
    "Llama Team 2024, 'The Llama 3 Herd of Models' (arXiv:2407.21783), Table 3 (layers, model "
    "dim, FFN dim, heads, 8 KV heads) and §3.4.1 (pre-training sequences of 8,192 tokens); "
    "vocab 128256 from config.json of meta-llama/Meta-Llama-3-8B / -70B and Llama-3.1-405B "
    "(the paper rounds it to '128K')"
)

_QWEN3 = (
    "Qwen Team 2025, 'Qwen3 Technical Report' (arXiv:2505.09388), Table 2 (MoE models: layers, "
    "Q/KV heads, 128 experts with 8 activated, no shared experts) and §3.1 (first pre-training "
    "stage at 4,096 tokens); widths from config.json of Qwen/Qwen3-30B-A3B and "
    "Qwen/Qwen3-235B-A22B (hidden_size, head_dim 128, moe_intermediate_size, vocab_size)"
)

_OPEN = [
    # Llama-2-7b-hf config.json: num_hidden_layers 32, hidden_size 4096, num_attention_heads 32,
    # num_key_value_heads 32 (plain MHA), intermediate_size 11008, vocab_size 32000, 4096 ctx.
    _open(
        "llama2-7b",
        layers=32,
        hidden=4096,
        heads=32,
        groups=None,
        ffn=11008,
        vocab=32000,
        seq=4096,
        published=7e9,
        source=_LLAMA2,
    ),
    # Llama-2-13b-hf: 40 layers, 5120, 40 heads (MHA), intermediate 13824, vocab 32000.
    _open(
        "llama2-13b",
        layers=40,
        hidden=5120,
        heads=40,
        groups=None,
        ffn=13824,
        vocab=32000,
        seq=4096,
        published=13e9,
        source=_LLAMA2,
    ),
    # Llama-2-70b-hf: 80 layers, 8192, 64 heads, 8 KV heads (GQA), intermediate 28672.
    _open(
        "llama2-70b",
        layers=80,
        hidden=8192,
        heads=64,
        groups=8,
        ffn=28672,
        vocab=32000,
        seq=4096,
        published=70e9,
        source=_LLAMA2,
    ),
    # Llama 3 Table 3, 8B: 32 layers, model dim 4096, FFN 14336, 32 heads, 8 KV heads.
    _open(
        "llama3-8b",
        layers=32,
        hidden=4096,
        heads=32,
        groups=8,
        ffn=14336,
        vocab=128256,
        seq=8192,
        published=8e9,
        source=_LLAMA3,
    ),
    # Llama 3 Table 3, 70B: 80 layers, 8192, FFN 28672, 64 heads, 8 KV heads.
    _open(
        "llama3-70b",
        layers=80,
        hidden=8192,
        heads=64,
        groups=8,
        ffn=28672,
        vocab=128256,
        seq=8192,
        published=70e9,
        source=_LLAMA3,
    ),
    # Llama 3 Table 3, 405B: 126 layers, 16384, FFN 53248, 128 heads, 8 KV heads.
    _open(
        "llama3-405b",
        layers=126,
        hidden=16384,
        heads=128,
        groups=8,
        ffn=53248,
        vocab=128256,
        seq=8192,
        published=405e9,
        source=_LLAMA3,
    ),
    # Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
    # intermediate_size 14336 per expert, num_local_experts 8, num_experts_per_tok 2,
    # vocab 32000, max_position_embeddings 32768; Jiang et al. 2024 (arXiv:2401.04088) §2:
    # 32k-token context, 47B total / 13B active parameters (model card: 46.7B).
    _open(
        "mixtral-8x7b",
        layers=32,
        hidden=4096,
        heads=32,
        groups=8,
        ffn=14336,
        vocab=32000,
        seq=32768,
        published=46.7e9,
        experts=8,
        top_k=2,
        source=(
            "Jiang et al. 2024, 'Mixtral of Experts' (arXiv:2401.04088), Table 1 and §2; "
            "config.json of mistralai/Mixtral-8x7B-v0.1 (num_local_experts 8, "
            "num_experts_per_tok 2); 46.7B total parameters per the model card"
        ),
    ),
    # Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads of head_dim 128 (so Q is
    # 4096 wide, twice h), 4 KV heads, 128 experts of moe_intermediate_size 768, 8 per token,
    # every layer MoE (decoder_sparse_step 1), vocab 151936, untied embeddings.
    _open(
        "qwen3-30b-a3b",
        layers=48,
        hidden=2048,
        heads=32,
        groups=4,
        ffn=768,
        vocab=151936,
        seq=4096,
        published=30.5e9,
        experts=128,
        top_k=8,
        kv_channels=128,
        source=_QWEN3,
    ),
    # Qwen3-235B-A22B config.json: 94 layers, hidden 4096, 64 heads of head_dim 128, 4 KV heads,
    # 128 experts of moe_intermediate_size 1536, 8 per token, vocab 151936, untied.
    _open(
        "qwen3-235b-a22b",
        layers=94,
        hidden=4096,
        heads=64,
        groups=4,
        ffn=1536,
        vocab=151936,
        seq=4096,
        published=235e9,
        experts=128,
        top_k=8,
        kv_channels=128,
        source=_QWEN3,
    ),
]

MODEL_PRESETS: dict[str, ModelPreset] = {p.key: p for p in (*_GPT3, *_SC21, *_OPEN)}


# --------------------------------------------------------------------------------------------
# GPUs: dense peak FLOP/s from the vendors' datasheets / whitepapers.
# --------------------------------------------------------------------------------------------
_A100_FLOPS = {
    # NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOPS; TF32 Tensor Core 156 (312*);
    # BF16 / FP16 Tensor Core 312 (624*); * = with sparsity. Same for 40GB and 80GB SXM4.
    Precision.FP32: 19.5 * _TERA,
    Precision.TF32: 156 * _TERA,
    Precision.FP16: 312 * _TERA,
    Precision.BF16: 312 * _TERA,
}
_A100_SOURCE = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): "
    "FP32 19.5, TF32 156, FP16/BF16 312 TFLOPS dense tensor core (sparse 312/624 not used)"
)

_HOPPER_FLOPS = {
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP32 67 TFLOPS; TF32 Tensor Core
    # 989*, BF16 / FP16 Tensor Core 1,979*, FP8 Tensor Core 3,958* (* with sparsity).
    # Dense = half of the sparse figure.
    Precision.FP32: 67 * _TERA,
    Precision.TF32: 494.5 * _TERA,
    Precision.FP16: 989.5 * _TERA,
    Precision.BF16: 989.5 * _TERA,
    Precision.FP8: 1979 * _TERA,
}
_HOPPER_NOTE = (
    "dense = half the datasheet's with-sparsity TF32 989 / BF16,FP16 1,979 / FP8 3,958 TFLOPS; "
    "FP32 67 TFLOPS (the H100 whitepaper's dense table gives 494.7 / 989.4 / 1978.9 at boost)"
)

# The H100s of Meta's Grand Teton hosts (torchtitan's published benchmarks): "the actual peak
# TFLOPs number is between SXM and NVL, and we don't know its exact value" (torchtitan
# benchmarks/llama3_h100_202412_torchtitan.md, footnote 2). We take the midpoint of the two
# datasheet figures; the true value lies within ±8.5 % of it. H100 NVL datasheet (with
# sparsity): TF32 835*, BF16/FP16 1,671*, FP8 3,341*; FP32 60 TFLOPS.
_H100_NVL_FLOPS = {
    Precision.FP32: 60 * _TERA,
    Precision.TF32: 417.5 * _TERA,
    Precision.FP16: 835.5 * _TERA,
    Precision.BF16: 835.5 * _TERA,
    Precision.FP8: 1670.5 * _TERA,
}
_GRAND_TETON_FLOPS = {k: (_HOPPER_FLOPS[k] + _H100_NVL_FLOPS[k]) / 2.0 for k in _HOPPER_FLOPS}
_GRAND_TETON_NOTE = (
    "96 GB HBM2e, 2.4 TB/s, 500 W; peak between H100 SXM and H100 NVL (the source's words), "
    "taken as the midpoint of their dense datasheet figures (BF16 912.5, FP8 1,824.75 TFLOPS)"
)

GPU_PRESETS: dict[str, GpuPreset] = {
    p.key: p
    for p in (
        GpuPreset(
            key="v100-sxm2-32gb",
            memory_bandwidth_gbps=900.0,  # V100 datasheet: 900 GB/s HBM2
            name="NVIDIA Tesla V100 SXM2 32GB",
            memory_bytes=32 * _GB,
            # V100 datasheet, SXM2 column: single precision 15.7 TFLOPS, deep learning (tensor,
            # FP16 in / FP32 accumulate) 125 TFLOPS; 32 GB HBM2. No TF32/BF16/FP8 support.
            # 15.7 = 5120 FP32 cores × 2 × 1.53 GHz boost;
            # 125 = 640 tensor cores × 64 FMA × 2 × 1.53 GHz.
            peak_flops={Precision.FP32: 15.7 * _TERA, Precision.FP16: 125 * _TERA},
            source="NVIDIA Tesla V100 datasheet (SXM2): FP32 15.7, tensor 125 TFLOPS; 32 GB HBM2",
        ),
        GpuPreset(
            key="a100-sxm4-40gb",
            memory_bandwidth_gbps=1555.0,  # A100 datasheet: 1,555 GB/s (40 GB HBM2)
            name="NVIDIA A100 SXM4 40GB",
            memory_bytes=40 * _GB,
            peak_flops=dict(_A100_FLOPS),
            source=_A100_SOURCE + "; 40 GB HBM2",
        ),
        GpuPreset(
            key="a100-sxm4-80gb",
            memory_bandwidth_gbps=2039.0,  # A100 datasheet: 2,039 GB/s (80 GB HBM2e SXM)
            name="NVIDIA A100 SXM4 80GB",
            memory_bytes=80 * _GB,
            peak_flops=dict(_A100_FLOPS),
            source=_A100_SOURCE + "; 80 GB HBM2e",
        ),
        GpuPreset(
            key="h100-sxm5-80gb",
            flash2_efficiency=0.5,  # Hopper (Shah et al. 2024)
            memory_bandwidth_gbps=3350.0,  # H100 datasheet: 3.35 TB/s (SXM)
            name="NVIDIA H100 SXM5 80GB",
            memory_bytes=80 * _GB,
            peak_flops=dict(_HOPPER_FLOPS),
            source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: " + _HOPPER_NOTE + "; 80 GB",
        ),
        GpuPreset(
            key="h100-hbm2e-96gb-500w",
            flash2_efficiency=0.5,  # Hopper (Shah et al. 2024)
            # torchtitan benchmarks (benchmarks/llama3_h100_202412_torchtitan.md, Grand Teton
            # hosts): "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "500W power limit".
            memory_bandwidth_gbps=2400.0,
            name="NVIDIA H100 96GB HBM2e at 500 W (Meta Grand Teton)",
            memory_bytes=96 * _GB,
            peak_flops=dict(_GRAND_TETON_FLOPS),
            source="torchtitan Llama 3 H100 benchmarks (Dec. 2024, June 2025), hardware section: "
            + _GRAND_TETON_NOTE,
        ),
        GpuPreset(
            key="h200-sxm-141gb",
            flash2_efficiency=0.5,  # Hopper (Shah et al. 2024)
            memory_bandwidth_gbps=4800.0,  # H200 datasheet: 4.8 TB/s
            name="NVIDIA H200 SXM 141GB",
            memory_bytes=141 * _GB,
            # H200 datasheet: same tensor-core rates as H100 SXM (FP8 3,958*, BF16 1,979*, ...),
            # 141 GB HBM3e at 4.8 TB/s.
            peak_flops=dict(_HOPPER_FLOPS),
            source="NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: " + _HOPPER_NOTE + "; 141 GB",
        ),
        GpuPreset(
            key="rtx-3090",
            memory_bandwidth_gbps=936.0,  # GeForce RTX 3090 specifications: 936 GB/s GDDR6X
            name="NVIDIA GeForce RTX 3090",
            memory_bytes=24 * _GB,
            # NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (GeForce RTX 3090):
            # FP32 35.6 TFLOPS (non-tensor); TF32 tensor 35.6; FP16 and BF16 tensor with FP32
            # accumulate 71 (142 sparse). GeForce GA102 runs FP16-accumulate at twice that
            # (142 dense, 284 sparse), but mixed-precision training accumulates in FP32, so we
            # chose the FP32-accumulate rate. Check: 328 tensor cores × 128 FP16 FMA/clk (FP16 acc)
            # × 2 FLOP × 1.695 GHz boost = 142.3 T; half for FP32 accumulate = 71.2 T.
            peak_flops={
                Precision.FP32: 35.6 * _TERA,
                Precision.TF32: 35.6 * _TERA,
                Precision.FP16: 71 * _TERA,
                Precision.BF16: 71 * _TERA,
            },
            source=(
                "NVIDIA Ampere GA102 GPU Architecture whitepaper v2, Appendix A (RTX 3090): "
                "FP16/BF16 tensor with FP32 accumulate 71 TFLOPS dense (chosen; FP16 accumulate "
                "would be 142), TF32 35.6, FP32 35.6; 24 GB GDDR6X"
            ),
        ),
    )
}


def _known(keys: dict[str, object]) -> str:
    return ", ".join(sorted(keys))


def model_preset(key: str) -> ModelSpec:
    """The ``ModelSpec`` of a named published model; NotFoundError lists the known keys."""
    preset = MODEL_PRESETS.get(key.strip().lower())
    if preset is None:
        raise NotFoundError(
            f"unknown model preset {key!r}; known: {_known(dict(MODEL_PRESETS))}",
            key=key,
            known=sorted(MODEL_PRESETS),
        )
    return preset.spec


def gpu_preset(key: str) -> GpuPreset:
    """The datasheet figures of a named GPU; NotFoundError lists the known keys."""
    preset = GPU_PRESETS.get(key.strip().lower())
    if preset is None:
        raise NotFoundError(
            f"unknown GPU preset {key!r}; known: {_known(dict(GPU_PRESETS))}",
            key=key,
            known=sorted(GPU_PRESETS),
        )
    return preset


def gpu_family_preset(gpu_model: str | None) -> GpuPreset | None:
    """The GPU preset of the family a GPU model name belongs to ("NVIDIA A100-SXM4-80GB" ->
    the A100 80GB preset), or None when no preset's family is named."""
    if not gpu_model:
        return None
    text = gpu_model.upper()
    for token, key in _FAMILY_KEYS:
        if token in text:
            return GPU_PRESETS[key]
    return None


# Family token in a GPU model name -> the preset that stands for the family (order: specific
# first). Only the family-level figures (FlashAttention-2 efficiency, fitted compute) are read.
_FAMILY_KEYS = (
    ("H200", "h200-sxm-141gb"),
    ("H100", "h100-sxm5-80gb"),
    ("A100", "a100-sxm4-80gb"),
    ("V100", "v100-sxm2-32gb"),
)
