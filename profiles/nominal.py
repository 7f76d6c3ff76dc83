"""Built-in nominal profiles from vendors' published specifications.

They make the service useful before any upload and are labelled ``nominal`` everywhere: a
profile row with ``nominal=True``, and every bandwidth answer from their curves has method
``nominal``. The curves are synthetic latency-bandwidth curves, T = α + S/β, sampled at powers
of two from 8 B to 8 GiB, so :class:`~profiles.bandwidth.ProfileBandwidth` serves them
with the same rules as measured runs (placements it has no curve for are derived the same way).

Attainable fractions of link rate (stated once, applied to every figure):

- NVLink/NVSwitch, within a node: 0.77. NVIDIA's published NCCL all_reduce bus bandwidth on
  DGX A100 is about 230 GB/s against 300 GB/s of NVLink 3 per direction per GPU (230/300 =
  0.77). The same fraction is used for the other collectives and for H100 (conservative there:
  NVLink SHARP lets H100 all_reduce go higher).
- InfiniBand, across nodes: 0.92 (our assumption): data rate after 64b/66b encoding is ~97% of
  the signalling rate, less protocol and NCCL proxy overheads; perftest's ib_write_bw reaches
  ~96-97%, NCCL over IB a few points less.

Latencies α are typical NCCL small-message times (our assumption, order of magnitude, not a
vendor figure): they only shape the curves below ~1 MiB. Across nodes, all-gather and
reduce-scatter run as rings (NCCL's only algorithm for them before 2.23), whose latency grows
with the ring's length: NCCL's own cost model (``ncclTopoTuneModel``, ring with the Simple
protocol of large messages) charges a base of 8.4 µs plus 3.4 µs per NVLink step and 9.6 µs
per network step, n − 1 steps of which nodes − 1 cross the network. At hundreds of ranks that
is milliseconds per call (1,536 ranks on 192 nodes: 6.4 ms), which is what makes ZeRO-3's
per-module gathers latency-bound at scale (docs/design.md §6).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache

from estimator.bandwidth import Collective, bus_factor
from estimator.calibrated import FITTED_COMPUTE
from estimator.errors import NotFoundError
from profiles.bandwidth import RING_OPS, AlphaBetaFit, CurveSet, ProfileBandwidth, RunCurve

GIB = 1024**3
NVLINK_FRACTION = 0.77  # 230 GB/s all_reduce busbw (NVIDIA, DGX A100) / 300 GB/s NVLink 3
IB_FRACTION = 0.92  # our assumption, see the module docstring
SIZES_BYTES = tuple(float(2**e) for e in range(3, 34))  # 8 B .. 8 GiB
INTER_NODE_COUNTS = (2, 4, 8, 16, 32, 64, 128, 256)
NOMINAL_OPS = (
    Collective.ALL_REDUCE,
    Collective.ALL_GATHER,
    Collective.REDUCE_SCATTER,
    Collective.ALLTOALL,
    Collective.SENDRECV,
)

# Typical NCCL small-message latency, µs (our assumption): (within a node, across nodes).
LATENCY_US: dict[Collective, tuple[float, float]] = {
    Collective.ALL_REDUCE: (10.0, 20.0),
    Collective.ALL_GATHER: (8.0, 15.0),
    Collective.REDUCE_SCATTER: (8.0, 15.0),
    Collective.ALLTOALL: (10.0, 25.0),
    Collective.SENDRECV: (6.0, 8.0),
}

# NCCL's ring model, Simple protocol (see the module docstring): base and per-step latency, µs.
RING_BASE_US = 8.4
RING_NVLINK_STEP_US = 3.4
RING_NET_STEP_US = 9.6


def ring_latency_us(ranks: int, nodes: int) -> float:
    """NCCL's modelled latency of a ring all-gather / reduce-scatter across ``nodes`` nodes."""
    steps, net_steps = ranks - 1, nodes - 1
    return RING_BASE_US + (steps - net_steps) * RING_NVLINK_STEP_US + net_steps * RING_NET_STEP_US


