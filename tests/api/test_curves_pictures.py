"""GET /v1/profiles/{name}/curves?format=png: one panel per collective, a bounded pick of the
runs, the GPU family's nominal curves overlaid (docs/design.md §5.2)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from api import plots
from api.plots import PNG_SIGNATURE
from api.schemas import CurveOut
from api.services import runs as service
from profiles.db import session_factory, transaction
from profiles.parsed import ParsedPoint, ParsedRun
from profiles.repository import create_profile, store_parsed_runs

SIZES = [2**k for k in range(3, 20)]


def _run(op: str, nodes: int) -> ParsedRun:
    points = [
        ParsedPoint(s, s // 4, 10.0 + s / 1e5, s / (10e3 + s / 1e2), s / (10e3 + s / 1e2), False)
        for s in SIZES
    ]
    return ParsedRun(
        collective=op, tool="nccl-tests", backend="nccl", ranks=8 * nodes, nodes=nodes,
        ranks_per_node=8, gpu_model=None, dtype="float", redop="sum", tool_version=None,
        points=points,
    )  # fmt: skip


def _fill(engine: Engine, runs: int) -> None:
    """A measured A100 profile ``lab`` with ``runs`` all_reduce runs and 3 all_gather runs."""
    factory = session_factory(engine)
    with transaction(factory) as session:
        create_profile(session=session, name="lab", gpu_model="A100-SXM4-80GB", gpus_per_node=8)
        parsed = [_run("all_reduce", 2 ** (i % 6)) for i in range(runs)]
        parsed += [_run("all_gather", n) for n in (1, 2, 4)]
        store_parsed_runs(session=session, profile_name="lab", text="runs", runs=parsed)


def test_the_picture_draws_a_bounded_pick_and_counts_the_rest(
    client: TestClient, db_engine: Engine
) -> None:
    _fill(db_engine, 40)
    with transaction(session_factory(db_engine)) as session:
        picked = service.picture_curves(session=session, name="lab", op=None, include_nominal=True)
    by_op = {op: [c for c in picked.curves if c.op == op] for op in ("all_reduce", "all_gather")}
    assert len(by_op["all_reduce"]) == plots.MAX_SERIES
    assert picked.omitted == {"all_reduce": 40 - plots.MAX_SERIES}
    assert len(by_op["all_gather"]) == 3
    # spread over the placements: every node count of the 40 runs is drawn
    assert {c.nodes for c in by_op["all_reduce"]} == {1, 2, 4, 8, 16, 32}
    # the measured A100 profile's family curves come along, nominal
    assert picked.family_name == "dgx-a100-nominal"
    assert picked.family and all(c.nominal for c in picked.family)
    png = client.get("/v1/profiles/lab/curves", params={"format": "png"})
    assert png.status_code == 200 and png.content.startswith(PNG_SIGNATURE)
    # json still lists every run
    assert len(client.get("/v1/profiles/lab/curves").json()["curves"]) == 43


def test_include_nominal_false_leaves_the_family_out(client: TestClient, db_engine: Engine) -> None:
    _fill(db_engine, 2)
    with transaction(session_factory(db_engine)) as session:
        picked = service.picture_curves(session=session, name="lab", op=None, include_nominal=False)
    assert picked.family == [] and picked.omitted == {}


def test_long_curves_are_thinned_and_many_series_capped() -> None:
    sizes = list(range(1, 100_001))
    x, _ = plots._thinned(sizes, [float(s) for s in sizes])
    assert x.size <= plots.MAX_POINTS and (x[0], x[-1]) == (1, 100_000)
    curve = CurveOut.model_validate(
        {
            "op": "all_reduce", "ranks": 8, "nodes": 1, "backend": "nccl", "dtype": None,
            "run_id": 1, "label": "r", "nominal": False, "in_place": False,
            "sizes_bytes": sizes, "busbw_gbps": [float(s) for s in sizes], "alpha_us": None,
            "beta_gbps": None, "beta_algbw_gbps": None, "beta_busbw_gbps": None,
        }
    )  # fmt: skip
    png = plots.bandwidth_curves([curve] * 50, title="t", omitted={"all_gather": 7})
    assert png.startswith(PNG_SIGNATURE)


def test_a_profile_without_runs_draws_no_curves(client: TestClient, db_engine: Engine) -> None:
    with transaction(session_factory(db_engine)) as session:
        create_profile(session=session, name="empty", gpu_model="H100", gpus_per_node=8)
    png = client.get("/v1/profiles/empty/curves", params={"format": "png"})
    assert png.status_code == 200 and png.content.startswith(PNG_SIGNATURE)
