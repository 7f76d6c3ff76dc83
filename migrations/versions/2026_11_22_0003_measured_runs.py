"""Measured runs: training runs of a profile's cluster read from their logs (for calibration).

Revision ID: 2026_11_22_0003
Revises: 2026_11_22_0002
Create Date: 2026-11-22 12:00:00 UTC
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2026_11_22_0003"
down_revision: str | Sequence[str] | None = "2026_11_22_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "measured_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("profile_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("file_name", sa.String(length=255), nullable=True),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("iteration_time_s", sa.Float(), nullable=False),
        sa.Column("intervals_used", sa.Integer(), nullable=False),
        sa.Column("iterations_used", sa.JSON(), nullable=False),
        sa.Column("dropped", sa.JSON(), nullable=False),
        sa.Column("hints", sa.JSON(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_measured_runs_profile_id_profiles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measured_runs")),
        sa.UniqueConstraint(
            "profile_id", "content_sha256", name=op.f("uq_measured_runs_profile_id_content_sha256")
        ),
    )


def downgrade() -> None:
    op.drop_table("measured_runs")