@dataclass(frozen=True, slots=True)
class NominalSpec:
    """A node type as its vendor specifies it."""

    name: str
    gpu_model: str
    gpus_per_node: int
    peak_tflops: float  # dense BF16 (the training dtype)
    peak_tflops_by_dtype: dict[str, float]  # dense figures
    gpu_memory_bytes: int
    nvlink_gbps: float  # per GPU, per direction (GB/s)
    nic_gbps: float  # per GPU, per direction (GB/s); one compute NIC per GPU
    description: str
    memory_bandwidth_gbps: float  # HBM, GB/s (datasheet)
    # The compute model (estimator.compute): u for the GEMMs and γ for the element-wise HBM
    # traffic, fitted by `commest validate` (estimator.calibrated; A100 values by default).
    utilization: float = FITTED_COMPUTE["a100"].utilization
    memory_traffic_factor: float = FITTED_COMPUTE["a100"].memory_traffic_factor


NOMINAL_SPECS: dict[str, NominalSpec] = {
    spec.name: spec
    for spec in (
        NominalSpec(
            name="dgx-a100-nominal",
            # NVIDIA DGX A100 datasheet: 8× NVIDIA A100 80GB Tensor Core GPUs, 6 NVSwitches.
            gpu_model="A100-SXM4-80GB",
            gpus_per_node=8,
            # NVIDIA A100 datasheet (dense, without sparsity): BF16/FP16 Tensor Core 312,
            # TF32 Tensor Core 156, FP32 19.5, FP64 Tensor Core 19.5 TFLOP/s.
            peak_tflops=312.0,
            peak_tflops_by_dtype={
                "bf16": 312.0,
                "fp16": 312.0,
                "tf32": 156.0,
                "fp32": 19.5,
                "fp64": 19.5,
            },
            # A100 datasheet: 80GB HBM2e (nvidia-smi reports 81920 MiB = 80 GiB).
            gpu_memory_bytes=80 * GIB,
            # A100 datasheet: NVLink 3, 600 GB/s bidirectional per GPU = 300 GB/s each way.
            nvlink_gbps=300.0,
            # DGX A100 datasheet: 8× single-port ConnectX-6 VPI 200 Gb/s HDR InfiniBand for
            # compute, one per GPU: 200 Gb/s = 25 GB/s per direction.
            nic_gbps=25.0,
            # A100 datasheet: 2,039 GB/s HBM2e (80GB SXM).
            memory_bandwidth_gbps=2039.0,
            description=(
                "Nominal DGX A100 (vendor specifications, not measurements): 8× A100 80GB SXM, "
                "NVLink 3 via NVSwitch 300 GB/s per direction per GPU, 8× HDR 200 Gb/s IB."
            ),
        ),
        NominalSpec(
            name="dgx-h100-nominal",
            # NVIDIA DGX H100 datasheet: 8× NVIDIA H100 Tensor Core GPUs (SXM5, 80GB),
            # 4× NVSwitch.
            gpu_model="H100-SXM5-80GB",
            gpus_per_node=8,
            # NVIDIA H100 datasheet (SXM; the datasheet's figures are with sparsity, dense is
            # half): BF16/FP16 Tensor Core 989, FP8 1979, TF32 494.5, FP32 67, FP64 TC 67.
            peak_tflops=989.0,
            peak_tflops_by_dtype={
                "bf16": 989.0,
                "fp16": 989.0,
                "fp8": 1979.0,
                "tf32": 494.5,
                "fp32": 67.0,
                "fp64": 67.0,
            },
            # H100 SXM datasheet: 80GB HBM3.
            gpu_memory_bytes=80 * GIB,
            # H100 datasheet: NVLink 4, 900 GB/s bidirectional per GPU = 450 GB/s each way.
            nvlink_gbps=450.0,
            # DGX H100 datasheet: 8× single-port ConnectX-7 400 Gb/s NDR InfiniBand for compute
            # (in 4 OSFP cages), one per GPU: 400 Gb/s = 50 GB/s per direction.
            nic_gbps=50.0,
            # H100 SXM datasheet: 3.35 TB/s HBM3. u fitted on H100 runs (estimator.calibrated).
            memory_bandwidth_gbps=3350.0,
            utilization=FITTED_COMPUTE["h100"].utilization,
            memory_traffic_factor=FITTED_COMPUTE["h100"].memory_traffic_factor,
            description=(
                "Nominal DGX H100 (vendor specifications, not measurements): 8× H100 80GB SXM, "
                "NVLink 4 via NVSwitch 450 GB/s per direction per GPU, 8× NDR 400 Gb/s IB."
            ),
        ),
    )
}


