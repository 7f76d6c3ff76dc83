"""SQLAlchemy models of the profiles database (the schema the migrations create).

The migrations in ``commest/migrations/versions`` are the only way the schema is made;
``tests/profiles/test_migrations.py`` checks that these models and the migrations agree.
Timestamps are timezone-aware UTC on every backend (:class:`UTCDateTime`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from estimator.bandwidth import bus_factor, parse_collective

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

NAME_LENGTH = 64
FILENAME_LENGTH = 255
LABEL_LENGTH = 128
UTILIZATION_SOURCES = ("given", "fitted")


def new_revision() -> str:
    """A profile revision never used before (a random UUID, hex; see profiles/revisions.py)."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored as UTC and always read back timezone-aware (SQLite drops tzinfo)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: commest stores timezone-aware UTC timestamps")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base with a constraint naming convention the migrations share."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Profile(Base):
    """One cluster: its GPUs, peak FLOP/s, utilization, and the benchmark runs uploaded for it."""

    __tablename__ = "profiles"
    __table_args__ = (
        CheckConstraint(
            "utilization_source IS NULL OR utilization_source IN ('given', 'fitted')",
            name="utilization_source",
        ),
        CheckConstraint("gpus_per_node >= 1", name="gpus_per_node_positive"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    gpu_model: Mapped[str] = mapped_column(String(NAME_LENGTH))
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    peak_tflops: Mapped[float | None] = mapped_column(Float)  # training dtype, TFLOP/s
    # {dtype: TFLOP/s}, e.g. {"bf16": 312.0, "fp32": 19.5}; column name kept from the schema
    peak_tflops_by_dtype: Mapped[dict[str, float] | None] = mapped_column("peak_flops_json", JSON)
    gpu_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    utilization: Mapped[float | None] = mapped_column(Float)
    utilization_source: Mapped[str | None] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(Text, default="")
    nominal: Mapped[bool] = mapped_column(Boolean, default=False)
    # The envelope format (profiles.bandwidth.ENVELOPE_FORMAT) its placement curves were built
    # with; NULL: not built yet (rows from before migration 0002), answers are built from runs.
    curves_format: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    # renewed by every committed write to the profile or its data (profiles/revisions.py)
    revision: Mapped[str] = mapped_column(String(32), default=new_revision)

    uploads: Mapped[list[Upload]] = relationship(
        back_populates="profile", cascade="all, delete-orphan", passive_deletes=True
    )
    runs: Mapped[list[Run]] = relationship(
        back_populates="profile",
        cascade="all, delete-orphan",
        passive_deletes=True,
        overlaps="upload,runs",
    )
    calibrations: Mapped[list[Calibration]] = relationship(
        back_populates="profile", cascade="all, delete-orphan", passive_deletes=True
    )
    placement_curves: Mapped[list[PlacementCurve]] = relationship(
        back_populates="profile", cascade="all, delete-orphan", passive_deletes=True
    )


class Upload(Base):
    """One uploaded benchmark text, kept verbatim; stored once per profile and parsed content.

    ``content_digest`` is the canonical digest of the runs the text gave (after hints): the same
    table pasted with CRLF line ends or inside a markdown fence is the same upload. NULL only for
    rows from before migration 0002 whose content repeated an older row's. ``sha256`` is the
    digest of the bytes as sent. ``flags`` lists what did not match the profile (a GPU of another
    family, a bandwidth beyond its links) when the upload was forced in; ``disabled`` uploads keep
    their runs but no longer answer bandwidth queries.
    """

    __tablename__ = "uploads"
    __table_args__ = (UniqueConstraint("profile_id", "content_digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    sha256: Mapped[str] = mapped_column(String(64))
    content_digest: Mapped[str | None] = mapped_column(String(64))
    raw_text: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    filename: Mapped[str | None] = mapped_column(String(FILENAME_LENGTH))
    label: Mapped[str | None] = mapped_column(String(LABEL_LENGTH))
    flags: Mapped[list[dict[str, str]] | None] = mapped_column(JSON)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    profile: Mapped[Profile] = relationship(back_populates="uploads")
    runs: Mapped[list[Run]] = relationship(
        back_populates="upload",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="Run.table_index",
        overlaps="runs,profile",
    )


class Run(Base):
    """One benchmark table: a collective at one scale, with its latency-bandwidth fit."""

    __tablename__ = "runs"
    __table_args__ = (
        Index(None, "profile_id", "collective", "ranks", "nodes"),
        Index(None, "upload_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    upload_id: Mapped[int] = mapped_column(ForeignKey("uploads.id", ondelete="CASCADE"))
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    table_index: Mapped[int] = mapped_column(Integer)  # 0-based position in the upload
    collective: Mapped[str] = mapped_column(String(32))
    tool: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str | None] = mapped_column(String(32))
    ranks: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer)
    ranks_per_node: Mapped[int | None] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    dtype: Mapped[str | None] = mapped_column(String(16))
    redop: Mapped[str | None] = mapped_column(String(16))
    tool_version: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    warnings: Mapped[list[str]] = mapped_column(JSON, default=list)
    alpha_us: Mapped[float | None] = mapped_column(Float)  # fitted latency T = α + S/β
    beta_gbps: Mapped[float | None] = mapped_column(Float)  # fitted β in algbw (S / T)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    upload: Mapped[Upload] = relationship(back_populates="runs", overlaps="runs")
    profile: Mapped[Profile] = relationship(back_populates="runs", overlaps="runs")
    points: Mapped[list[Point]] = relationship(
        back_populates="run",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="(Point.in_place, Point.size_bytes)",
    )

    @property
    def beta_algbw_gbps(self) -> float | None:
        """The fitted β as algorithm bandwidth (the stored ``beta_gbps``)."""
        return self.beta_gbps

    @property
    def beta_busbw_gbps(self) -> float | None:
        """The fitted β as bus bandwidth: algbw × the nccl-tests bus factor of this run."""
        if self.beta_gbps is None:
            return None
        return self.beta_gbps * float(bus_factor(parse_collective(self.collective), self.ranks))


class Point(Base):
    """One row half of a benchmark table (out-of-place or in-place)."""

    __tablename__ = "points"
    __table_args__ = (Index(None, "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    count: Mapped[int | None] = mapped_column(BigInteger)
    time_us: Mapped[float] = mapped_column(Float)
    algbw_gbps: Mapped[float] = mapped_column(Float)
    busbw_gbps: Mapped[float] = mapped_column(Float)
    in_place: Mapped[bool] = mapped_column(Boolean)

    run: Mapped[Run] = relationship(back_populates="points")


class PlacementCurve(Base):
    """The enabled runs of one (collective, ranks, nodes) of a profile, merged.

    ``curve`` is ``profiles.bandwidth.Envelope.to_json()``: what bandwidth answers need, kept up
    to date by every write to the profile's runs, so that reading a profile's bandwidth costs the
    same with 10 runs or 5,000.
    """

    __tablename__ = "placement_curves"
    __table_args__ = (UniqueConstraint("profile_id", "collective", "ranks", "nodes"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    collective: Mapped[str] = mapped_column(String(32))
    ranks: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer)
    run_count: Mapped[int] = mapped_column(Integer)
    curve: Mapped[str] = mapped_column(Text)

    profile: Mapped[Profile] = relationship(back_populates="placement_curves")


class Calibration(Base):
    """A fit of u from measured iteration times: inputs, result and residuals."""

    __tablename__ = "calibrations"
    __table_args__ = (Index(None, "profile_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    inputs: Mapped[Any] = mapped_column(JSON)
    utilization: Mapped[float] = mapped_column(Float)
    mape_pct: Mapped[float] = mapped_column(Float)
    residuals: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    profile: Mapped[Profile] = relationship(back_populates="calibrations")


class Baseline(Base):
    """A named estimate request and its iteration time, for CI checks against a baseline."""

    __tablename__ = "baselines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    request: Mapped[Any] = mapped_column(JSON)
    iteration_time_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class MeasuredRun(Base):
    """A training run measured on the profile's cluster: the request it ran and its steady-state
    iteration time, read from the run's log; stored once per profile and parsed content."""

    __tablename__ = "measured_runs"
    __table_args__ = (UniqueConstraint("profile_id", "content_sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profiles.id", ondelete="CASCADE"))
    label: Mapped[str] = mapped_column(String(200))
    file_name: Mapped[str | None] = mapped_column(String(255))
    format: Mapped[str] = mapped_column(String(32))  # megatron-lm, megatron-deepspeed, nemo
    source_sha256: Mapped[str] = mapped_column(String(64))  # of the uploaded text
    content_sha256: Mapped[str] = mapped_column(String(64))  # of what was read (idempotency)
    request: Mapped[Any] = mapped_column(JSON)  # model / layout / training
    iteration_time_s: Mapped[float] = mapped_column(Float)
    intervals_used: Mapped[int] = mapped_column(Integer)
    iterations_used: Mapped[list[int]] = mapped_column(JSON)
    dropped: Mapped[Any] = mapped_column(JSON)  # [{"iteration", "reason"}]
    hints: Mapped[Any] = mapped_column(JSON)  # the query parameters that filled gaps
    notes: Mapped[list[str]] = mapped_column(JSON)
    warnings: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
