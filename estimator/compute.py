"""Per-operation compute times of one transformer layer (detailed fidelity).

A roofline per operation replaces the paper's single utilization u:

- GEMMs: ``F/(u(x)·F_peak) + c·B/HBM``, F the FLOPs and B the bytes of its operands and result
  (M·K + K·N + M·N elements). The second term is the memory side of the roofline, added rather
  than maxed so the time stays linear in the fitted constants (1/u, c); it makes a GEMM's
  efficiency depend on its per-GPU size: small hidden sizes, high t, short token counts and the
  narrow GEMMs of small experts run further below peak, more so where F_peak/HBM is high
  (H100, and FP8 more than BF16). The linear layers' efficiency u(x) also saturates with the
  per-GPU weight's size x (``size_factor``).
- Attention core: Q·Kᵀ and attention·V as batched GEMMs with the s² score matrix (no
  FlashAttention), or one fused kernel (FlashAttention, Dao et al. 2022): causal masking skips
  half the blocks and the backward pass recomputes the scores, 2.5x the forward FLOPs. Batched
  GEMMs whose head rows are not 16-byte aligned (head dim x element bytes) cannot use
  tensor-core kernels and run at u x the CUDA cores' FP32 rate (``tensor_core_aligned``).
- Element-wise work (layer norms, dropout, activations, softmax): ``γ`` times the activation
  bytes of Korthikanti et al. 2022 Table 2 through HBM.
- FP8 (Transformer Engine): linear-layer GEMMs at the FP8 peak with their own efficiency u8 and
  1-byte operands, plus the casts of their inputs (read 16-bit, write 8-bit, a transposed copy
  for the weight gradient: 4 B per element); attention, the logit layer and the router stay
  16-bit, at half the FP8 peak (the FP8 tensor-core rate is twice the 16-bit rate on Hopper,
  Ada and Blackwell datasheets).

Every function works on floats and on numpy arrays alike (plain arithmetic), so the single
estimate and the sweep stay bit-identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from estimator.bandwidth import Num
from estimator.specs import ModelSpec

# An FP8 element (E4M3/E5M2): one byte.
FP8_BYTES = 1.0
# Bytes/s a streaming kernel reaches of the datasheet HBM bandwidth (ours: STREAM-style copies
# reach ~85-90 % on A100 and H100); used for work whose bytes are counted exactly (optimizer,
# gradient accumulation, casts, cross-entropy, token permutation).
HBM_EFFICIENCY = 0.85
# Cross entropy over the logits in fp32 (ours, counted from the elementary passes): upcast
# (read 2, write 4), max and exp-sum (read 4 twice), log-probabilities (write 4), gradient
# (read 4, write 4), cast back (read 4, write 2): 32 B per logit.
CROSS_ENTROPY_BYTES_PER_LOGIT = 32.0
# FP8 casts, each in the pass that runs it (Transformer Engine 1.13 ``Linear``, with
# sequence parallelism: the forward casts the input without transposing it; the backward
# transposes the saved FP8 input for the weight gradient and cast-transposes the output
# gradient in one kernel). Forward, per input element: read 2 B, write 1 B.
FP8_CAST_BYTES = 3.0
# Backward, per output-gradient element: read 2 B, write 1 B and its 1 B transposed copy.
FP8_CAST_TRANSPOSE_BYTES = 4.0
# Backward, per input element: the saved FP8 input transposed (read 1 B, write 1 B); also the
# transposed copy of an FP8 tensor gathered before its cast could make it (torchao float8 TP:
# the cast runs on the sequence shard, the weight gradient needs the gathered tensor transposed).
FP8_TRANSPOSE_COPY_BYTES = 2.0
# FlashAttention: the causal mask skips about half the score blocks; the backward pass
# recomputes the scores, 2.5x the forward FLOPs (Dao et al. 2022, 2023).
FLASH_CAUSAL_FRACTION = 0.5
FLASH_BACKWARD_RATIO = 2.5
# ... and its backward pass runs those FLOPs at 0.87 of the forward pass's rate, whichever kernel:
# H100 SXM5, head dim 128, 16k tokens, no mask, FlashAttention-2 322/370, FlashAttention-3
# 561/648, cuDNN 516/595 TFLOP/s backward/forward (Shah et al. 2024, FlashAttention-3, Fig. 5-6).
FLASH_BACKWARD_EFFICIENCY = 0.87
# FlashAttention in Triton (Tri Dao's ``flash_attn_triton.py`` on the pre-MLIR Triton fork, which
# llm-foundry runs for ``attn_impl: triton``) against FlashAttention-2 on the same GPU: FA2 is
# "around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x faster
# in the backward pass" (Dao 2023, FlashAttention-2, §4.1, A100). Both kernels issue the
# Ampere-generation tensor-core instructions (the pre-MLIR Triton predates Hopper's wgmma), so
# the ratios are applied on top of the GPU's FA2 efficiency there too. Forward + backward (FA2's
# backward at FLASH_BACKWARD_EFFICIENCY) that is 1.85x, inside the paper's measured causal A100
# range (Fig. 4c/4d: 1.49x at 512 tokens, head dim 64 .. 2.36x at 16k, head dim 128). The
# per-length ratios are not used: they rise with the length because FA2 speeds up while the
# Triton kernel stays at 50-80 TFLOP/s, and FA2's efficiency here does not depend on the length.
TRITON_FLASH_FORWARD_SLOWDOWN = 1.4
TRITON_FLASH_BACKWARD_SLOWDOWN = 2.0
# Eager PyTorch (no fused kernels, no torch.compile) in a Llama-style block (RMSNorm, RoPE, gated
# FFN): extra HBM passes over token x h elements per layer and forward pass, beyond the fused
# kernels γ stands for (ours, counted from the elementary ops: an RMSNorm upcasts, squares,
# averages, scales and casts back, ~16 passes where a fused kernel reads and writes once: 14
# more, twice per layer; RoPE rotates Q and K through complex views, ~4 more passes over them;
# the gated activation writes and re-reads its f-wide SiLU output, 2·f/h more). The backward
# pass moves twice that. Blocks with LayerNorm and an ungated activation (GPT) run the same
# single kernels eager or fused.
EAGER_NORM_PASSES = 14.0
EAGER_ROPE_PASSES = 4.0


# Tensor-core GEMM kernels load operands in 128-bit (16-byte) vectors: "most kernels targeting
# Tensor Cores require 128b aligned memory accesses ... a documented requirement in cublas"
# (NVIDIA/cutlass issue #75, NVIDIA's reply, Dec. 2019; cuBLAS documentation, "Tensor Core
# Usage"). Without FlashAttention, each head's Q, K, V and context rows start head-dim x element
# bytes apart in the batched GEMMs (Megatron's [s, b·heads, head_dim] layout, batch stride
# head_dim), so a head dim whose rows are not a multiple of 16 bytes leaves the tensor cores for
# the CUDA cores: their FP32 rate, as PyTorch runs 16-bit GEMMs with fp32 accumulation
# (CUBLAS_COMPUTE_32F).
TENSOR_CORE_ALIGNMENT_BYTES = 16.0
# The FFN-width part of Korthikanti et al. 2022 Table 2's per-layer activation bytes: the GeLU
# input (8sbh/t) and the second linear's input (8sbh/t), for their 4h-wide GeLU MLP.
FFN_WIDTH_SBH = 16.0
# Its attention-width part: Q and K (4sbh/t), V (2sbh/t) and the output projection's input
# (2sbh/t), as wide as the heads (kv_channels) make them.
ATTENTION_WIDTH_SBH = 8.0
# The loss's peak, bytes per logit (ours, from the elementary passes of the fp32 cross entropy
# the engine's time prices): the 16-bit logits, their fp32 log-softmax and its fp32 gradient are
# live together as the backward pass starts (2 + 4 + 4 B).
LOGITS_PEAK_BYTES = 10.0


@dataclass(slots=True)
class Roofline:
    """The machine and fitted constants the per-operation times use."""

    peak_flops: float  # training-precision peak (the FP8 rate when training in FP8)
    utilization: Num  # u: large-GEMM efficiency (16-bit)
    fp8_utilization: float | None  # u8 for FP8 GEMMs; None: u
    fp8: bool
    hbm_bytes_per_s: float  # datasheet HBM bandwidth; 0 when unknown (no memory-side terms)
    gemm_traffic_factor: float  # c
    elementwise_factor: float  # γ
    attention_efficiency: float = 1.0  # the attention kernel's efficiency relative to u
    # ... and of its backward pass (FlashAttention's kernels; the same unless the kernel's
    # backward pass lags its forward pass more than FLASH_BACKWARD_EFFICIENCY says)
    attention_backward_efficiency: float = 1.0
    fused_elementwise: bool = True  # False: eager PyTorch (EAGER_* extra passes)
    gemm_half_size_elements: float = 0.0  # x0 of size_factor; 0: size-independent u
    # FP32 rate of the CUDA cores (no tensor cores); 0: unknown (misalignment not priced)
    cuda_core_peak_flops: float = 0.0
    # The framework's FlashAttention kernel (``Framework.attention_kernel``): which head
    # dimension it computes with (``flash_head_dim``)
    attention_kernel: str = "fused"
    # u8e: a MoE layer's expert GEMMs in FP8 (fraction of the FP8 peak); None: u8
    fp8_expert_utilization: float | None = None

    @property
    def high_precision_peak(self) -> float:
        """Peak of the 16-bit operations (attention, logits, router)."""
        return self.peak_flops / 2.0 if self.fp8 else self.peak_flops

    @property
    def linear_utilization(self) -> Num:
        if self.fp8 and self.fp8_utilization is not None:
            return self.fp8_utilization
        return self.utilization

    @property
    def expert_utilization(self) -> Num:
        """The efficiency of a MoE layer's expert GEMMs: u8e in FP8 where given, else that of
        every other linear layer."""
        if self.fp8 and self.fp8_expert_utilization is not None:
            return self.fp8_expert_utilization
        return self.linear_utilization

    def stream_s(self, nbytes: Num) -> Num:
        """Seconds to stream ``nbytes`` through HBM (exactly counted bytes)."""
        if not self.hbm_bytes_per_s:
            return 0.0 * nbytes
        return nbytes / (HBM_EFFICIENCY * self.hbm_bytes_per_s)

    def traffic_s(self, nbytes: Num, factor: float) -> Num:
        """Seconds for ``factor`` x ``nbytes`` through HBM (a fitted multiplier)."""
        if not self.hbm_bytes_per_s or not factor:
            return 0.0 * nbytes
        return factor * nbytes / self.hbm_bytes_per_s


def attention_efficiencies(kernel: str, flash2_efficiency: float) -> tuple[float, float]:
    """(forward, backward) efficiency of a framework's fused-attention kernel relative to u.

    ``fused`` (TE/cuDNN, FA3: kernels for the GPU's generation) 1; ``flash2`` the GPU's
    ``flash2_efficiency``; ``triton`` FA2's divided by the FA2 paper's speed-ups over the
    Triton kernel (``TRITON_FLASH_*_SLOWDOWN``).
    """
    if kernel == "flash2":
        return flash2_efficiency, flash2_efficiency
    if kernel == "triton":
        return (
            flash2_efficiency / TRITON_FLASH_FORWARD_SLOWDOWN,
            flash2_efficiency / TRITON_FLASH_BACKWARD_SLOWDOWN,
        )
    return 1.0, 1.0


def tensor_core_aligned(head_dim: float, element_bytes: float) -> bool:
    """Whether attention's batched GEMMs (no FlashAttention) can use tensor-core kernels: each
    head's rows must start on a 16-byte boundary (``TENSOR_CORE_ALIGNMENT_BYTES``)."""
    return (head_dim * element_bytes) % TENSOR_CORE_ALIGNMENT_BYTES == 0


def flash_head_dim(kernel: str, head_dim: float) -> float:
    """The head dimension a FlashAttention kernel computes with (its FLOPs scale with it).

    ``flash2``: FlashAttention-2 pads the head to a multiple of 8, then runs the kernel of the
    next multiple of 32 up to 192, else 256 (flash-attention ``csrc/flash_attn/flash_api.cpp``,
    ``mha_fwd``: ``head_size_rounded``); ``triton``: the Triton port tiles the next power of two,
    at least 16 (``flash_attn_triton.py``: ``BLOCK_HEADDIM = max(next_power_of_2(d), 16)``);
    ``fused`` (cuDNN, Transformer Engine, FlashAttention-3): as is.
    """
    if kernel == "flash2":
        padded = math.ceil(head_dim / 8.0) * 8.0
        return math.ceil(padded / 32.0) * 32.0 if padded <= 192.0 else 256.0
    if kernel == "triton":
        return max(2.0 ** math.ceil(math.log2(head_dim)), 16.0)
    return head_dim


def _where_sp(sp: Num, t: Num) -> Num:
    """t where sequence parallelism shards the norms, else 1 (sp is a 0/1 flag)."""
    return sp * t + (1.0 - sp)


def size_factor(roof: Roofline, n: Num, k: Num) -> Num:
    """u / (the efficiency of a linear layer whose per-GPU weight is n x k).

    The efficiency saturates with the GEMM's size, u(x) = u · x/(x + x0), x = 2nk/(n + k) the
    harmonic mean of the per-GPU weight's dimensions (the inner dimensions of the forward and
    input-gradient GEMMs); Anthony et al. 2024 ("The Case for Co-Designing Model Architectures
    with Hardware", arXiv:2401.14489) measure transformer GEMM throughput rising with these
    dimensions and saturating. So 1/u(x) = (1/u)(1 + x0·(1/n + 1/k)/2); x0 = 0 is a
    size-independent u (docs/design.md §4.4).
    """
    return 1.0 + roof.gemm_half_size_elements * 0.5 * (1.0 / n + 1.0 / k)


def gemm_s(
    roof: Roofline,
    m: Num,
    n: Num,
    k: Num,
    *,
    operand_bytes: float,
    peak: float,
    utilization: Num,
    count: Num = 1.0,
) -> Num:
    """``count`` GEMMs of (m x k)·(k x n): FLOPs at u·peak plus c x operand bytes via HBM."""
    flops = 2.0 * m * n * k * count
    nbytes = operand_bytes * (m * k + k * n + m * n) * count
    return flops / (utilization * peak) + roof.traffic_s(nbytes, roof.gemm_traffic_factor)


@dataclass(slots=True)
class LayerTimes:
    """Seconds for one layer and one micro-batch on one GPU, by pass and by kind of work.

    ``*_fwd`` is one forward pass; the backward pass of GEMMs is twice their forward (input
    and weight gradients). ``qkv_fwd`` and ``fc1_fwd`` are the column-parallel linears whose
    weight-gradient GEMMs can hide a backward TP collective (and whose input-gradient GEMMs
    hide SP's backward all-gather).
    """

    linear_fwd: Num
    attention_fwd: Num
    attention_bwd: Num
    elementwise_fwd: Num
    elementwise_attention_fwd: Num  # the part selective recompute replays
    qkv_fwd: Num
    fc1_fwd: Num
    extra_fwd: Num = 0.0  # MoE router and token permutation (HBM-bound, per pass)
    # FP8 casts: the forward pass's (the linears' inputs; replayed with the forward) and the
    # backward pass's (output gradients cast and transposed, saved inputs transposed).
    cast_fwd: Num = 0.0
    cast_bwd: Num = 0.0
    # The attention block's linears (QKV and output projection): the only GEMMs a MoE layer's
    # userbuffers TP overlap can hide a collective under (the experts' linears have none).
    attention_linear_fwd: Num = 0.0
    # torch op-level selective checkpointing (torchtitan): the linear-GEMM time it replays.
    sac_linear_fwd: Num = 0.0
    # The layer's last GEMM (FC2, the down projection): what a full replay that stops early
    # leaves out (Framework.recompute_early_stop); 0 in a MoE layer, whose expert outputs are
    # saved after their FC2 runs.
    fc2_fwd: Num = 0.0

    def forward(self) -> Num:
        return (
            self.linear_fwd
            + self.attention_fwd
            + self.elementwise_fwd
            + self.extra_fwd
            + self.cast_fwd
        )

    def backward(self) -> Num:
        return (
            2.0 * self.linear_fwd
            + self.attention_bwd
            + 2.0 * self.elementwise_fwd
            + 2.0 * self.extra_fwd
            + self.cast_bwd
        )

    def replay(
        self, full: Num, selective: Num, op_sac: bool = False, early_stop: bool = False
    ) -> Num:
        """The recomputed forward: all of it (full; with ``early_stop`` all but the last GEMM)
        or, selective, the attention core (Korthikanti et al. 2022) or with ``op_sac`` torch's
        op-level policy: every non-GEMM op and the GEMMs it does not save, never the attention
        kernel (docs/design.md, "torchtitan")."""
        replayed = self.forward() - self.fc2_fwd if early_stop else self.forward()
        if op_sac:
            sac = self.sac_linear_fwd + self.elementwise_fwd + self.extra_fwd + self.cast_fwd
            return full * replayed + selective * sac
        core = self.attention_fwd + self.elementwise_attention_fwd
        return full * replayed + selective * core

    def gemm(
        self, full: Num, selective: Num = 0.0, op_sac: bool = False, early_stop: bool = False
    ) -> Num:
        """GEMM time of one micro-batch (forward, backward, replay): TP overlap's budget."""
        gemms = (3.0 + full) * self.linear_fwd
        if early_stop:
            gemms = gemms - full * self.fc2_fwd
        if op_sac:
            return gemms + selective * self.sac_linear_fwd
        return gemms


def ffn_width_sbh(model: ModelSpec, moe: bool) -> float:
    """A layer's FFN-width activations per token, in sbh at 2 bytes: Table 2's 16sbh for a 4h
    GeLU MLP (the activation's input and output), 2·w/h per tensor of width w; a gated MLP
    (SwiGLU) holds three (gate, up and their product); a MoE layer top_k copies at the expert
    width (each expert runs its MLP on its permuted tokens, Megatron-Core's experts)."""
    width = float(model.moe_top_k * model.expert_ffn) if moe else float(model.ffn)
    tensors = 3.0 if model.swiglu else 2.0
    return 2.0 * tensors * width / float(model.hidden_size)


def op_sac_sbh(model: ModelSpec, moe: bool) -> tuple[float, float]:
    """What torchtitan's op-level SAC keeps of a layer per token, in sbh at 2 bytes, as (the part
    as wide as the layer's input, the part as wide as its TP-sharded matmul outputs).

    ``parallelize_llama.py`` at 9dec370: matmul and SDPA outputs are saved except every second
    matmul of the layer (wq, wk, wv, wo, w1, (w3,) w2 in order), everything else is replayed; so
    the layer's input, wq's, wv's and the SDPA's outputs and w1's (and, gated, w2's) stay. A MoE
    layer's FFN outputs are its routed copies (``ffn_width_sbh``).
    """
    h = float(model.hidden_size)
    width = float(model.moe_top_k * model.expert_ffn) if moe else float(model.ffn)
    copies = float(model.moe_top_k) if moe else 1.0
    gated = 1.0 if model.swiglu else 0.0
    wide = 2.0 * (1.0 + gated * copies)
    sharded = 2.0 * (2.0 * float(model.attention_width) + float(model.kv_hidden) + width) / h
    return wide, sharded


def layer_times(
    model: ModelSpec,
    roof: Roofline,
    *,
    b: Num,
    t: Num,
    cp: Num,
    sp: Num,
    beta: float,
    flash: bool,
    moe: bool,
    imbalance: float,
    ep: Num,
    fp8_gather: bool = False,
    expert_tp: Num | None = None,
    op_sac: bool = True,
) -> LayerTimes:
    """Per-operation times of one (dense or MoE) layer for a micro-batch of b sequences.

    ``fp8_gather``: FP8 casts of the sequence-parallel inputs happen on the shard, before their
    all-gather (torchao float8 TP; ``Framework.tp_fp8_all_gather``). ``expert_tp``: the experts'
    own tensor parallelism where it is not t (1: folded over TP under sequence parallelism):
    each rank then routes its sequence shard's tokens, and its local experts' GEMMs are
    expert_ffn/expert_tp wide. ``op_sac``: price the GEMMs torch's op-level SAC replays
    (``sac_linear_fwd``); without it that field is 0 (only an op-SAC framework reads it).
    """
    h, kv, s = float(model.hidden_size), float(model.kv_hidden), float(model.seq_length)
    hq = float(model.attention_width)  # Q's and the attention output's width (h by default)
    heads, dh = float(model.num_attention_heads), float(model.head_dim)
    tokens = b * s / cp  # M: tokens of this GPU's sequence shard
    fp8 = roof.fp8
    lin_bytes = FP8_BYTES if fp8 else beta
    lin_peak = roof.peak_flops
    lin_u = roof.linear_utilization
    hi_peak = roof.high_precision_peak
    u = roof.utilization

    def lin(n: Num, k: Num, count: Num = 1.0, rows: Num = tokens, eff: Num = lin_u) -> Num:
        return gemm_s(
            roof,
            rows,
            n,
            k,
            operand_bytes=lin_bytes,
            peak=lin_peak,
            utilization=eff / size_factor(roof, n, k),
            count=count,
        )

    qkv = lin((hq + 2.0 * kv) / t, h)
    proj = lin(h, hq / t)
    # torchtitan's op-level SAC saves every other aten.mm of a block, in execution order
    # wq, wk, wv, wo, w1, (w3,) w2: it replays wk, wo and w3 (gated) or w2 (ungated). FP8
    # linears run torch._scaled_mm, which the policy does not save: all are replayed.
    sac_attention = lin(kv / t, h) + proj if op_sac else 0.0
    # FP8 cast bytes per token, per pass (only in FP8: the sweep's hot path skips them). Each
    # block has one h-wide input (QKV's, FC1's: gathered under SP) and one h-wide output
    # gradient (the output projection's, FC2's); with ``fp8_gather`` under SP both are cast on
    # the 1/t sequence shard, then gathered, and their transposed copy for the weight gradient
    # is made after the gather.
    cast_fwd_bytes: Num = 0.0
    cast_bwd_bytes: Num = 0.0
    if fp8:
        if fp8_gather:
            wide_in_fwd = (sp * h / t + (1.0 - sp) * h) * FP8_CAST_BYTES
            wide_grad_bwd = (
                sp * (h / t * FP8_CAST_BYTES + h * FP8_TRANSPOSE_COPY_BYTES)
                + (1.0 - sp) * h * FP8_CAST_TRANSPOSE_BYTES
            )
        else:
            wide_in_fwd = h * FP8_CAST_BYTES
            wide_grad_bwd = h * FP8_CAST_TRANSPOSE_BYTES
        wide_bwd = h * FP8_TRANSPOSE_COPY_BYTES + wide_grad_bwd
        # The attention block: QKV's output gradient and the projection's input are 1/t wide.
        cast_fwd_bytes = tokens * (wide_in_fwd + hq / t * FP8_CAST_BYTES)
        cast_bwd_bytes = tokens * (
            wide_bwd
            + hq / t * FP8_TRANSPOSE_COPY_BYTES
            + (hq + 2.0 * kv) / t * FP8_CAST_TRANSPOSE_BYTES
        )
    extra: Num = 0.0 * tokens
    gated = 2.0 if model.swiglu else 1.0
    if moe:
        e = float(model.moe_num_experts)
        f_e = float(model.expert_ffn)
        local = e / ep
        # Tokens this rank routes and its experts' TP: all b·s/cp (gathered over TP) at TP t,
        # or folded the sequence shard at TP 1 (the same FLOPs, in fewer, wider GEMMs).
        et = t if expert_tp is None else expert_tp
        routed = tokens if expert_tp is None else tokens * et / t
        rows = imbalance * ep * routed * float(model.moe_top_k) / e  # tokens per local expert
        u_e = roof.expert_utilization
        fc1 = lin(gated * f_e / et, h, local, rows, u_e)
        fc2 = lin(h, f_e / et, local, rows, u_e)
        sac_ffn = (lin(f_e / et, h, local, rows, u_e) if model.swiglu else fc2) if op_sac else 0.0
        router = gemm_s(roof, routed, e, h, operand_bytes=beta, peak=hi_peak, utilization=u)
        # Permute before dispatch and un-permute after combine: read + write each token copy.
        permute_bytes = 2.0 * 2.0 * routed * float(model.moe_top_k) * h * beta
        extra = extra + router + roof.stream_s(permute_bytes)
        if fp8:
            # Each local expert's FC1 and FC2 on its rows: inputs h and f_e/et, gradients
            # gated·f_e/et and h (the token rows are gathered, not the casts).
            cast_fwd_bytes = cast_fwd_bytes + local * rows * (h + f_e / et) * FP8_CAST_BYTES
            cast_bwd_bytes = cast_bwd_bytes + local * rows * (
                (h + f_e / et) * FP8_TRANSPOSE_COPY_BYTES
                + (gated * f_e / et + h) * FP8_CAST_TRANSPOSE_BYTES
            )
    else:
        f = float(model.ffn)
        fc1 = lin(gated * f / t, h)
        fc2 = lin(h, f / t)
        sac_ffn = (lin(f / t, h) if model.swiglu else fc2) if op_sac else 0.0
        if fp8:
            # FC1's input is h-wide, its output gradient gated·f/t; FC2's input f/t, its output
            # gradient h-wide.
            cast_fwd_bytes = cast_fwd_bytes + tokens * (wide_in_fwd + f / t * FP8_CAST_BYTES)
            cast_bwd_bytes = cast_bwd_bytes + tokens * (
                wide_bwd
                + f / t * FP8_TRANSPOSE_COPY_BYTES
                + gated * f / t * FP8_CAST_TRANSPOSE_BYTES
            )
    cast_fwd = roof.stream_s(cast_fwd_bytes) if fp8 else 0.0 * tokens
    cast_bwd = roof.stream_s(cast_bwd_bytes) if fp8 else 0.0 * tokens
    if not roof.fused_elementwise and model.swiglu:
        f_act = float(model.expert_ffn if moe else model.ffn) * (
            float(model.moe_top_k) if moe else 1.0
        )
        # The norms run on the sequence shard under SP (else on every TP rank); RoPE on this
        # rank's heads; the gated activation on this rank's 1/t of the FFN.
        norms = 2.0 * EAGER_NORM_PASSES * h / _where_sp(sp, t)
        rope_ffn = (EAGER_ROPE_PASSES * (hq + kv) + 2.0 * f_act) / t
        extra = extra + roof.stream_s((norms + rope_ffn) * tokens * beta)

    # Attention core, per GPU: b·a/t heads of (s/cp) queries against s keys.
    s_q = s / cp
    n_heads = b * heads / t
    scores = 2.0 * s_q * s * dh * n_heads  # FLOPs of Q·Kᵀ (and of attention·V)
    if flash:
        # The kernel's tile covers its own head width (FA2's 32-multiples, Triton's powers of 2).
        scores = scores * flash_head_dim(roof.attention_kernel, dh) / dh
        fwd_flops = 2.0 * scores * FLASH_CAUSAL_FRACTION
        io = beta * (2.0 * tokens * hq / t + 2.0 * b * s * kv / t)  # Q, O; K, V
        u_attention = u * roof.attention_efficiency
        attention_fwd = fwd_flops / (u_attention * hi_peak) + roof.traffic_s(
            io, roof.gemm_traffic_factor
        )
        u_attention_bwd = u * roof.attention_backward_efficiency
        attention_bwd = FLASH_BACKWARD_RATIO * fwd_flops / (
            u_attention_bwd * FLASH_BACKWARD_EFFICIENCY * hi_peak
        ) + roof.traffic_s(2.0 * io, roof.gemm_traffic_factor)
    else:
        # Q·Kᵀ: (s_q x dh)·(dh x s); attention·V: (s_q x s)·(s x dh); batched over heads; on
        # the CUDA cores when the heads' rows are misaligned for tensor cores.
        bmm_peak = hi_peak
        if roof.cuda_core_peak_flops and not tensor_core_aligned(dh, beta):
            bmm_peak = roof.cuda_core_peak_flops
        qk = gemm_s(
            roof, s_q, s, dh, operand_bytes=beta, peak=bmm_peak, utilization=u, count=n_heads
        )
        av = gemm_s(
            roof, s_q, dh, s, operand_bytes=beta, peak=bmm_peak, utilization=u, count=n_heads
        )
        attention_fwd = qk + av
        attention_bwd = 2.0 * attention_fwd

    # Element-wise bytes per pass: Korthikanti et al. 2022 Table 2 (sbh·(10 + 24/t), SP 34/t;
    # the s² attention part 5as/(ht) without FlashAttention), scaled to β bytes; its
    # attention-width and FFN-width parts at this model's widths.
    sbh = tokens * h
    # Q, K, V and the projection's input at the heads' width (kv_channels; 0 when it is h).
    wide = (hq / h - 1.0) * ATTENTION_WIDTH_SBH + ffn_width_sbh(model, moe) - FFN_WIDTH_SBH
    linear_part = (sp * (34.0 + wide) / t + (1.0 - sp) * (10.0 + (24.0 + wide) / t)) * (
        sbh * (beta / 2.0)
    )
    attention_part = (0.0 if flash else 5.0 * heads * s / (h * t)) * sbh * (beta / 2.0)
    gamma = roof.elementwise_factor
    elementwise_attention = roof.traffic_s(attention_part, gamma)
    elementwise = roof.traffic_s(linear_part, gamma) + elementwise_attention

    # Positional, in field order (keywords cost as much as the record itself).
    linear_fwd = qkv + proj + fc1 + fc2
    return LayerTimes(
        linear_fwd,
        attention_fwd,
        attention_bwd,
        elementwise,  # elementwise_fwd
        elementwise_attention,  # elementwise_attention_fwd
        qkv,  # qkv_fwd
        fc1,  # fc1_fwd
        extra,  # extra_fwd
        cast_fwd,
        cast_bwd,
        qkv + proj,  # attention_linear_fwd
        # sac_linear_fwd
        ((qkv + proj + fc1 + fc2) if fp8 else sac_attention + sac_ffn) if op_sac else 0.0,
        # fc2_fwd: a MoE layer's expert outputs are saved after FC2 runs (weighted by the
        # router's probabilities, or scattered with them), so an early-stopping replay runs it.
        0.0 if moe else fc2,
    )


def logits_s(model: ModelSpec, roof: Roofline, *, b: Num, t: Num, cp: Num, beta: float) -> Num:
    """The output layer of one micro-batch: its GEMM (3 passes) and the fp32 cross entropy."""
    h, vocab, s = float(model.hidden_size), float(model.vocab_size), float(model.seq_length)
    tokens = b * s / cp
    gemm = gemm_s(
        roof,
        tokens,
        vocab / t,
        h,
        operand_bytes=beta,
        peak=roof.high_precision_peak,
        utilization=roof.utilization,
        count=3.0,
    )
    return gemm + roof.stream_s(CROSS_ENTROPY_BYTES_PER_LOGIT * tokens * vocab / t)


def logits_wgrad_s(
    model: ModelSpec, roof: Roofline, *, b: Num, t: Num, cp: Num, beta: float
) -> Num:
    """The output layer's weight-gradient GEMM (it can hide that layer's input-gradient AR)."""
    h, vocab, s = float(model.hidden_size), float(model.vocab_size), float(model.seq_length)
    return gemm_s(
        roof,
        b * s / cp,
        vocab / t,
        h,
        operand_bytes=beta,
        peak=roof.high_precision_peak,
        utilization=roof.utilization,
    )