def _peak_busbw_gbps(spec: NominalSpec, op: Collective, ranks: int, nodes: int) -> float:
    """Asymptotic busbw of ``op`` at a placement, from link rates and fractions."""
    intra = spec.nvlink_gbps * NVLINK_FRACTION
    if nodes == 1:
        return intra
    nic = spec.nic_gbps * IB_FRACTION
    per_node = ranks // nodes
    if op in RING_OPS:
        # Rings cross each node boundary once per channel, one channel per NIC: the node's NICs
        # add up (nccl-tests busbw of a ring = per-link rate of its slowest hop).
        return min(intra, per_node * nic)
    if op is Collective.ALLTOALL:
        # Each GPU sends (nodes-1)/nodes of its buffer off-node through its own NIC:
        # busbw = (n-1)/n · S / t with t = S·(k-1)/k / nic.
        return min(intra, nic * (ranks - 1) / ranks * nodes / (nodes - 1))
    return nic  # sendrecv: one GPU, one NIC


def _curve(spec: NominalSpec, op: Collective, ranks: int, nodes: int) -> RunCurve:
    peak = _peak_busbw_gbps(spec, op, ranks, nodes)
    alpha = LATENCY_US[op][0 if nodes == 1 else 1]
    if nodes > 1 and op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        alpha = max(alpha, ring_latency_us(ranks, nodes))
    fit = AlphaBetaFit(alpha_us=alpha, beta_gbps=peak / float(bus_factor(op, float(ranks))))
    points = [(size, float(fit.time_us(size)), False) for size in SIZES_BYTES]
    label = (
        f"nominal {op.value} {ranks} ranks on {nodes} node(s): α={alpha:g} us, "
        f"peak busbw {peak:.4g} GB/s"
    )
    curve = RunCurve.from_points(
        op=op,
        ranks=ranks,
        nodes=nodes,
        points=points,
        label=label,
        backend="nominal",
        fit=fit,
        nominal=True,
    )
    assert curve is not None
    return curve


@lru_cache(maxsize=8)
def nominal_curves(name: str) -> tuple[RunCurve, ...]:
    """The synthetic curves of a nominal profile (one node, and 2..256 full nodes)."""
    spec = _spec(name)
    g = spec.gpus_per_node
    curves = []
    for op in NOMINAL_OPS:
        curves.append(_curve(spec, op, g, 1))
        curves.extend(_curve(spec, op, g * k, k) for k in INTER_NODE_COUNTS)
    return tuple(curves)


@lru_cache(maxsize=8)
def nominal_curve_set(name: str) -> CurveSet:
    """The nominal curves of ``name`` as one shared, lazily merged set (built once per process)."""
    return CurveSet(nominal_curves(name), nominal=True)


