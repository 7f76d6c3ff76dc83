"""commest's pure closed-form engine: no I/O, no environment, no web, no database.

from estimator import (ModelSpec, TrainingSpec, LayoutSpec, ClusterSpec,
                               FixedBandwidth, Scenario, estimate)
result = estimate(Scenario(model, training, layout, cluster))
result.iteration_time_s, result.breakdown.as_dict()
"""

from estimator.bandwidth import (
    BandwidthAnswer,
    BandwidthProvider,
    Collective,
    FixedBandwidth,
    TrafficKind,
    bus_factor,
    collective_time_s,
    parse_collective,
)
from estimator.engine import (
    Breakdown,
    CollectiveUse,
    Estimate,
    Memory,
    Throughput,
    estimate,
    estimate_traffic,
    traffic_loads,
)
from estimator.flops import megatron_iteration_flops, megatron_parameters
from estimator.kernel import TERMS
from estimator.specs import (
    ClusterSpec,
    Fidelity,
    LayoutSpec,
    ModelSpec,
    MoeDispatcher,
    Precision,
    Recompute,
    Scenario,
    TrainingSpec,
    validate_layout,
)
from estimator.sweep import (
    LayoutArrays,
    Plan,
    SweepResult,
    enumerate_layouts,
    evaluate_layouts,
    plan,
)
from estimator.traffic import Algorithm, CollectiveLoad, Placement, SparseTraffic

__all__ = [
    "TERMS",
    "Algorithm",
    "BandwidthAnswer",
    "BandwidthProvider",
    "Breakdown",
    "ClusterSpec",
    "Collective",
    "CollectiveLoad",
    "CollectiveUse",
    "Estimate",
    "Fidelity",
    "FixedBandwidth",
    "LayoutArrays",
    "LayoutSpec",
    "Memory",
    "ModelSpec",
    "MoeDispatcher",
    "Placement",
    "Plan",
    "Precision",
    "Recompute",
    "Scenario",
    "SparseTraffic",
    "SweepResult",
    "Throughput",
    "TrafficKind",
    "TrainingSpec",
    "bus_factor",
    "collective_time_s",
    "enumerate_layouts",
    "estimate",
    "estimate_traffic",
    "evaluate_layouts",
    "megatron_iteration_flops",
    "megatron_parameters",
    "parse_collective",
    "plan",
    "traffic_loads",
    "validate_layout",
]
