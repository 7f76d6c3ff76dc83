"""Traffic matrices: GPU-to-GPU (or node-to-node) bytes per iteration, as rows, CSV or bins.

The caps (``max_matrix_gpus``, ``max_dense_gpus``) are checked before any estimate is made;
``max_matrix_entries`` bounds the entries the matrix will hold, counted in closed form from the
estimate's loads before any pair is made (docs/design.md §5.2).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from api.scenario import prepare, scenario_figures
from api.schemas import (
    LayoutIn,
    TrafficMatrixRequest,
    TrafficMatrixResponse,
    TrafficView,
    finite_answer,
)
from api.snapshots import Profiles
from estimator import Algorithm, Estimate, SparseTraffic, estimate, traffic_loads
from estimator.bandwidth import FloatArray
from estimator.errors import LimitError
from estimator.traffic import (
    Placement,
    node_traffic_matrix,
    traffic_entry_count,
    traffic_matrix,
)

#: Cells per side of a heatmap panel at most (a panel is about 300 pixels wide).
PANEL_CELLS = 256


@dataclass(slots=True)
class TrafficAnswer:
    """A traffic matrix at GPU or node level, with the estimate it came from."""

    traffic: SparseTraffic
    level: Literal["gpu", "node"]
    gpus: int
    gpus_per_node: int
    algorithm: Algorithm
    result: Estimate
    view: TrafficView = "all"

    def entries(
        self, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, int, float, str]]:
        """The sparse entries ``[start, stop)`` as (src, dst, bytes, kind) rows."""
        t = self.traffic
        names = [k.value for k in t.kinds]
        window = slice(start, stop)
        kinds = [names[k] for k in t.kind[window].tolist()]
        src, dst, size = t.src[window].tolist(), t.dst[window].tolist(), t.bytes[window].tolist()
        return zip(src, dst, size, kinds, strict=True)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every entry as the members of a JSON row."""
        return [{"src": s, "dst": d, "bytes": b, "kind": k} for s, d, b, k in self.entries()]

    @property
    def totals(self) -> dict[str, Any]:
        """Total bytes, bytes per kind of traffic (kinds with none left out) and entries."""
        t = self.traffic
        by_kind = {k.value: v for k, v in t.kind_totals().items() if v}
        return {"bytes": t.total_bytes, "by_kind": by_kind, "entries": len(t)}