# Clusters of published runs whose network differs from the DGX nominal profiles, built the same
# way from what the source states (used by `commest validate`, never stored as profiles).
PUBLISHED_CLUSTERS: dict[str, NominalSpec] = {
    spec.name: spec
    for spec in (
        dataclasses.replace(
            NOMINAL_SPECS["dgx-a100-nominal"],
            name="jean-zay-a100-nominal",
            # BLOOM's training README ("Hardware"): 48 nodes of 8 A100 80GB with NVLink within
            # a node and 4 Omni-Path 100 Gb/s links per node: 400 Gb/s per node = 6.25 GB/s
            # per GPU per direction.
            nic_gbps=6.25,
            description=(
                "Jean Zay A100 partition as BLOOM's README states it: 8× A100 80GB per node, "
                "NVLink within a node, 4× Omni-Path 100 Gb/s per node."
            ),
        ),
    )
}


def _spec(name: str) -> NominalSpec:
    spec = NOMINAL_SPECS.get(name) or PUBLISHED_CLUSTERS.get(name)
    if spec is None:
        known = ", ".join(sorted(NOMINAL_SPECS))
        raise NotFoundError(f"no nominal profile {name!r}; known: {known}")
    return spec


def nominal_bandwidth(name: str) -> ProfileBandwidth:
    """A nominal profile's bandwidth provider; needs no database."""
    return ProfileBandwidth(name, (), nominal_curve_set(name), nominal_name=name)


# --- GPU families ---------------------------------------------------------------------------

# A GPU model as benchmark logs and users write it ("NVIDIA A100-SXM4-80GB", "A100", "NVIDIA
# H100 80GB HBM3", "AMD Instinct MI300X") comes down to its family token: a letter or two and a
# number (A100, H100, H200, GB200, B200, V100, L40S, MI300X, MI250X, GB10).
_FAMILY = re.compile(r"\b(MI\d{3}[A-Z]?|G[BH]\d{2,3}|[ABHLTV]\d{2,3}S?)(?=\b|[-_ ]|$)")
FAMILY_SPECS = {"A100": "dgx-a100-nominal", "H100": "dgx-h100-nominal"}


def gpu_family(gpu_model: str | None) -> str | None:
    """The family token of a GPU model name ("A100", "MI300X"), or None if none is named."""
    if not gpu_model:
        return None
    match = _FAMILY.search(gpu_model.upper())
    return match.group(1) if match else None


def family_spec(gpu_model: str | None) -> NominalSpec | None:
    """The nominal spec of a GPU model's family, if commest has one."""
    name = FAMILY_SPECS.get(gpu_family(gpu_model) or "")
    return NOMINAL_SPECS[name] if name else None


# Reducing collectives can beat the link-rate bound of a ring by up to 2x with in-network
# reduction (NVLink SHARP within a node, InfiniBand SHARP across nodes), which halves the bytes
# each GPU sends; the busbw formula of nccl-tests still counts the ring's bytes.
IN_NETWORK_REDUCTION_GAIN = 2.0
REDUCING_OPS = frozenset({Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE})
# Margin over the line-rate bound before an upload is called impossible (clock and rounding
# differences, link rates quoted in round figures).
HARDWARE_MARGIN = 1.25


def hardware_limit_gbps(spec: NominalSpec, op: Collective, ranks: int, nodes: int) -> float:
    """The highest busbw a placement's links can carry at line rate (no attainable fraction).

    Within a node: the NVLink rate per GPU and direction. Across nodes: rings as many NICs as a
    node has ranks (capped by NVLink), alltoall one NIC per GPU for its off-node share, other
    per-rank traffic one NIC. Reducing collectives get ``IN_NETWORK_REDUCTION_GAIN``.
    """
    op = Collective(op)
    if nodes == 1:
        limit = spec.nvlink_gbps
    elif op in RING_OPS:
        limit = min(spec.nvlink_gbps, max(ranks // nodes, 1) * spec.nic_gbps)
    elif op is Collective.ALLTOALL:
        limit = min(spec.nvlink_gbps, spec.nic_gbps * (ranks - 1) / ranks * nodes / (nodes - 1))
    else:
        limit = spec.nic_gbps
    if op in REDUCING_OPS:
        limit *= IN_NETWORK_REDUCTION_GAIN
    return limit
