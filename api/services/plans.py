"""Plans: every valid layout of a GPU count, evaluated in one pass and ranked."""

from __future__ import annotations

from typing import Any

import numpy as np

from api.caches import Profiles
from api.scenario import cluster_spec, figures, framework, model_spec
from api.schemas import (
    ClusterOut,
    PlanEntryOut,
    PlanLayoutOut,
    PlanRequest,
    PlanResponse,
    finite_answer,
)
from estimator import TERMS, Recompute, TrainingSpec, plan
from estimator.errors import ValidationError


def _sweep_options(request: PlanRequest) -> tuple[dict[str, Any], TrainingSpec]:
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
    training = TrainingSpec(
        global_batch_size=tr.global_batch_size,
        micro_batch_size=1,  # swept
        precision=tr.precision,
        grad_reduce_precision=tr.grad_reduce_precision,
        flash_attention=tr.flash_attention,
        framework=framework(training=tr),
        moe_capacity_factor=tr.moe_capacity_factor,
    )
    return options, training


_RECOMPUTE_BY_CODE = {0: Recompute.NONE, 1: Recompute.SELECTIVE, 2: Recompute.FULL}


def create_plan(*, request: PlanRequest, profiles: Profiles, max_layouts: int) -> PlanResponse:
    """POST /v1/plans: every valid layout, evaluated in one pass, the best ``top_k`` shown."""
    model = model_spec(model=request.model)
    options, training = _sweep_options(request)
    cluster = cluster_spec(cluster=request.cluster, precision=training.precision, profiles=profiles)
    # extreme figures overflow to inf, which the answer refuses below (finite_answer)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        found = plan(
            model,
            training,
            cluster.spec,
            request.gpus,
            fidelity=request.fidelity,
            drop_infeasible=request.drop_infeasible,
            max_layouts=max_layouts,
            **options,
        )
    res = found.result
    top = found.order[: request.top_k]
    cols = {name: res.layouts.columns[name][top] for name in ("p", "t", "d", "b", "v")}
    flags = {name: res.layouts.columns[name][top] for name in ("sp", "zero", "recompute")}
    iteration = res.iteration_s[top]
    memory = res.memory_bytes[top]
    fits = res.fits[top]
    terms = {name: np.asarray(res.terms[name])[top] for name in TERMS}
    known_capacity = cluster.spec.gpu_memory_bytes is not None
    gb = training.global_batch_size
    entries: list[PlanEntryOut] = []
    with finite_answer(figures(cluster.spec)):
        for i in range(len(top)):
            b, d = int(cols["b"][i]), int(cols["d"][i])
            entries.append(
                PlanEntryOut(
                    rank=i + 1,
                    layout=PlanLayoutOut(
                        pipeline=int(cols["p"][i]),
                        tensor=int(cols["t"][i]),
                        data=d,
                        virtual_stages=int(cols["v"][i]),
                        sequence_parallel=bool(flags["sp"][i]),
                        zero_stage=int(flags["zero"][i]),
                        micro_batch_size=b,
                        recompute=_RECOMPUTE_BY_CODE[int(flags["recompute"][i])],
                    ),
                    iteration_time_s=float(iteration[i]),
                    breakdown_s={name: float(terms[name][i]) for name in TERMS},
                    micro_batches=gb // (b * d),
                    memory_bytes=float(memory[i]),
                    fits=bool(fits[i]) if known_capacity else None,
                )
            )
    warnings: list[str] = []
    if not known_capacity:
        warnings.append(
            "no GPU memory capacity known (give cluster.gpu or cluster.gpu_memory_gb): "
            "layouts are not filtered by memory and fits is null"
        )
    if found.evaluated == 0:
        warnings.append(
            f"no valid layout of {request.gpus} GPUs for this model and batch under the "
            "constraints (p·t·d = gpus, heads divisible by t, layers by p·v, gb by b·d)"
        )
    elif not entries:
        warnings.append("every layout exceeds the GPU memory (drop_infeasible removed them all)")
    assumptions = [
        *cluster.notes,
        "layouts with context_parallel = expert_parallel = 1, rank order tp-dp-pp; "
        "feasible (fits in memory) first, then by iteration time",
        f"swept: {', '.join(f'{k}={v}' for k, v in sorted(options.items()))}",
    ]
    return PlanResponse(
        gpus=request.gpus,
        evaluated=found.evaluated,
        feasible=found.feasible if known_capacity else None,
        layouts=entries,
        cluster=ClusterOut.model_validate(cluster),
        assumptions=assumptions,
        warnings=warnings,
    )
