"""Initial schema: profiles, uploads, runs, points, calibrations, baselines.

Revision ID: 2026_11_21_0001
Revises:
Create Date: 2026-11-21 19:40:00 UTC
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2026_11_21_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("peak_tflops", sa.Float(), nullable=True),
        sa.Column("peak_flops_json", sa.JSON(), nullable=True),
        sa.Column("gpu_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("utilization", sa.Float(), nullable=True),
        sa.Column("utilization_source", sa.String(length=16), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("nominal", sa.Boolean(), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.CheckConstraint(
            "utilization_source IS NULL OR utilization_source IN ('given', 'fitted')",
            name=op.f("ck_profiles_utilization_source"),
        ),
        sa.CheckConstraint("gpus_per_node >= 1", name=op.f("ck_profiles_gpus_per_node_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
        sa.UniqueConstraint("name", name=op.f("uq_profiles_name")),
    )
    op.create_table(
        "baselines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("iteration_time_s", sa.Float(), nullable=False),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_baselines")),
        sa.UniqueConstraint("name", name=op.f("uq_baselines_name")),
    )
    op.create_table(
        "uploads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("profile_id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("raw_text", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_uploads_profile_id_profiles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uploads")),
        sa.UniqueConstraint("profile_id", "sha256", name=op.f("uq_uploads_profile_id_sha256")),
    )
    op.create_table(
        "calibrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("profile_id", sa.Integer(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("utilization", sa.Float(), nullable=False),
        sa.Column("mape_pct", sa.Float(), nullable=False),
        sa.Column("residuals", sa.JSON(), nullable=False),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_calibrations_profile_id_profiles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrations")),
    )
    op.create_index(op.f("ix_calibrations_profile_id"), "calibrations", ["profile_id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("upload_id", sa.Integer(), nullable=False),
        sa.Column("profile_id", sa.Integer(), nullable=False),
        sa.Column("table_index", sa.Integer(), nullable=False),
        sa.Column("collective", sa.String(length=32), nullable=False),
        sa.Column("tool", sa.String(length=32), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("ranks", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("ranks_per_node", sa.Integer(), nullable=True),
        sa.Column("gpu_model", sa.String(length=64), nullable=True),
        sa.Column("dtype", sa.String(length=16), nullable=True),
        sa.Column("redop", sa.String(length=16), nullable=True),
        sa.Column("tool_version", sa.String(length=64), nullable=True),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("alpha_us", sa.Float(), nullable=True),
        sa.Column("beta_gbps", sa.Float(), nullable=True),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_runs_profile_id_profiles"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["upload_id"],
            ["uploads.id"],
            name=op.f("fk_runs_upload_id_uploads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(
        op.f("ix_runs_profile_id_collective_ranks_nodes"),
        "runs",
        ["profile_id", "collective", "ranks", "nodes"],
    )
    op.create_index(op.f("ix_runs_upload_id"), "runs", ["upload_id"])
    op.create_table(
        "points",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=True),
        sa.Column("time_us", sa.Float(), nullable=False),
        sa.Column("algbw_gbps", sa.Float(), nullable=False),
        sa.Column("busbw_gbps", sa.Float(), nullable=False),
        sa.Column("in_place", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_points_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_points")),
    )
    op.create_index(op.f("ix_points_run_id"), "points", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_points_run_id"), table_name="points")
    op.drop_table("points")
    op.drop_index(op.f("ix_runs_upload_id"), table_name="runs")
    op.drop_index(op.f("ix_runs_profile_id_collective_ranks_nodes"), table_name="runs")
    op.drop_table("runs")
    op.drop_index(op.f("ix_calibrations_profile_id"), table_name="calibrations")
    op.drop_table("calibrations")
    op.drop_table("uploads")
    op.drop_table("baselines")
    op.drop_table("profiles")
