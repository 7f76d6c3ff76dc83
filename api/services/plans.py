"""Plans: every valid layout of a GPU count, evaluated in one pass and ranked."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from api.scenario import ResolvedCluster, cluster_spec, figures, framework, model_spec
from api.schemas import (
    ClusterOut,
    PlanEntryOut,
    PlanLayoutOut,
    PlanRequest,
    PlanResponse,
    finite_answer,
)
from api.snapshots import Profiles
from estimator import TERMS, Recompute, TrainingSpec
from estimator.errors import ValidationError
from estimator.specs import Fidelity, ModelSpec, Precision
from estimator.sweep import (
    COMMUNICATION_TERMS,
    SweepResult,
    concat_results,
    enumerate_layouts,
    evaluate_layouts,
    rank,
)

#: Context parallelism is proposed from this sequence length up (docs/design.md, "Planner
#: candidates"): below it a sequence's activations fit with recompute and TP/SP alone.
CP_FROM_SEQ_LENGTH = 16_384
#: ... and only while each CP rank keeps at least this many tokens (its attention GEMMs stay
#: large enough to hide the ring exchange).
CP_MIN_TOKENS_PER_RANK = 4_096


def _sweep_options(request: PlanRequest) -> tuple[dict[str, Any], list[TrainingSpec]]:
    tr = request.training
    pinned = tr.model_fields_set
    b_list = request.micro_batch_sizes
    if "micro_batch_size" in pinned and tr.micro_batch_size is not None:
        if b_list is not None and b_list != [tr.micro_batch_size]:
            raise ValidationError(
                "micro_batch_sizes",
                b_list,
                f"conflicts with training.micro_batch_size={tr.micro_batch_size}; give one",
            )
        b_list = [tr.micro_batch_size]
    rc_list = request.recompute
    if "recompute" in pinned and tr.recompute is not None:
        if rc_list is not None and rc_list != [tr.recompute]:
            raise ValidationError(
                "recompute",
                [r.value for r in rc_list],
                f"conflicts with training.recompute={tr.recompute.value}; give one",
            )
        rc_list = [tr.recompute]
    sweeps_full = rc_list is None or Recompute.FULL in rc_list
    if tr.recompute_num_layers is not None and not sweeps_full:
        raise ValidationError(
            "training.recompute_num_layers",
            tr.recompute_num_layers,
            "applies to recompute: full only, which this plan does not sweep; drop it or "
            "include full in recompute",
        )
    blocks = request.recompute_num_layers
    if blocks is not None:
        if tr.recompute_num_layers is not None:
            raise ValidationError(
                "recompute_num_layers",
                blocks,
                f"conflicts with training.recompute_num_layers={tr.recompute_num_layers}; give one",
            )
        if any(n <= 0 for n in blocks):
            raise ValidationError("recompute_num_layers", blocks, "each must be a whole number > 0")
        if not sweeps_full:
            raise ValidationError(
                "recompute_num_layers",
                blocks,
                "block recompute is swept beside full recompute, which this plan does not "
                "sweep; drop it or include full in recompute",
            )
    for b in b_list or ():
        if b <= 0:
            raise ValidationError("micro_batch_sizes", b_list, "each must be a whole number > 0")
    if request.max_tensor is not None and request.max_tensor < 1:
        raise ValidationError("max_tensor", request.max_tensor, "must be >= 1")
    options: dict[str, Any] = {"max_virtual_stages": request.max_virtual_stages}
    if b_list is not None:
        options["micro_batch_sizes"] = sorted(set(b_list))
    if rc_list is not None:
        options["recompute"] = tuple(dict.fromkeys(rc_list))
    if request.sequence_parallel is not None:
        options["sequence_parallel"] = tuple(dict.fromkeys(request.sequence_parallel))
    if request.zero_stages is not None:
        options["zero_stages"] = tuple(sorted(set(request.zero_stages)))
    if request.max_tensor is not None:
        options["max_tensor"] = request.max_tensor
    precisions = [tr.precision]
    if request.precision is not None:
        if "precision" in pinned and request.precision != [tr.precision]:
            raise ValidationError(
                "precision",
                [p.value for p in request.precision],
                f"conflicts with training.precision={tr.precision.value}; give one",
            )
        precisions = list(dict.fromkeys(request.precision))
    trainings = [
        TrainingSpec(
            global_batch_size=tr.global_batch_size,
            micro_batch_size=1,  # swept
            recompute_num_layers=tr.recompute_num_layers,  # what a swept "full" replays
            precision=precision,
            grad_reduce_precision=tr.grad_reduce_precision,
            flash_attention=tr.flash_attention,
            framework=framework(training=tr),
            moe_capacity_factor=tr.moe_capacity_factor,
            moe_token_dispatcher=tr.moe_token_dispatcher,
        )
        for precision in precisions
    ]
    return options, trainings


def context_parallel_sizes(
    model: ModelSpec, gpus: int, fidelity: Fidelity, given: list[int] | None
) -> list[int]:
    """The CP sizes to sweep: those given (each checked), else 1 plus, from
    ``CP_FROM_SEQ_LENGTH`` tokens, every power of two dividing ``gpus`` that splits the sequence
    into 2·cp equal chunks (Megatron-Core's load-balanced causal CP) of at least
    ``CP_MIN_TOKENS_PER_RANK`` tokens per rank. Paper fidelity has no CP term: 1 only."""
    s = model.seq_length
    if given is not None:
        sizes = sorted(set(given))
        if fidelity is Fidelity.PAPER and sizes != [1]:
            raise ValidationError(
                "context_parallel", given, "paper fidelity has no CP term; use detailed"
            )
        for cp in sizes:
            if gpus % cp or s % cp:
                raise ValidationError(
                    "context_parallel", given, f"each must divide gpus={gpus} and seq_length={s}"
                )
        return sizes
    if fidelity is Fidelity.PAPER or s < CP_FROM_SEQ_LENGTH:
        return [1]
    sizes, cp = [1], 2
    while cp <= gpus and s // cp >= CP_MIN_TOKENS_PER_RANK:
        if gpus % cp == 0 and s % (2 * cp) == 0:
            sizes.append(cp)
        cp *= 2
    return sizes


def expert_parallel_sizes(
    model: ModelSpec, gpus: int, fidelity: Fidelity, given: list[int] | None
) -> list[int]:
    """The EP sizes to sweep: those given, else 1 and, for a MoE model in detailed fidelity,
    every power of two that divides the expert count and ``gpus`` (each layout then takes the
    sizes that divide its d·cp). Paper fidelity has no expert term. ``enumerate_layouts``
    checks the sizes against the model."""
    experts = model.moe_num_experts
    if given is not None:
        sizes = sorted(set(given))
        if sizes != [1] and fidelity is Fidelity.PAPER:
            raise ValidationError("expert_parallel", given, "paper fidelity has no expert term")
        if any(gpus % ep for ep in sizes):
            raise ValidationError("expert_parallel", given, f"each must divide gpus={gpus}")
        return sizes
    if fidelity is Fidelity.PAPER or not model.is_moe:
        return [1]
    sizes, ep = [1], 2
    while ep <= gpus:
        if experts % ep == 0 and gpus % ep == 0:
            sizes.append(ep)
        ep *= 2
    return sizes


def experts_folded_options(
    model: ModelSpec, fidelity: Fidelity, given: list[bool] | None
) -> list[bool]:
    """Whether to sweep layouts with the experts folded over TP (expert tensor parallelism 1):
    those given, else both for a MoE model in detailed fidelity (paper fidelity has no expert
    term), else none folded."""
    if given is not None:
        options = sorted(set(given))
        if True in options and (fidelity is Fidelity.PAPER or not model.is_moe):
            raise ValidationError(
                "experts_folded", given, "true needs a MoE model and detailed fidelity"
            )
        return options
    if fidelity is Fidelity.PAPER or not model.is_moe:
        return [False]
    return [False, True]


_RECOMPUTE_BY_CODE = {0: Recompute.NONE, 1: Recompute.SELECTIVE, 2: Recompute.FULL}


def create_plan(*, request: PlanRequest, profiles: Profiles, max_layouts: int) -> PlanResponse:
    """POST /v1/plans: every valid layout, evaluated in one pass per precision, ranked with ties
    grouped (``api.schemas.PlanRequest.tie_tolerance``), the best ``top_k`` shown."""
    model = model_spec(model=request.model)
    options, trainings = _sweep_options(request)
    cp_sizes = context_parallel_sizes(
        model, request.gpus, request.fidelity, request.context_parallel
    )
    options["context_parallel"] = tuple(cp_sizes)
    ep_sizes = expert_parallel_sizes(model, request.gpus, request.fidelity, request.expert_parallel)
    options["expert_parallel"] = tuple(ep_sizes)
    folds = experts_folded_options(model, request.fidelity, request.experts_folded)
    options["experts_folded"] = tuple(folds)
    clusters = [
        cluster_spec(cluster=request.cluster, precision=t.precision, profiles=profiles)
        for t in trainings
    ]
    cluster = clusters[0]
    if request.tensor_within_node:
        options["tensor_within_node"] = cluster.spec.gpus_per_node
    results: list[SweepResult] = []
    precision_of: list[Precision] = []
    block_of: list[int | None] = []
    counted = 0
    # A pass per precision, and per block recompute swept its full-recompute layouts again.
    blocks = sorted(set(request.recompute_num_layers or ()))
    planned: list[tuple[TrainingSpec, ResolvedCluster, dict[str, Any], int | None]] = []
    for training, resolved in zip(trainings, clusters, strict=True):
        planned.append((training, resolved, options, None))
        block_options = {**options, "recompute": (Recompute.FULL,)}
        for n in blocks:
            block = replace(training, recompute_num_layers=n)
            planned.append((block, resolved, block_options, n))
    # extreme figures overflow to inf, which the answer refuses below (finite_answer)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        # every pass is enumerated (and the cap checked over all of them) before any is
        # evaluated: a plan over the cap is refused before the costly part, not after a pass
        passes = []
        for training, _, pass_options, replay in planned:
            layouts = enumerate_layouts(
                model,
                training,
                request.gpus,
                max_layouts=max_layouts,
                counted=counted,
                **pass_options,
            )
            if replay is not None:
                # where a chunk holds that many layers or fewer, it is full recompute again
                chunk = model.num_layers / (layouts.columns["p"] * layouts.columns["v"])
                layouts = layouts.take(np.flatnonzero(chunk > replay))
            counted += len(layouts)
            passes.append(layouts)
        for (training, resolved, _, replay), layouts in zip(planned, passes, strict=True):
            results.append(
                evaluate_layouts(
                    model,
                    training,
                    resolved.spec,
                    layouts,
                    fidelity=request.fidelity,
                    memory_headroom=request.memory_headroom,
                )
            )
            precision_of += [training.precision] * len(layouts)
            block_of += [replay] * len(layouts)
    res = concat_results(results)
    order, group = rank(
        res,
        gpus_per_node=cluster.spec.gpus_per_node,
        drop_infeasible=request.drop_infeasible,
        tie_tolerance=request.tie_tolerance,
        ranked=request.top_k,
    )
    top = order[: request.top_k]
    cols = {
        name: res.layouts.columns[name][top] for name in ("p", "t", "d", "b", "v", "cp", "ep", "ef")
    }
    flags = {name: res.layouts.columns[name][top] for name in ("sp", "zero", "recompute")}
    iteration = res.iteration_s[top]
    memory = res.memory_bytes[top]
    fits = res.fits[top]
    terms = {name: np.asarray(res.terms[name])[top] for name in TERMS}
    capacity = cluster.spec.gpu_memory_bytes
    known_capacity = capacity is not None
    gpus_per_node = cluster.spec.gpus_per_node
    gb = trainings[0].global_batch_size
    entries: list[PlanEntryOut] = []
    # Every pass's figures (its precision decides whether attention runs on the CUDA cores).
    figs: dict[str, float] = {}
    for training in trainings:
        figs |= figures(cluster.spec, model, training, request.fidelity)
    # Block recompute: the pass's own N, else the request's for its full-recompute layouts.
    pinned_block = request.training.recompute_num_layers
    replayed = [
        block_of[j] if block_of[j] is not None else pinned_block if code == 2 else None
        for j, code in zip(top.tolist(), flags["recompute"].astype(int).tolist(), strict=True)
    ]
    with finite_answer(figs):
        for i in range(len(top)):
            b, d, t = int(cols["b"][i]), int(cols["d"][i]), int(cols["t"][i])
            entries.append(
                PlanEntryOut(
                    rank=i + 1,
                    layout=PlanLayoutOut(
                        pipeline=int(cols["p"][i]),
                        tensor=t,
                        data=d,
                        virtual_stages=int(cols["v"][i]),
                        sequence_parallel=bool(flags["sp"][i]),
                        zero_stage=int(flags["zero"][i]),
                        micro_batch_size=b,
                        recompute=_RECOMPUTE_BY_CODE[int(flags["recompute"][i])],
                        recompute_num_layers=replayed[i],
                        context_parallel=int(cols["cp"][i]),
                        expert_parallel=int(cols["ep"][i]),
                        expert_tensor_parallel=1 if cols["ef"][i] else None,
                        precision=precision_of[int(top[i])],
                    ),
                    iteration_time_s=float(iteration[i]),
                    breakdown_s={name: float(terms[name][i]) for name in TERMS},
                    micro_batches=gb // (b * d),
                    memory_bytes=float(memory[i]),
                    fits=bool(fits[i]) if known_capacity else None,
                    group=int(group[i]) + 1,
                    communication_s=float(sum(terms[name][i] for name in COMMUNICATION_TERMS)),
                    tensor_within_node=gpus_per_node % t == 0,
                )
            )
    evaluated = len(res.layouts)
    feasible = int(res.fits.sum())
    warnings: list[str] = []
    if not known_capacity:
        warnings.append(
            "no GPU memory capacity known (give cluster.gpu or cluster.gpu_memory_gb): "
            "layouts are not filtered by memory and fits is null"
        )
    if evaluated == 0:
        warnings.append(
            f"no valid layout of {request.gpus} GPUs for this model and batch under the "
            "constraints (p·t·d·cp = gpus, heads divisible by t, layers by p·v, gb by b·d)"
        )
    elif not entries:
        warnings.append(
            "every layout exceeds the usable GPU memory (drop_infeasible removed them all; "
            f"memory_headroom={request.memory_headroom:g} keeps that fraction free)"
        )
    assumptions = [
        *cluster.notes,
        "rank order tp-cp-dp-pp; feasible (fits in the GPU "
        f"memory less {100 * request.memory_headroom:g}% headroom) first, then by iteration "
        f"time; times within {100 * request.tie_tolerance:g}% of a group's fastest are one "
        "group, ordered by t within a node, then fewer communication seconds",
        f"context_parallel swept: {cp_sizes}"
        + (
            ""
            if request.context_parallel is not None
            else f" (CP from seq_length >= {CP_FROM_SEQ_LENGTH} with detailed fidelity, "
            f">= {CP_MIN_TOKENS_PER_RANK} tokens per rank)"
        ),
        f"expert_parallel swept: {ep_sizes}"
        + (
            ""
            if request.expert_parallel is not None or not model.is_moe
            else " (for a MoE model: the powers of two dividing its experts and the GPUs; a "
            "layout takes those dividing its d·cp)"
        ),
        f"experts folded over TP swept: {folds}"
        + (
            " (expert_tensor_parallel 1 where t > 1 under SP and the EP size divides t·d·cp)"
            if True in folds
            else ""
        ),
        f"swept: {', '.join(f'{k}={v}' for k, v in sorted(options.items()))}",
    ]
    if blocks:
        assumptions.append(
            f"block recompute swept beside full: recompute_num_layers {blocks}, each where a "
            "pipeline chunk holds more layers (the first N of each chunk replayed)"
        )
    if request.training.recompute_num_layers is not None:
        n = request.training.recompute_num_layers
        assumptions.append(
            f"recompute full means block recompute of {n} layer(s) per pipeline chunk "
            "(recompute_num_layers): in each layout the share min(n, L)/L of the stage with the "
            "most layers, L per chunk, is replayed"
        )
    if len(trainings) > 1:
        assumptions.append(
            "precision swept: "
            + ", ".join(t.precision.value for t in trainings)
            + f"; the cluster shown is {trainings[0].precision.value}'s"
        )
    return PlanResponse(
        gpus=request.gpus,
        evaluated=evaluated,
        feasible=feasible if known_capacity else None,
        layouts=entries,
        cluster=ClusterOut.model_validate(cluster),
        assumptions=assumptions,
        warnings=warnings,
        memory_headroom=request.memory_headroom,
        usable_memory_bytes=(
            None if capacity is None else capacity * (1.0 - request.memory_headroom)
        ),
        tie_tolerance=request.tie_tolerance,
        context_parallel=cp_sizes,
        expert_parallel=ep_sizes,
        experts_folded=folds,
    )
