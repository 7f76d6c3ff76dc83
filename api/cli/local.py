"""The REST contract answered in this process (no ``--server``): the routes' service functions.

No web app is built: each operation validates its request with the route's own schema, calls
the service function the route calls, and answers the JSON the server would send
(``model_dump(mode="json")``); a failure becomes the problem the server would answer
(``api.problem_details``). The database is opened, migrated and given its nominal profiles
as the server does it (``Runtime.start``), and only by operations that read or write it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from api.cli.client import Client, Problem
from api.problem_details import ProblemDetails, problem_of, request_problem

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from api.runtime import Runtime
    from api.settings import Settings
    from api.snapshots import Profiles, ProfileSnapshot

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def _problem(details: ProblemDetails) -> Problem:
    return Problem(details.status, details.body)


def _errors(validate: Callable[[], T], loc: tuple[str, ...]) -> tuple[T | None, list[Any]]:
    """``validate()``, or its errors located as FastAPI locates them (``body``, ``query`` ...)."""
    try:
        return validate(), []
    except PydanticValidationError as exc:
        return None, [{**e, "loc": (*loc, *e["loc"])} for e in exc.errors()]


def _validated(model: type[M], value: Any, where: str) -> M:
    """``value`` as ``model``, refused as the server refuses it (``where``: body, query)."""
    checked, errors = _errors(lambda: model.model_validate(value), (where,))
    if checked is None:
        raise _problem(request_problem(errors))
    return checked


@lru_cache(maxsize=1)
def _name() -> TypeAdapter[str]:
    """The ``{name}`` path parameter of the baselines routes (``api.schemas.Name``)."""
    from api.schemas import Name

    return TypeAdapter(Name)


def _json(answer: BaseModel) -> Any:
    """The JSON the server sends for ``answer``, decoded."""
    return answer.model_dump(mode="json")


class LocalClient(Client):
    """Each operation is the route's service call, in this process."""

    where = "the local service"

    def __init__(self, settings: Settings, token: str | None) -> None:
        self.settings = settings
        self.token = token
        self._runtime: Runtime | None = None

    @classmethod
    @contextmanager
    def open(cls, settings: Settings, token: str | None) -> Iterator[LocalClient]:
        """A client of the service in this process over ``settings``."""
        client = cls(settings, token)
        try:
            yield client
        finally:
            client.close()

    def close(self) -> None:
        """Close the database connections, if any were opened."""
        if self._runtime is not None:
            self._runtime.close()

    # -- what the routes get from their dependencies ---------------------------------------

    def _get_runtime(self) -> Runtime:
        if self._runtime is None:
            from api.runtime import Runtime

            self._runtime = Runtime(self.settings)
        return self._runtime

    def runtime(self) -> Runtime:
        """The database, started as the server starts it (migrations, nominal profiles)."""
        runtime = self._get_runtime()
        runtime.start()
        return runtime

    def profiles(self) -> Profiles:
        """Where ``cluster.profile`` is looked up (see :class:`_LocalProfiles`)."""
        return _LocalProfiles(self)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A write unit of work, as the routes run one."""
        with self.runtime().transaction() as session:
            yield session

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A read unit of work, as the routes run one."""
        with self.runtime().read_session() as session:
            yield session

    def authorize(self) -> None:
        """A write's token check (the route's ``Writer`` dependency): ``--token`` if given,
        else the local service's own token (as before: this process reads the token file)."""
        from api.tokens import authorize

        expected = self._get_runtime().token()
        authorize(self.token or expected.decode("utf-8"), expected)

    def call(self, what: str, work: Callable[[], T]) -> T:
        """``work()``, a failure raised as the problem the server answers ``what`` with."""
        try:
            return work()
        except Problem:
            raise
        except Exception as exc:
            details = problem_of(exc, what)
            raise _problem(details) from exc

    # -- the operations -----------------------------------------------------------------------

    def estimate(self, body: Mapping[str, Any]) -> Any:
        from api.schemas import EstimateRequest
        from api.services import estimates

        request = _validated(EstimateRequest, body, "body")
        return self.call(
            "POST /v1/estimates",
            lambda: _json(estimates.create_estimate(request=request, profiles=self.profiles())),
        )

    def check(self, body: Mapping[str, Any]) -> Any:
        from api.schemas import CheckRequest
        from api.services import checks

        request = _validated(CheckRequest, body, "body")
        return self.call(
            "POST /v1/checks",
            lambda: _json(
                checks.create_check(
                    request=request, profiles=self.profiles(), session_scope=self.read_session
                )
            ),
        )

    def plan(self, body: Mapping[str, Any]) -> Any:
        from api.schemas import PlanRequest
        from api.services import plans

        request = _validated(PlanRequest, body, "body")
        return self.call(
            "POST /v1/plans",
            lambda: _json(
                plans.create_plan(
                    request=request,
                    profiles=self.profiles(),
                    max_layouts=self.settings.max_plan_layouts,
                )
            ),
        )

    def traffic_matrix(self, body: Mapping[str, Any]) -> bytes:
        from api.schemas import TrafficMatrixRequest
        from api.services import matrices

        request = _validated(TrafficMatrixRequest, body, "body")

        def work() -> bytes:
            answer = matrices.create_traffic_matrix(
                request=request,
                profiles=self.profiles(),
                max_matrix_gpus=self.settings.max_matrix_gpus,
                max_dense_gpus=self.settings.max_dense_gpus,
                max_matrix_entries=self.settings.max_matrix_entries,
            )
            if request.format == "csv":
                return "".join(matrices.traffic_csv_lines(answer=answer)).encode("utf-8")
            if request.format == "png":
                return matrices.traffic_png(answer=answer, layout=request.layout)
            return matrices.traffic_response(answer=answer).model_dump_json(by_alias=True).encode()

        return self.call("POST /v1/traffic-matrices", work)

    def timeline(self, body: Mapping[str, Any]) -> bytes:
        from api.schemas import TimelineRequest
        from api.services import timelines

        request = _validated(TimelineRequest, body, "body")

        def work() -> bytes:
            answer = timelines.create_timeline(request=request, profiles=self.profiles())
            if request.format in ("png", "svg"):
                return timelines.timeline_picture(answer=answer, fmt=request.format)
            response = timelines.timeline_response(answer=answer)
            return response.model_dump_json(by_alias=True).encode()

        return self.call("POST /v1/timelines", work)

    def bandwidth(self, profile: str, params: Mapping[str, Any]) -> Any:
        from api.schemas import BandwidthQuery
        from api.services import runs

        query = _validated(BandwidthQuery, params, "query")
        return self.call(
            f"GET /v1/profiles/{profile}/bandwidth",
            lambda: _json(
                runs.bandwidth(
                    snapshot=self.profiles().profile(profile),
                    op=query.op,
                    ranks=query.ranks,
                    nodes=query.nodes,
                    size_bytes=query.size_bytes,
                )
            ),
        )

    def create_profile(self, body: Mapping[str, Any]) -> Any:
        from api.schemas import ProfileCreate
        from api.services import profiles

        def work() -> Any:
            self.authorize()
            request = _validated(ProfileCreate, body, "body")
            with self.session() as session:
                return _json(profiles.create_profile(session=session, body=request))

        return self.call("POST /v1/profiles", work)

    def list_profiles(self) -> Any:
        from api.services import profiles

        def work() -> Any:
            with self.read_session() as session:
                return _json(profiles.list_profiles(session=session))

        return self.call("GET /v1/profiles", work)

    def get_profile(self, name: str) -> Any:
        from api.services import profiles

        def work() -> Any:
            with self.read_session() as session:
                return _json(profiles.get_profile(session=session, name=name))

        return self.call(f"GET /v1/profiles/{name}", work)

    def delete_profile(self, name: str) -> None:
        from api.services import profiles

        def work() -> None:
            self.authorize()
            with self.session() as session:
                profiles.delete_profile(session=session, name=name)

        self.call(f"DELETE /v1/profiles/{name}", work)

    def _upload_text(self, content: bytes, filename: str) -> str:
        """An uploaded file's text, capped and decoded as the upload routes do."""
        from api.services import runs
        from estimator.errors import LimitError

        cap = self.settings.max_upload_bytes
        if len(content) > cap:
            raise LimitError(
                f"the upload is {len(content)} bytes, over the cap of {cap} bytes "
                "(COMMEST_MAX_UPLOAD_BYTES)",
                size_bytes=len(content),
                max_upload_bytes=cap,
            )
        return runs.decode_upload(content, f"files[{filename}]")

    def upload_runs(
        self, profile: str, filename: str, content: bytes, hints: Mapping[str, str]
    ) -> Any:
        from api.schemas import UploadHints
        from api.services import runs

        def work() -> Any:
            self.authorize()
            label = hints.get("label")  # a query parameter of its own beside the hints
            query = _validated(
                UploadHints, {k: v for k, v in hints.items() if k != "label"}, "query"
            )
            text = self._upload_text(content, filename)
            prepared = runs.prepare_uploads(texts=[(filename, text)], hints=query, label=label)
            with self.session() as session:
                answer, _ = runs.store_uploads(session=session, name=profile, prepared=prepared)
            return _json(answer)

        return self.call(f"POST /v1/profiles/{profile}/runs", work)

    def list_uploads(self, profile: str, *, limit: int, offset: int) -> Any:
        from api.services import uploads

        def work() -> Any:
            with self.read_session() as session:
                page = uploads.list_uploads(
                    session=session, name=profile, limit=limit, offset=offset
                )
            return _json(page)

        return self.call(f"GET /v1/profiles/{profile}/uploads", work)

    def remove_upload(self, profile: str, upload_id: int) -> None:
        from api.services import uploads

        def work() -> None:
            self.authorize()
            with self.session() as session:
                uploads.remove_upload(session=session, name=profile, upload_id=upload_id)

        self.call(f"DELETE /v1/profiles/{profile}/uploads/{upload_id}", work)

    def set_upload_disabled(self, profile: str, upload_id: int, *, disabled: bool) -> Any:
        from api.schemas import UploadPatch
        from api.services import uploads

        def work() -> Any:
            self.authorize()
            body = UploadPatch(disabled=disabled)
            with self.session() as session:
                answer = uploads.patch_upload(
                    session=session, name=profile, upload_id=upload_id, body=body
                )
            return _json(answer)

        return self.call(f"PATCH /v1/profiles/{profile}/uploads/{upload_id}", work)

    def upload_training_log(
        self, profile: str, filename: str, content: bytes, hints: Mapping[str, str]
    ) -> Any:
        from api.schemas import TrainingLogHints
        from api.services import training_logs

        def work() -> Any:
            self.authorize()
            query = _validated(TrainingLogHints, hints, "query")
            text = self._upload_text(content, filename)
            parsed = training_logs.parse(text=text, hints=query)  # before the write, as routed
            with self.session() as session:
                answer, _ = training_logs.store(
                    session=session,
                    name=profile,
                    text=text,
                    parsed=parsed,
                    hints=query,
                    file_name=filename,
                )
            return _json(answer)

        return self.call(f"POST /v1/profiles/{profile}/training-logs", work)

    def calibrate(self, profile: str, body: Mapping[str, Any]) -> Any:
        from api.schemas import CalibrationRequest
        from api.services import calibrations

        def work() -> Any:
            self.authorize()
            request = _validated(CalibrationRequest, body, "body")
            runtime = self.runtime()
            with runtime.transaction() as session:
                return _json(
                    calibrations.create_calibration(
                        session=session,
                        name=profile,
                        body=request,
                        profiles=runtime.profiles_in(session),
                    )
                )

        return self.call(f"POST /v1/profiles/{profile}/calibrations", work)

    def put_baseline(self, name: str, body: Mapping[str, Any]) -> Any:
        from api.schemas import BaselinePut
        from api.services import baselines

        def work() -> Any:
            self.authorize()
            checked, path_errors = _errors(lambda: _name().validate_python(name), ("path", "name"))
            request, body_errors = _errors(lambda: BaselinePut.model_validate(body), ("body",))
            if checked is None or request is None:  # reported together, as FastAPI does
                raise _problem(request_problem(path_errors + body_errors))
            runtime = self.runtime()
            with runtime.transaction() as session:
                answer, _ = baselines.put_baseline(
                    session=session,
                    name=checked,
                    body=request,
                    profiles=runtime.profiles_in(session),
                )
            return _json(answer)

        return self.call(f"PUT /v1/baselines/{name}", work)

    def get_baseline(self, name: str) -> Any:
        from api.services import baselines

        def work() -> Any:
            checked, errors = _errors(lambda: _name().validate_python(name), ("path", "name"))
            if checked is None:
                raise _problem(request_problem(errors))
            with self.read_session() as session:
                return _json(baselines.get_baseline(session=session, name=checked))

        return self.call(f"GET /v1/baselines/{name}", work)


class _LocalProfiles:
    """Profiles for a local command: straight from the SQLite file when it can answer
    (``api.cli.sqlite_profiles``: no SQLAlchemy), else the server's own path, the database
    started first. An estimate with explicit bandwidths asks for none and opens nothing."""

    def __init__(self, client: LocalClient) -> None:
        self.client = client

    def profile(self, name: str) -> ProfileSnapshot:
        from api.cli.sqlite_profiles import SqliteProfiles, sqlite_file

        path = sqlite_file(self.client.settings.resolved_database_url)
        if path is not None:
            snapshot = SqliteProfiles(path).profile(name)
            if snapshot is not None:
                return snapshot
        return self.client.runtime().profiles().profile(name)
