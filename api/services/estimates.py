"""Estimates: one layout's iteration time with every term, collective and assumption."""

from __future__ import annotations

from typing import Any

from api import scenario
from api.caches import Profiles
from api.schemas import EstimateRequest


def estimate_body(*, answer: scenario.Answer) -> dict[str, Any]:
    """The response body of an estimate."""
    result, cluster = answer.estimate, answer.cluster
    scenario.require_finite(result.iteration_time_s, "iteration_time_s")
    mem = result.memory
    tp = result.throughput
    return {
        "iteration_time_s": result.iteration_time_s,
        "breakdown_s": result.breakdown.as_dict(),
        "link_time_s": dict(result.link_s),
        "ratios": {
            "communication": result.communication_ratio,
            "bubble": result.bubble_ratio,
        },
        "throughput": {
            "tokens_per_s": tp.tokens_per_s,
            "model_tflops_per_gpu": tp.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": tp.hardware_tflops_per_gpu,
            "mfu": tp.mfu,
            "hfu": tp.hfu,
        },
        "traffic_bytes_per_gpu": dict(result.traffic_bytes),
        "collectives": [
            {
                "kind": c.kind.value,
                "term": c.term,
                "op": c.op.value,
                "ranks": c.ranks,
                "nodes": c.nodes,
                "size_bytes": c.size_bytes,
                "calls_per_iteration": c.calls_per_iteration,
                "busbw_gbps": c.busbw_gbps,
                "method": c.method,
                "source": c.source,
                "time_per_call_s": c.time_per_call_s,
                "link_time_s": c.link_time_s,
            }
            for c in result.collectives
        ],
        "memory": {
            "weights_bytes": mem.weights_bytes,
            "gradients_bytes": mem.gradients_bytes,
            "optimizer_bytes": mem.optimizer_bytes,
            "activations_bytes": mem.activations_bytes,
            "total_bytes": mem.total_bytes,
            "capacity_bytes": mem.capacity_bytes,
            "fits": mem.fits,
        },
        "micro_batches": result.micro_batches,
        "parameters": result.parameters,
        "parameters_per_gpu": result.gpu_parameters,
        "model_flops_per_iteration": result.model_flops,
        "hardware_flops_per_iteration": result.hardware_flops,
        "gpus": result.scenario.layout.gpus,
        "fidelity": result.scenario.fidelity.value,
        "cluster": cluster.describe(),
        "assumptions": answer.assumptions,
        "warnings": list(result.warnings),
    }


def create_estimate(*, request: EstimateRequest, profiles: Profiles) -> dict[str, Any]:
    """POST /v1/estimates."""
    return estimate_body(answer=scenario.run(request=request, profiles=profiles))
