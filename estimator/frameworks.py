"""Training software as the engine sees it: what each framework overlaps, fuses and shards.

The same layout runs at different speeds under different software: Megatron-LM got 7-10 %
faster on the same 530B/1T pipelines between its 2021 and 2022 releases, and NeMo recipes hide
most communication behind compute. A :class:`Framework` names every such behaviour as a flag;
presets give the flags of a named framework and era, and every flag can be overridden
(``framework_preset("nemo").replace(tp_comm_overlap=False)``). An estimate lists the resolved
flags in its ``assumptions``.

Sources, per flag (dates from the Megatron-LM git history):

- ``tp_overlap_wgrad``: the backward all-reduce (or reduce-scatter with SP) of a column-parallel
  linear's input gradient runs while the weight gradient is computed (Megatron-LM
  ``--async-tensor-model-parallel-allreduce``, Sept. 2021; Korthikanti et al. 2022 §6.2 credit it
  for full recompute costing 39 % rather than 33 %).
- ``sp_gather_overlap``: SP keeps only the sequence shard of a linear's input and all-gathers it
  again in the backward pass, overlapped with the input-gradient GEMM (Korthikanti et al. 2022
  §4.2.2). Off: that all-gather is exposed.
- ``grad_accum_fusion``: the weight-gradient GEMM accumulates into the fp32 main gradient
  (Megatron-LM ``--gradient-accumulation-fusion``, Feb. 2022). Off: ``main_grad.add_(grad)`` after
  every micro-batch reads and writes it through HBM.
- ``tp_comm_overlap``: TP all-gathers/reduce-scatters split into chunks and pipelined with the
  GEMMs, forward and backward (Transformer Engine userbuffers; NeMo ``tp_comm_overlap``,
  Megatron-Core ``--tp-comm-overlap``, Oct. 2023).
- ``tp_comm_overlap_backward``: whether ``tp_comm_overlap`` also covers the backward pass and
  replays. PyTorch's async TP (torch.compile's micro-pipelined all-gather-matmul and
  matmul-reduce-scatter, as torchtitan runs it) is announced as a forward-pass gain (up to
  29 % forward, ~8 % end to end: "[Distributed w/ TorchTitan] Introducing Async Tensor
  Parallelism in PyTorch", PyTorch dev-discuss, 2024); the torchtitan preset overlaps the
  forward pass only.
- ``selective_recompute``: what ``recompute: selective`` replays. ``attention``: the attention
  core (Korthikanti et al. 2022 §5). ``op-sac``: torch's op-level selective checkpointing as
  torchtitan configures it (``parallelize_llama.py``: save the outputs of ``aten.mm`` and SDPA
  except every second ``mm``, recompute everything else): half the block's GEMMs (all of them
  in FP8, whose ``_scaled_mm`` is not on the save list), every element-wise op, never the
  attention kernel.
- ``recompute_early_stop``: full recompute replays a layer's forward pass only until every
  tensor the backward pass needs is rebuilt, which leaves out the layer's last GEMM (the FFN's
  down projection, FC2) and what follows it. PyTorch's non-reentrant checkpoint (from
  PyTorch 2.1: ``torch.utils.checkpoint``, ``_enable_checkpoint_early_stop``, on by default)
  counts the tensors the forward pass saved and stops the replay once all are recomputed; a
  linear layer saves its input before its GEMM runs (the autograd kernels save inputs before
  they compute), so FC2's input is the last tensor and its GEMM never reruns. FSDP trainers
  wrap each block in that checkpoint (Composer with ``activation_checkpointing_reentrant:
  false``, torchtitan's full AC until August 2025). Megatron's and DeepSpeed's checkpoints
  replay the whole forward, and so does torchtitan since 25413d224 (2025-08-29), which passes
  ``early_stop=False`` (its ``activation_checkpoint.early_stop``, default off).
- ``overlap_grad_reduce`` / ``overlap_param_gather``: the data-parallel gradient reduction runs
  bucket by bucket during the backward pass of the last micro-batch, and the distributed
  optimizer's parameter all-gather during the next forward pass (Megatron-Core
  ``--overlap-grad-reduce`` Aug. 2023, ``--overlap-param-gather`` Nov. 2023; PyTorch DDP buckets,
  Li et al. 2020).
- ``overlap_p2p``: interleaved 1F1B overlaps its pipeline sends with compute
  (Megatron-Core ``--overlap-p2p-communication``).
- ``cp_overlap``: context parallelism's ring exchange of K/V runs under the attention kernel
  (Transformer Engine's ring attention).
- ``cp_torch_ring``: context parallelism is PyTorch's experimental ring attention
  (``torch/distributed/tensor/experimental/_attention.py``, Dec. 2024, as torchtitan 9dec370
  calls it through ``context_parallel``): the caller repeats K/V to the query head count
  before SDPA (torchtitan ``models/llama/model.py``: ``repeat_kv`` then
  ``F.scaled_dot_product_attention``), so the ring all-gathers K and V at the full width h,
  not the GQA width (rotate method ``allgather``, torchtitan's default,
  ``config_manager.py``); the backward re-gathers them and passes the accumulated dK/dV to
  the next rank at every one of its cp steps (``_templated_ring_attention_backward``:
  ``dkv_rotater`` is always ALL_TO_ALL, its buffers float32 under
  ``_cp_options.convert_to_f32 = True``) instead of one reduce-scatter.
- ``fsdp_prefetch``: ZeRO-3 / FSDP all-gathers the next layer's parameters while the current
  layer computes (Zhao et al. 2023, PyTorch FSDP §3.3 "implicit forward prefetching" and
  "backward prefetching"; DeepSpeed ZeRO-3 prefetch buckets).
- ``fsdp_backward_prefetch``: ``pre`` (FSDP BACKWARD_PRE, FSDP2's implicit prefetch): the next
  layer's backward gather is issued before this layer's gradient computation and hides under
  it. ``post`` (BACKWARD_POST, Composer's default and so llm-foundry's): it is issued after,
  so "the current reduce-scatter and the next gradient computation" overlap but the gather does
  not (PyTorch FSDP ``BackwardPrefetch`` documentation): every backward gather is exposed.
- ``zero3_regather_for_recompute``: with full recompute the replayed forward gathers the
  parameters again (DeepSpeed ZeRO-3 with Megatron checkpointing); FSDP reuses the backward
  gather (one unshard per layer per backward).
- ``zero2_per_layer``: ZeRO-2 (FSDP ``SHARD_GRAD_OP``) gathers each layer's flat parameter
  before its forward pass and reduce-scatters its gradient after its backward pass, one
  collective per FSDP unit like ZeRO-3 but with no backward re-gather (PyTorch FSDP1: the
  pre-forward unshard and post-backward reduce run per handle; ``SHARD_GRAD_OP`` only skips the
  reshard after forward, ``_should_free_in_backward`` frees after backward); off, ZeRO-2 reduces
  and gathers the whole stage in buckets (DeepSpeed, Megatron).
- ``grad_reduce_per_microbatch``: ZeRO-2/3 reduce-scatter gradients after every micro-batch
  (DeepSpeed ZeRO-2/3, FSDP without ``no_sync``); otherwise once per iteration.
- ``zero3_gathers_per_layer``: collectives per layer and pass for ZeRO-3 parameters: FSDP
  flattens a layer into one parameter (1); DeepSpeed ZeRO-3 gathers per sub-module.
- ``zero3_list_collectives``: DeepSpeed's ZeRO-3 of 2021 gathers each parameter with
  ``torch.distributed.all_gather(partitions, ...)`` into a list of per-rank views of a
  zero-filled buffer (``torch.zeros``) and reduce-scatters gradients from a list of per-rank
  views (``partition_parameters.py`` ``_allgather_param`` / ``_reduce_scatter_gradient`` at
  c83e49f, April 2021); PyTorch's ``ProcessGroupNCCL`` runs list collectives through a flat
  buffer (``flatten_for_scatter_gather``) and copies into the outputs after the all-gather
  and from the inputs before the reduce-scatter, one ``copy_`` per rank's view, on the
  collective's stream, so waited on with it: the zero fill (``ZERO3_LIST_ZERO_FILL``), then d
  copies that take the longer of their bytes (``ZERO3_LIST_VIEW_COPIES`` passes of the tensor
  through HBM) and d kernel launches (``KERNEL_LAUNCH_S`` each, a floor). At a thousand ranks
  the launches dominate: a view is a fraction of a megabyte. Later DeepSpeed and FSDP gather
  into one flat tensor (``_all_gather_base``).
- ``zero3_rank_loop``: DeepSpeed's ZeRO-3 of 2021 builds each all-gather's output list in a
  Python loop over the group's d ranks (``_allgather_param``: ``flat_tensor.narrow(...)`` and
  ``torch.distributed.get_rank(group=...)`` per rank, v0.3.13 to v0.3.16), right after a
  ``torch.cuda.synchronize()``, so the GPU waits out d eager tensor operations of host time
  per gathered tensor. Priced at one operation per rank, ``EAGER_OP_HOST_S``: PyTorch's own
  operator micro-benchmark (pytorch/pytorch bab87e4b, PR #32194, Jan. 2020) times an eager
  ``split`` of two views at 2.26 µs (3.33-3.47 µs before that change, the same on CPU and CUDA
  tensors: the cost is the host's). The ``get_rank`` call and the list's bookkeeping are not
  counted, so it is a floor. Gradients' reduce-scatter loop is not priced: it runs without a
  synchronisation, while the GPU still has queued work.
- ``zero3_persistence_threshold``: ZeRO-3 parameters with fewer elements than this stay
  gathered (DeepSpeed's ``stage3_param_persistence_threshold``, default 100000 from v0.3.12
  to today: ``deepspeed/runtime/zero/constants.py``); ``stage3.py`` ``persistent_parameters``
  marks them ``ds_persist``, ``release_sub_module`` never re-partitions them and they are
  gathered once after the optimizer step, so only the larger tensors are all-gathered per
  layer and pass. Their gradients are still reduce-scattered one tensor at a time
  (``create_reduce_and_remove_grad_hooks`` hooks every parameter). 0: every tensor gathered.
- ``pp_scatter_gather``: pipeline sends of 1/t of the activation, all-gathered over the TP
  group on receipt: Megatron's scatter/gather (SC21 §4.1), and DeepSpeed's pipeline engine with
  TP > 1 (``is_pipe_partitioned = is_model_parallel`` since its first release, Sept. 2020:
  ``PartitionedTensor`` sends the local part, ``part_input.full()`` all-gathers it;
  ``deepspeed/runtime/pipe/engine.py``; Megatron-DeepSpeed turns it off only under sequence
  parallelism, which already sends shards).
- ``pp_scatter_gather_grads``: the gradients sent back are scattered too (Megatron;
  DeepSpeed from v0.5.4, PR #1407 "Big science related changes", Sept. 2021:
  ``is_grad_partitioned = is_model_parallel``). Off: sent whole (DeepSpeed before, when
  ``is_grad_partitioned = False``).
- ``pp_regather_output``: DeepSpeed frees the data of the output it sent
  (``first_output.data = torch.zeros(1)``) and all-gathers it again over the TP group before
  the stage's backward pass (``part_output.full()`` in ``_exec_backward_pass``, or in
  ``_exec_recv_grads`` while gradients were sent whole): one more all-gather per micro-batch.
- ``pp_blocking_p2p``: each pipeline send and receive is its own blocking instruction, so a
  stage waits out four transfers per micro-batch (DeepSpeed's pipeline engine: ``TrainSchedule``
  issues ``RecvActivation``, ``SendActivation``, ``RecvGrad`` and ``SendGrad`` one after the
  other, ``deepspeed/runtime/pipe/schedule.py``); Megatron's 1F1B pairs each send with a
  receive (``send_forward_recv_backward``): two.
- ``pp_grad_reduce_after_schedule``: with a pipeline (p > 1) the data-parallel gradient
  reduction starts only after the last micro-batch's backward pass, so none of it hides
  (DeepSpeed's pipeline engine: ``ReduceTiedGrads``, ``ReduceGrads`` and ``OptimizerStep`` are
  appended after the schedule's last step).
- ``sp_regather_saved_shard``: with sequence parallelism the column-parallel layers keep only
  their input's sequence shard and all-gather it again for the weight gradient (Megatron-LM,
  Korthikanti et al. 2022 §4.2.2); DTensor TP (torchtitan, PyTorch trainers) saves the gathered
  input, so the backward pass gathers only what recomputation replays.
- ``tp_fp8_all_gather``: in FP8 training with sequence parallelism, a block's input and a
  row-parallel layer's output gradient are cast to FP8 on the sequence shard and all-gathered as
  1-byte elements; the reduce-scatters stay 16-bit (torchao ``Float8ColwiseParallel``,
  ``Float8RowwiseParallel`` and ``PrepareFloat8ModuleInput``, tensorwise scaling, which
  torchtitan applies to every block: the cast happens "before the all-gather").
- ``attention_kernel``: ``fused`` (Transformer Engine / cuDNN fused attention, FlashAttention-3:
  kernels written for the GPU generation) or ``flash2`` (FlashAttention-2, as PyTorch SDPA and
  the flash-attn 2 package run it). FA2 reaches about half of what FA3/cuDNN reach on Hopper
  (Shah et al. 2024, FlashAttention-3, §4.1: ~35 % vs ~75 % of the H100 peak); the GPU side of
  that factor is ``ClusterSpec.flash2_efficiency``. ``triton``: FlashAttention written in
  Triton (``flash_attn_triton.py`` on the pre-MLIR Triton fork: llm-foundry's ``attn_impl:
  triton``, the default of its benchmark script ``submit_benchmarks.py`` until March 2024), which
  FA2 outruns 1.3-1.5x forward and about 2x backward (Dao 2023, FlashAttention-2, §4.1):
  ``estimator.compute.TRITON_FLASH_*_SLOWDOWN`` on top of the GPU's FA2 efficiency.
- ``grad_reduce_fp32``: the trainer reduces gradients over the data-parallel group in fp32
  unless the request names a ``grad_reduce_precision`` (torchtitan: FSDP2's
  ``MixedPrecisionPolicy(reduce_dtype=...)`` from ``training.mixed_precision_reduce``, whose only
  choice is ``float32``: ``torchtitan/config_manager.py`` at 9dec370 (2024-12) and 820504e
  (2025-06)); off, gradients travel in the training precision.
- ``fused_elementwise``: layer norms, RoPE and the gated activation run as fused kernels
  (Megatron/TE fused kernels, ``torch.compile``); off, eager PyTorch moves them through HBM once
  per elementary op (``estimator.compute.EAGER_EXTRA_PASSES``).
- ``bf16_optimizer``: DeepSpeed's ``BF16_Optimizer`` (DeepSpeed PR #1801, April 2022, the
  ``olruwase/bf16-updates`` branch BLOOM trained on; ``deepspeed/runtime/bf16_optimizer.py`` and
  ``pipe/engine.py`` at 56c522386): with bf16 weights it is the ZeRO-1 of the pipeline engine.
  It accumulates fp32 gradients for the whole stage, all-reduces them (not a reduce-scatter) over
  the DP group in the communication dtype, bf16 (``_bf16_reduce_grads`` ->
  ``buffered_allreduce_fallback``), steps Adam on its 1/d shard and all-gathers the bf16
  weights (``all_gather_dp_groups``); the tied embedding's gradient is all-reduced in fp32
  (``_exec_reduce_tied_grads`` reduces ``weight._hp_grad``). The all-reduce buckets copy the
  whole fp32 gradient through HBM (flatten 8 B, cast 6 B, scale 4 B, copy back 6 B, unflatten
  8 B per parameter); the norm reads it (4 B) and zeroing writes it (4 B) over the whole stage,
  not the shard (``BF16_OPTIMIZER_WHOLE_BYTES``). After every micro-batch's backward pass it
  adds the bf16 gradient to the fp32 one through an fp32 temporary
  (``hp_grad.add_(lp.grad.to(fp32))``: 18 B per parameter, ``BF16_OPTIMIZER_ACCUMULATION_BYTES``).
- ``compute_efficiency``: the speed of the framework's compute (GEMMs, attention, element-wise
  work) relative to the fitted roofline: every compute operation takes 1/compute_efficiency of
  the time the GPU family's fitted constants give (peak and HBM bandwidth both scaled). 1 for
  every preset; an override for a trainer known to run its kernels slower or faster.
- ``layer_host_s``: host (CPU) time per transformer layer and micro-batch, forward and backward
  (a full replay adds the forward's share, a third), that adds to the layer's own work: the
  GPU waits it out because the host does not run ahead of it. Megatron-DeepSpeed is such a
  trainer: BigScience's log book of the BLOOM benchmarks found that ``CUDA_LAUNCH_BLOCKING=1``,
  which makes every kernel launch wait for the kernel, "surprisingly has no impact on this
  framework at this scale. Normally, it should make things much slower as it makes CUDA ops
  synchronous" (``bigscience-workshop/bigscience`` ``train/tr11-176B-ml/chronicles-prequel.md``
  at 053adaf, "Hanging Issue"), which is what a trainer whose host and GPU already take turns
  shows; and its micro-batch pairs cost the same per micro-batch at twice the tokens (02-28
  "Rebalancing layers": 102.03 s at micro-batch 2, 102.27 s at 4, the same layout and batch).
  The DeepSpeed presets carry ``DEEPSPEED_LAYER_HOST_S``, fitted by ``commest validate`` on
  those benchmarks (the BLOOM prequel rows) and predicting every other DeepSpeed run out of
  sample (README "Accuracy"); it replaces the compute speed those presets carried before (a
  shortfall of 11 % with no mechanism named), which the same rows no longer ask for. Reported
  in the breakdown term ``host``. The data-parallel stream's overlap windows do not widen by
  it. 0: not priced.
- ``moe_layer_host_s``: host (CPU) time to issue one MoE layer's forward and backward pass for
  one micro-batch when the layer runs eagerly; the layer takes at least that long, the GPU
  waiting out what its own work leaves (a full replay adds the forward's share, a third, as the
  forward issues a third of the GEMMs). A Megatron-Core MoE layer launches tens of kernels per
  expert group and module (router, permutation, grouped GEMMs, dispatcher) and its token
  dispatcher waits on the GPU for the tokens per expert, so the host cannot run ahead: NVIDIA
  measured Qwen3-30B-A3B (128 experts of 768, h 2048) 22 % faster once its attention, router and
  dispatcher preprocessing were captured in CUDA graphs (Megatron-Bridge
  ``docs/training/cuda-graphs.md`` at 2f3ecca48, "Measured Results": 623 -> 484 ms, TP 2, PP 2,
  EP 4). The Megatron-Core presets carry ``MEGATRON_MOE_LAYER_HOST_S``, fitted by
  ``commest validate`` on the eager MoE runs (Megatron-LM's BF16 Qwen3-30B-A3B recipe and
  Megatron-Bridge's FP8 runs of that model); a wide layer's own work is longer than that and
  never meets the floor. 0: not priced.
- ``cuda_graphs``: the MoE layers' router and dispatcher preprocessing (or more: attention, the
  whole iteration) run as captured CUDA graphs (Megatron-Core ``cuda_graph_impl``), so
  ``moe_layer_host_s`` does not apply. A partial capture still leaves host work outside the
  graphs, which is not priced.
- ``fp8_current_scaling``: FP8 scales come from each tensor's own amax (Transformer Engine's
  ``Float8CurrentScaling``, Megatron's ``--fp8-recipe tensorwise``, Megatron-Bridge's
  ``fp8_cs``), not from an amax history (delayed scaling, Megatron's default). TE's grouped
  expert GEMMs fuse the delayed-scaling casts of all local experts into one multi-tensor kernel,
  but quantize each expert's tensor on its own under current scaling, four kernels each
  (``FP8_CURRENT_SCALING_QUANTIZE_KERNELS``): an eager MoE layer's host time grows by those
  launches, per local expert, for the two GEMM inputs quantized forward (again in a full
  replay) and the two output gradients backward (``FP8_EXPERT_TENSORS_FORWARD`` / ``_BACKWARD``).
- ``ep_comm_overlap``: Megatron-Core's expert-parallel all-to-all overlap
  (``--overlap-moe-expert-parallel-comm``, Megatron-Bridge's ``moe_a2a_overlap``): the dispatch
  and combine of one micro-batch run under another micro-batch's compute, so with two or more
  micro-batches a share of them, ``EP_OVERLAP_HIDDEN_SHARE``, is hidden (on the link in full).
  The share is NVIDIA's own measurement, not a fit: its Nsight profile of Qwen3-30B-A3B on 16
  H100s (EP 16, HybridEP, BF16) found 36.55 % of the step's communication concurrent with GEMMs
  or attention with the overlap on and 0.11 % with it off. How much a layout can hide depends on
  its compute per micro-batch, which one measurement cannot say.
- ``fp8_param_gather``: in FP8 training the parameters are kept as FP8 for the GEMMs and the
  data-parallel parameter all-gather moves them as 1-byte elements: the distributed optimizer's
  gather after the step (Megatron's ``--fp8-param-gather``, NeMo's ``fp8_params``; Transformer
  Engine's ``fp8_model_init``) and ZeRO-3's per-layer gathers (torchao's
  ``enable_fsdp_float8_all_gather``). Gradients stay 16-bit (or fp32). No effect in 16-bit
  training.
- ``optimizer_bytes_per_parameter``: HBM bytes the optimizer step moves per parameter it owns
  (ours, counted from Megatron's mixed-precision optimizer): fused Adam reads the fp32
  gradient, master weight, m and v (16 B) and writes master, m, v (12 B); copying the master
  weight to the 16-bit model weight reads 4 and writes 2 B; gradient-norm clipping reads the
  gradient (4 B) and zeroing the gradient buffer writes it (4 B): 42 B. FP16 training adds the
  loss-scale unscale and overflow check (read and write the gradient: 8 B; see
  ``FP16_UNSCALE_BYTES``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from estimator.errors import NotFoundError, ValidationError

__all__ = [
    "DEEPSPEED_LAYER_HOST_S",
    "EAGER_OP_HOST_S",
    "EP_OVERLAP_HIDDEN_SHARE",
    "FP8_CURRENT_SCALING_QUANTIZE_KERNELS",
    "FP8_EXPERT_TENSORS_BACKWARD",
    "FP8_EXPERT_TENSORS_FORWARD",
    "FRAMEWORK_FLAGS",
    "FRAMEWORK_NAMES",
    "FRAMEWORK_PRESETS",
    "KERNEL_LAUNCH_S",
    "MEGATRON_MOE_LAYER_HOST_S",
    "PRESET_TRAINER_KINDS",
    "TRAINER_KINDS",
    "Framework",
    "TrainerKind",
    "framework_preset",
    "resolve_framework",
    "trainer_kind",
]

# Megatron-DeepSpeed's (2021-22) host time per layer and micro-batch, forward and backward
# (layer_host_s above): fitted by `commest validate` on its declared training family
# "bloom_sweep" (BigScience's February 2022 benchmark sweep); a test checks it equals what the
# report fits today.
DEEPSPEED_LAYER_HOST_S = 0.007195
# Host time of one eager Megatron-Core MoE layer, forward and backward, per micro-batch
# (moe_layer_host_s above): fitted by `commest validate` on its declared training family
# "moe_eager_host" (the eager MoE runs, no CUDA graphs; Qwen3-30B-A3B's inform it: Megatron-LM's
# BF16 recipe and Megatron-Bridge's FP8 runs); a test checks it equals what the report fits today.
MEGATRON_MOE_LAYER_HOST_S = 0.008247
# Of a layer's host time (moe_layer_host_s, layer_host_s), the forward pass's share (a full replay
# issues it again): a third, as its GEMMs are (the backward issues the input- and weight-gradient
# GEMMs).
HOST_FORWARD_SHARE = 1.0 / 3.0
# Of the expert all-to-alls' time, the share Megatron-Core's EP overlap hides (ep_comm_overlap):
# Megatron-Bridge skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md @067f987d, "Measured
# Evidence" > "HybridEP production-shape validation": Nsight on rank 0, "communication hidden by
# compute 36.55 %" with the overlap on, 0.11 % with it off.
EP_OVERLAP_HIDDEN_SHARE = 0.3655
# Fused Adam (28 B), master-to-model copy (6 B), clipping norm (4 B), zeroing (4 B): see above.
ADAM_BYTES_PER_PARAMETER = 42.0
# FP16 only: unscale the gradient by the loss scale and check it for inf/NaN (read + write 4 B).
FP16_UNSCALE_BYTES = 8.0
# BF16_Optimizer: HBM bytes per parameter of the whole stage (not the owned shard) each step:
# the all-reduce bucket copies (32 B), the gradient norm (4 B) and zeroing the gradient (4 B).
BF16_OPTIMIZER_WHOLE_BYTES = 40.0
# BF16_Optimizer.update_hp_grads after every micro-batch's backward pass:
# ``hp_grad.add_(lp.grad.to(fp32))``: the cast reads 2 B and writes a 4 B temporary, the add
# reads 4 + 4 B and writes 4 B (bf16_optimizer.py at DeepSpeed 56c522386).
BF16_OPTIMIZER_ACCUMULATION_BYTES = 18.0
# The clipping norm and zeroing bytes of ADAM_BYTES_PER_PARAMETER that BF16_Optimizer moves over
# the whole stage instead of the owned shard.
BF16_OPTIMIZER_SHARD_EXCLUDED_BYTES = 8.0
# Host time of one eager PyTorch tensor operation (zero3_rank_loop): an eager ``split`` into two
# views in PyTorch's operator micro-benchmark (pytorch/pytorch bab87e4b, PR #32194).
EAGER_OP_HOST_S = 2.26e-6
# ZeRO-3 with list-based collectives (zero3_list_collectives), as multiples of the bytes of one
# gathered tensor: the gather's zero-filled destination (write 1); PyTorch copying the flat NCCL
# buffer into the per-rank output views after a gather, or the per-rank input views into it
# before a reduce-scatter (read 1, write 1), one ``copy_`` per rank.
ZERO3_LIST_ZERO_FILL = 1.0
ZERO3_LIST_VIEW_COPIES = 2.0
# The least time a kernel launch takes, back to back: the launch overhead of null kernels is
# "about 3 microseconds with recent hardware and software" (N. Juffa, NVIDIA developer forums,
# "Too much time for kernel launch latency", Nov. 2022). A floor for each per-rank copy.
KERNEL_LAUNCH_S = 3.0e-6
# Kernels that quantize one tensor under FP8 current scaling (Transformer Engine v2.8 @ 40c69e7,
# pytorch/csrc/quantizer.cpp 497-536: zero the amax, compute it, compute the scale from it, cast
# and transpose), issued per local expert by GroupedLinear (pytorch/csrc/extensions/cast.cpp
# 116-148: the fused multi-tensor cast only serves delayed scaling; TE 2.4-2.14 alike).
FP8_CURRENT_SCALING_QUANTIZE_KERNELS = 4
# Tensors quantized per local expert of a MoE layer and micro-batch: forward, the inputs of FC1
# and FC2 (grouped_linear.py 126-127, each GroupedLinear call); backward, their output gradients
# (grouped_linear.py 304-310). The FP8 weights are cached across micro-batches (or FP8 already).
FP8_EXPERT_TENSORS_FORWARD = 2
FP8_EXPERT_TENSORS_BACKWARD = 2
# Unfused gradient accumulation (main_grad.add_(grad)): read 4 + 2, write 4 bytes per parameter.
UNFUSED_ACCUMULATION_BYTES = 10.0
# Fused (wgrad GEMM epilogue accumulates into fp32): an fp32 read-modify-write (8 B) instead of a
# 16-bit write (2 B): 6 more bytes per parameter and micro-batch.
FUSED_ACCUMULATION_BYTES = 6.0


@dataclass(frozen=True, slots=True)
class Framework:
    """What the training software overlaps, fuses and shards (module docstring for sources)."""

    name: str
    description: str
    tp_overlap_wgrad: bool = True
    sp_gather_overlap: bool = True
    grad_accum_fusion: bool = True
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    overlap_p2p: bool = False
    cp_overlap: bool = True
    cp_torch_ring: bool = False
    fsdp_prefetch: bool = True
    zero3_regather_for_recompute: bool = False
    grad_reduce_per_microbatch: bool = True
    pp_scatter_gather: bool = True
    pp_scatter_gather_grads: bool = True
    pp_regather_output: bool = False
    pp_blocking_p2p: bool = False
    pp_grad_reduce_after_schedule: bool = False
    bf16_optimizer: bool = False
    tp_fp8_all_gather: bool = False
    sp_regather_saved_shard: bool = True
    zero3_gathers_per_layer: int = 1
    zero3_list_collectives: bool = False
    zero3_rank_loop: bool = False
    zero3_persistence_threshold: int = 0
    zero2_per_layer: bool = False
    optimizer_bytes_per_parameter: float = ADAM_BYTES_PER_PARAMETER
    attention_kernel: str = "fused"
    grad_reduce_fp32: bool = False
    fused_elementwise: bool = True
    tp_comm_overlap_backward: bool = True
    selective_recompute: str = "attention"
    fsdp_backward_prefetch: str = "pre"
    recompute_early_stop: bool = False
    compute_efficiency: float = 1.0
    layer_host_s: float = 0.0
    moe_layer_host_s: float = 0.0
    cuda_graphs: bool = False
    fp8_current_scaling: bool = False
    ep_comm_overlap: bool = False
    fp8_param_gather: bool = False

    def __post_init__(self) -> None:
        if self.fsdp_backward_prefetch not in BACKWARD_PREFETCH:
            raise ValidationError(
                "training.framework.fsdp_backward_prefetch",
                self.fsdp_backward_prefetch,
                f"must be one of {', '.join(BACKWARD_PREFETCH)}",
            )
        if self.selective_recompute not in SELECTIVE_RECOMPUTE:
            raise ValidationError(
                "training.framework.selective_recompute",
                self.selective_recompute,
                f"must be one of {', '.join(SELECTIVE_RECOMPUTE)}",
            )
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ValidationError(
                "training.framework.attention_kernel",
                self.attention_kernel,
                f"must be one of {', '.join(ATTENTION_KERNELS)}",
            )
        if self.zero3_persistence_threshold < 0:
            raise ValidationError(
                "training.framework.zero3_persistence_threshold",
                self.zero3_persistence_threshold,
                "must be a whole number >= 0",
            )
        if self.zero3_gathers_per_layer < 1:
            raise ValidationError(
                "training.framework.zero3_gathers_per_layer",
                self.zero3_gathers_per_layer,
                "must be a whole number >= 1",
            )
        if not 0.0 < self.compute_efficiency <= 2.0:
            raise ValidationError(
                "training.framework.compute_efficiency",
                self.compute_efficiency,
                "must be a number > 0 and <= 2 (1: the fitted roofline's speed)",
            )
        if not 0.0 <= self.layer_host_s <= 1.0:
            raise ValidationError(
                "training.framework.layer_host_s",
                self.layer_host_s,
                "must be a number of seconds >= 0 and <= 1 (0: host time not priced)",
            )
        if not 0.0 <= self.moe_layer_host_s <= 1.0:
            raise ValidationError(
                "training.framework.moe_layer_host_s",
                self.moe_layer_host_s,
                "must be a number of seconds >= 0 and <= 1 (0: host time not priced)",
            )
        if not self.optimizer_bytes_per_parameter >= 0:
            raise ValidationError(
                "training.framework.optimizer_bytes_per_parameter",
                self.optimizer_bytes_per_parameter,
                "must be a number >= 0",
            )

    @property
    def accumulation_bytes_per_parameter(self) -> float:
        """HBM bytes per parameter and micro-batch to accumulate the weight gradient."""
        return FUSED_ACCUMULATION_BYTES if self.grad_accum_fusion else UNFUSED_ACCUMULATION_BYTES

    def replace(self, **flags: bool | int | float | str) -> Framework:
        """The same framework with some flags overridden (unknown names are an error)."""
        unknown = sorted(set(flags) - set(FRAMEWORK_FLAGS))
        if unknown:
            raise ValidationError(
                "training.framework_overrides",
                unknown,
                f"unknown flag(s); known: {', '.join(FRAMEWORK_FLAGS)}",
            )
        for key, value in flags.items():
            expected = type(getattr(self, key))
            if expected is bool and not isinstance(value, bool):
                raise ValidationError(
                    f"training.framework_overrides.{key}", value, "must be a boolean"
                )
        return dataclasses.replace(self, **flags)  # type: ignore[arg-type]

    def flags(self) -> dict[str, bool | int | float | str]:
        """Every behaviour flag with its value."""
        return {name: getattr(self, name) for name in FRAMEWORK_FLAGS}

    def describe(self) -> str:
        """One line for ``assumptions``: the preset and every flag."""
        return _describe(self)


@functools.lru_cache(maxsize=64)
def _describe(fw: Framework) -> str:
    """``Framework.describe``, once per distinct framework (every estimate asks for it; a
    frozen dataclass hashes by value)."""
    flags = fw.flags()
    on = [k for k, v in flags.items() if v is True]
    off = [k for k, v in flags.items() if v is False]
    return (
        f"framework={fw.name} ({fw.description}): on: {', '.join(on) or 'none'}; "
        f"off: {', '.join(off) or 'none'}; ZeRO-3 gathers per layer "
        f"{fw.zero3_gathers_per_layer}"
        + (
            f" (tensors under {fw.zero3_persistence_threshold:,} elements stay gathered)"
            if fw.zero3_persistence_threshold
            else ""
        )
        + f"; optimizer step "
        f"{fw.optimizer_bytes_per_parameter:g} B/parameter through HBM; gradient "
        f"accumulation {fw.accumulation_bytes_per_parameter:g} B/parameter per micro-batch; "
        f"attention kernel {fw.attention_kernel}; selective recompute "
        f"{fw.selective_recompute}"
        + (
            f"; compute at {fw.compute_efficiency:g} of the fitted roofline's speed"
            if fw.compute_efficiency != 1.0
            else ""
        )
        + (
            f"; every layer adds {fw.layer_host_s * 1e3:g} ms of host time per micro-batch "
            "(forward and backward; the GPU waits on the host)"
            if fw.layer_host_s
            else ""
        )
        + (
            f"; an eager MoE layer takes at least {fw.moe_layer_host_s * 1e3:g} ms of host time "
            "per micro-batch (forward and backward)"
            + (
                ", more under FP8 current scaling (each local expert's tensors quantized by "
                "kernels of their own)"
                if fw.fp8_current_scaling
                else ""
            )
            if fw.moe_layer_host_s and not fw.cuda_graphs
            else ""
        )
        + (
            "; with two or more micro-batches the expert all-to-alls overlap another micro-batch's "
            f"compute, {EP_OVERLAP_HIDDEN_SHARE * 100:.2f} % of them hidden (NVIDIA's Nsight of "
            "one MoE run)"
            if fw.ep_comm_overlap
            else ""
        )
    )


ATTENTION_KERNELS = ("fused", "flash2", "triton")
BACKWARD_PREFETCH = ("pre", "post")
SELECTIVE_RECOMPUTE = ("attention", "op-sac")

FRAMEWORK_FLAGS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Framework) if f.name not in ("name", "description")
)

_MEGATRON_2022 = Framework(
    name="megatron-lm-2022",
    description=(
        "Megatron-LM Sept. 2021 - mid 2023: async TP all-reduce under the weight-gradient GEMM, "
        "gradient-accumulation fusion; no data-parallel overlap"
    ),
    grad_reduce_per_microbatch=False,
)

_PRESETS = (
    dataclasses.replace(
        _MEGATRON_2022,
        name="megatron-lm-2021",
        description=(
            "Megatron-LM as in SC21 (Narayanan et al. 2021): no TP overlap, gradients "
            "accumulated by an extra pass per micro-batch, no data-parallel overlap"
        ),
        tp_overlap_wgrad=False,
        sp_gather_overlap=False,
        grad_accum_fusion=False,
        cp_overlap=False,
    ),
    _MEGATRON_2022,
    dataclasses.replace(
        _MEGATRON_2022,
        name="megatron-lm",
        description=(
            "Megatron-LM / Megatron-Core since mid 2023 with its default flags: as 2022, plus "
            "p2p overlap in the interleaved schedule; DP overlap and TP comm overlap are opt-in; "
            "MoE layers eager (no CUDA graphs)"
        ),
        overlap_p2p=True,
        moe_layer_host_s=MEGATRON_MOE_LAYER_HOST_S,
    ),
    dataclasses.replace(
        _MEGATRON_2022,
        name="nemo",
        description=(
            "NeMo / Megatron-Bridge performance recipes (Megatron-Core): TP communication "
            "overlap, overlapped gradient reduce-scatter and parameter all-gather, p2p overlap; "
            "MoE layers eager (no CUDA graphs)"
        ),
        tp_comm_overlap=True,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        overlap_p2p=True,
        moe_layer_host_s=MEGATRON_MOE_LAYER_HOST_S,
    ),
    dataclasses.replace(
        _MEGATRON_2022,
        name="deepspeed",
        description=(
            "DeepSpeed (ZeRO engine and pipeline engine, Megatron-DeepSpeed): no TP overlap, "
            "partitioned pipeline sends (1/t, all-gathered over TP; the sent output re-gathered "
            "for its backward pass), each send and receive blocking, with a "
            "pipeline the gradient reduction after the schedule, ZeRO-3 gathers per "
            "sub-module with prefetch, ZeRO-2/3 gradients reduced every micro-batch; host time "
            "per layer and micro-batch fitted on Megatron-DeepSpeed runs of 2022 (layer_host_s)"
        ),
        tp_overlap_wgrad=False,
        sp_gather_overlap=False,
        grad_accum_fusion=False,
        cp_overlap=False,
        overlap_grad_reduce=True,
        pp_regather_output=True,
        pp_blocking_p2p=True,
        pp_grad_reduce_after_schedule=True,
        bf16_optimizer=True,
        zero3_regather_for_recompute=True,
        grad_reduce_per_microbatch=True,
        zero3_gathers_per_layer=6,
        layer_host_s=DEEPSPEED_LAYER_HOST_S,
    ),
    dataclasses.replace(
        _MEGATRON_2022,
        name="deepspeed-2021",
        description=(
            "DeepSpeed as of mid 2021: ZeRO-3 gathers every parameter tensor of 100,000 "
            "elements or more on its own (smaller ones stay gathered) and synchronously (each "
            "all-gather waited on the previous one: DeepSpeed issue #1069, fixed by PR #1188, "
            "June 2021), so nothing overlaps; pipeline gradients sent whole "
            "(partitioned from v0.5.4, Sept. 2021); otherwise as deepspeed"
        ),
        tp_overlap_wgrad=False,
        sp_gather_overlap=False,
        grad_accum_fusion=False,
        cp_overlap=False,
        overlap_grad_reduce=False,
        pp_scatter_gather_grads=False,
        pp_regather_output=True,
        pp_blocking_p2p=True,
        pp_grad_reduce_after_schedule=True,
        fsdp_prefetch=False,
        zero3_regather_for_recompute=True,
        grad_reduce_per_microbatch=True,
        zero3_gathers_per_layer=12,
        zero3_list_collectives=True,
        zero3_rank_loop=True,
        # DeepSpeed v0.3.13 constants.py ZERO_OPTIMIZATION_PARAM_PERSISTENCE_THRESHOLD_DEFAULT;
        # the DeepSpeedExamples Megatron ZeRO-3 configs of March/April 2021 (2cd968f, bdf8e59)
        # misspell the key ("persitance"/"persitence"), so the default applies there too.
        zero3_persistence_threshold=100_000,
        layer_host_s=DEEPSPEED_LAYER_HOST_S,
    ),
    _FSDP := dataclasses.replace(
        _MEGATRON_2022,
        name="fsdp",
        description=(
            "PyTorch FSDP trainers (Zhao et al. 2023; torchtitan, llm-foundry): one flat "
            "parameter per layer, forward and backward prefetch, gradients reduce-scattered "
            "every micro-batch, DDP-style overlap of the reduction with the backward pass; "
            "full recompute stops before each layer's last GEMM (PyTorch >= 2.1 checkpoint)"
        ),
        tp_overlap_wgrad=False,
        sp_gather_overlap=False,
        grad_accum_fusion=False,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        grad_reduce_per_microbatch=True,
        zero2_per_layer=True,
        attention_kernel="flash2",
        fused_elementwise=False,
        sp_regather_saved_shard=False,
        recompute_early_stop=True,
    ),
    dataclasses.replace(
        _FSDP,
        name="llm-foundry",
        description=(
            "MosaicML llm-foundry on Composer (PyTorch FSDP1): as fsdp, with Composer's "
            "default backward prefetch BACKWARD_POST (the next layer's gather issued after "
            "this layer's gradients: only the reduce-scatter overlaps compute)"
        ),
        fsdp_backward_prefetch="post",
    ),
    dataclasses.replace(
        _FSDP,
        name="torchtitan",
        description=(
            "torchtitan (PyTorch FSDP2 + DTensor TP/SP): as fsdp; selective recompute is "
            "torch's op-level SAC (every other GEMM and all element-wise ops replayed, "
            "attention saved); async TP overlaps the forward pass's TP collectives only; "
            "float8 TP all-gathers FP8 elements; gradients reduced in fp32; CP is PyTorch's "
            "ring attention (K/V gathered at the query head count, fp32 dK/dV passed each step); "
            "full recompute replays the whole block (early_stop=False since Aug. 2025)"
        ),
        tp_comm_overlap_backward=False,
        selective_recompute="op-sac",
        tp_fp8_all_gather=True,
        grad_reduce_fp32=True,
        cp_torch_ring=True,
        # torchtitan 25413d224 (2025-08-29) passes early_stop=False to every checkpoint wrapper
        # (job_config ``activation_checkpoint.early_stop``, default False); before, torch's
        # default (on) applied.
        recompute_early_stop=False,
    ),
)

FRAMEWORK_PRESETS: dict[str, Framework] = {f.name: f for f in _PRESETS}
# Other names for the same software, as the validation data and users spell them.
_ALIASES = {
    "megatron-core": "megatron-lm",
    "mcore": "megatron-lm",
    "megatron-bridge": "nemo",
    "megatron-deepspeed": "deepspeed",
}

DEFAULT_FRAMEWORK = "megatron-lm"
# Every name a request may give: the presets and their other spellings.
FRAMEWORK_NAMES: tuple[str, ...] = tuple(sorted({*FRAMEWORK_PRESETS, *_ALIASES}))


def framework_preset(name: str) -> Framework:
    """The named preset; NotFoundError lists the known names."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    preset = FRAMEWORK_PRESETS.get(key)
    if preset is None:
        known = sorted({*FRAMEWORK_PRESETS, *_ALIASES})
        raise NotFoundError(
            f"unknown framework preset {name!r}; known: {', '.join(known)}", key=name, known=known
        )
    return preset