def create_traffic_matrix(
    *,
    request: TrafficMatrixRequest,
    profiles: Profiles,
    max_matrix_gpus: int,
    max_dense_gpus: int,
    max_matrix_entries: int,
) -> TrafficAnswer:
    """The request's traffic matrix; LimitError before any allocation when over the caps."""
    layout = request.layout
    gpus = layout.pipeline * layout.tensor * layout.data * layout.context_parallel
    if gpus > max_matrix_gpus:
        raise LimitError(
            f"a traffic matrix of {gpus} GPUs exceeds the cap of {max_matrix_gpus} "
            "(COMMEST_MAX_MATRIX_GPUS)",
            gpus=gpus,
            max_matrix_gpus=max_matrix_gpus,
        )
    dense = request.format == "png"
    if dense and request.level == "gpu" and gpus > max_dense_gpus:
        raise LimitError(
            f"a GPU-level heatmap of {gpus} GPUs exceeds the dense cap of {max_dense_gpus} "
            "(COMMEST_MAX_DENSE_GPUS); ask for level=node or format=json/csv",
            gpus=gpus,
            max_dense_gpus=max_dense_gpus,
        )
    prepared = prepare(request=request, profiles=profiles)
    g = prepared.scenario.cluster.gpus_per_node
    nodes = -(-gpus // g)
    if dense and request.level == "node" and nodes > max_dense_gpus:
        raise LimitError(
            f"a node-level heatmap of {nodes} nodes exceeds the dense cap of {max_dense_gpus}",
            nodes=nodes,
            max_dense_gpus=max_dense_gpus,
        )
    result = estimate(prepared.scenario)
    placement = Placement.from_layout(result.scenario.layout, g)
    loads = traffic_loads(result)
    entries = traffic_entry_count(placement, loads, request.algorithm, request.level)
    if entries > max_matrix_entries:
        raise LimitError(
            f"this {request.level}-level {request.algorithm.value} traffic matrix of {gpus} "
            f"GPUs would hold {entries:,} entries, over the cap of {max_matrix_entries:,} "
            "(COMMEST_MAX_MATRIX_ENTRIES); ask for level=node or algorithm=ring, or raise "
            "COMMEST_MAX_MATRIX_ENTRIES on the server",
            entries=entries,
            max_matrix_entries=max_matrix_entries,
        )
    if request.level == "node":
        traffic = node_traffic_matrix(placement, loads, request.algorithm)
    else:
        traffic = traffic_matrix(placement, loads, request.algorithm)
    if request.view == "network":  # intra-node GPU pairs, or the node-level diagonal, dropped
        traffic = traffic.crossing(g if request.level == "gpu" else 1)
    return TrafficAnswer(traffic, request.level, gpus, g, request.algorithm, result, request.view)


def traffic_response(*, answer: TrafficAnswer) -> TrafficMatrixResponse:
    """Sparse rows and totals of a traffic matrix (``format: json``)."""
    with finite_answer(scenario_figures(answer.result.scenario)):
        return TrafficMatrixResponse.model_validate(answer)


def binned_matrix(*, traffic: SparseTraffic, max_cells: int = 512) -> tuple[FloatArray, int]:
    """The dense matrix summed over kinds, in blocks of k×k endpoints so that it has at most
    ``max_cells`` rows (k = 1 when it already fits); built from the sparse entries directly."""
    size = traffic.size
    k = max(1, -(-size // max_cells))
    cells = -(-size // k)
    flat = np.bincount(
        (traffic.src // k) * cells + traffic.dst // k,
        weights=traffic.bytes,
        minlength=cells * cells,
    )
    return flat.astype(np.float64, copy=False).reshape(cells, cells), k


def traffic_png(*, answer: TrafficAnswer, layout: LayoutIn) -> bytes:
    """Heatmaps of a traffic matrix, one panel per kind of traffic, binned to what a picture
    shows (matplotlib is loaded here, only to draw; the caps were checked before the matrix
    was made). View ``all``: GB per iteration; view ``network``: GB/s, bytes per iteration
    over the iteration time (docs/design.md §5.2)."""
    from api import plots

    traffic = answer.traffic
    iteration_s = answer.result.iteration_time_s
    if answer.view == "network" and math.isfinite(iteration_s) and iteration_s > 0:
        scale, unit = 1e-9 / iteration_s, "GB/s"
        seen = f"network view (between nodes), GB/s over the {iteration_s:.3g} s iteration"
    else:
        scale, unit = 1e-9, "GB per iteration"
        seen = "network view (between nodes)" if answer.view == "network" else "all traffic"
    panels = []
    block = 1
    for kind, total in traffic.kind_totals().items():
        if total <= 0:
            continue
        cells, block = binned_matrix(traffic=traffic.select(kind), max_cells=PANEL_CELLS)
        panels.append(plots.HeatmapPanel(kind.value, cells * scale, total * scale))
    if not panels:
        block = max(1, -(-traffic.size // PANEL_CELLS))
    title = (
        f"{answer.level} level, p={layout.pipeline} t={layout.tensor} d={layout.data}"
        f"{f' cp={layout.context_parallel}' if layout.context_parallel > 1 else ''}, "
        f"{answer.gpus} GPUs ({answer.gpus_per_node} per node), {answer.algorithm.value}\n"
        f"{seen}"
    )
    return plots.traffic_heatmap(
        panels,
        size=traffic.size,
        block=block,
        level=answer.level,
        gpus_per_node=answer.gpus_per_node,
        unit=unit,
        title=title,
    )


def traffic_csv_lines(*, answer: TrafficAnswer) -> Iterator[str]:
    """CSV text of a traffic matrix, header ``src,dst,bytes,kind``, in chunks."""
    yield "src,dst,bytes,kind\n"
    step = 50_000
    for start in range(0, len(answer.traffic), step):
        yield "".join(f"{s},{d},{b!r},{k}\n" for s, d, b, k in answer.entries(start, start + step))