def resolve_framework(name: str, overrides: Mapping[str, bool | int | float | str]) -> Framework:
    """A preset with some flags overridden; a ValidationError names an unknown preset or flag."""
    try:
        preset = framework_preset(name)
    except NotFoundError:
        raise ValidationError(
            "training.framework", name, f"unknown preset; known: {', '.join(FRAMEWORK_NAMES)}"
        ) from None
    return preset.replace(**overrides) if overrides else preset


# The three kinds of trainer the validation report scores separately (README "Accuracy").
TrainerKind = Literal["megatron-style", "fsdp-style", "deepspeed"]
TRAINER_KINDS: tuple[TrainerKind, ...] = get_args(TrainerKind)
# Every preset's kind, named one by one (a test checks that no preset is left out).
PRESET_TRAINER_KINDS: dict[str, TrainerKind] = {
    "megatron-lm-2021": "megatron-style",
    "megatron-lm-2022": "megatron-style",
    "megatron-lm": "megatron-style",
    "nemo": "megatron-style",
    "deepspeed": "deepspeed",
    "deepspeed-2021": "deepspeed",
    "fsdp": "fsdp-style",
    "llm-foundry": "fsdp-style",
    "torchtitan": "fsdp-style",
}


def trainer_kind(framework_name: str) -> TrainerKind | None:
    """The kind of trainer a preset is: ``megatron-style`` (Megatron-LM, NeMo), ``fsdp-style``
    (PyTorch FSDP trainers) or ``deepspeed``; None for a framework that is not a preset."""
    return PRESET_TRAINER_KINDS.get(framework_name)
