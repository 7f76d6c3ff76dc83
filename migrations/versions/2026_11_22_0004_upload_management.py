"""Uploads users can manage, and merged placement curves so reads stay fast as profiles grow.

- ``uploads``: ``filename``, ``label``, ``flags`` (what did not match the profile), ``disabled``,
  and ``content_digest``: idempotency moves from the bytes (``sha256``, kept as information) to
  the parsed content, so the same table with CRLF line ends or in a markdown fence is one upload.
  Existing rows get their digest computed here from their stored runs and points (the same
  canonical form ``profiles.repository.content_digest`` uses, frozen below as of this revision);
  where two existing uploads hold the same content, the later keeps NULL (NULLs never collide).
- ``profiles.curves_format``: NULL until the profile's placement curves are built (the next
  write to its runs builds them; until then answers are built from the runs, as before).
- ``placement_curves``: one merged curve per (profile, collective, ranks, nodes).

Downgrade drops all of it; uploads whose bytes repeat an earlier upload's (possible once
idempotency is on content) are deleted so the old unique (profile_id, sha256) can return.

Revision ID: 2026_11_22_0004
Revises: 2026_11_22_0003
Create Date: 2026-11-22 10:00:00 UTC
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "2026_11_22_0004"
down_revision: str | Sequence[str] | None = "2026_11_22_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _digest(runs: list[list[Any]]) -> str:
    """Canonical digest of runs (frozen copy of profiles.repository.content_digest, format 1)."""
    text = json.dumps(["commest-content-1", runs], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _backfill_digests() -> None:
    bind = op.get_bind()
    uploads = sa.table("uploads", sa.column("id"), sa.column("profile_id"))
    runs = sa.table(
        "runs",
        sa.column("id"),
        sa.column("upload_id"),
        sa.column("table_index"),
        sa.column("collective"),
        sa.column("tool"),
        sa.column("backend"),
        sa.column("ranks"),
        sa.column("nodes"),
        sa.column("dtype"),
        sa.column("redop"),
    )
    points = sa.table(
        "points",
        sa.column("run_id"),
        sa.column("size_bytes"),
        sa.column("time_us"),
        sa.column("in_place"),
    )
    digests = sa.table("uploads", sa.column("id"), sa.column("content_digest"))
    seen: set[tuple[int, str]] = set()
    for upload_id, profile_id in bind.execute(
        sa.select(uploads.c.id, uploads.c.profile_id).order_by(uploads.c.id)
    ).all():
        content: list[list[Any]] = []
        for run in bind.execute(
            sa.select(runs).where(runs.c.upload_id == upload_id).order_by(runs.c.table_index)
        ).all():
            rows = bind.execute(
                sa.select(points.c.size_bytes, points.c.time_us, points.c.in_place).where(
                    points.c.run_id == run.id
                )
            ).all()
            pts = sorted([bool(p), int(s), float(t)] for s, t, p in rows)
            content.append(
                [
                    run.collective,
                    run.tool,
                    run.backend,
                    int(run.ranks),
                    int(run.nodes),
                    run.dtype,
                    run.redop,
                    pts,
                ]
            )
        key = (int(profile_id), _digest(content))
        if key in seen:
            continue  # same content as an earlier upload of the profile: NULL
        seen.add(key)
        bind.execute(
            sa.update(digests).where(digests.c.id == upload_id).values(content_digest=key[1])
        )


def upgrade() -> None:
    with op.batch_alter_table("uploads") as batch:
        batch.add_column(sa.Column("content_digest", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("filename", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("label", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("flags", sa.JSON(), nullable=True))
        batch.add_column(
            sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("curves_format", sa.Integer(), nullable=True))
    op.create_table(
        "placement_curves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("profile_id", sa.Integer(), nullable=False),
        sa.Column("collective", sa.String(length=32), nullable=False),
        sa.Column("ranks", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("curve", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_placement_curves_profile_id_profiles"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placement_curves")),
        sa.UniqueConstraint(
            "profile_id",
            "collective",
            "ranks",
            "nodes",
            name=op.f("uq_placement_curves_profile_id_collective_ranks_nodes"),
        ),
    )
    _backfill_digests()
    with op.batch_alter_table("uploads") as batch:
        batch.drop_constraint(op.f("uq_uploads_profile_id_sha256"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_uploads_profile_id_content_digest"), ["profile_id", "content_digest"]
        )


def downgrade() -> None:
    bind = op.get_bind()
    uploads = sa.table("uploads", sa.column("id"), sa.column("profile_id"), sa.column("sha256"))
    later = sa.alias(uploads, "later")
    earlier = sa.alias(uploads, "earlier")
    duplicates = [
        row.id
        for row in bind.execute(
            sa.select(later.c.id).where(
                sa.exists().where(
                    earlier.c.profile_id == later.c.profile_id,
                    earlier.c.sha256 == later.c.sha256,
                    earlier.c.id < later.c.id,
                )
            )
        ).all()
    ]
    if duplicates:
        runs = sa.table("runs", sa.column("id"), sa.column("upload_id"))
        points = sa.table("points", sa.column("run_id"))
        doomed = sa.select(runs.c.id).where(runs.c.upload_id.in_(duplicates))
        bind.execute(sa.delete(points).where(points.c.run_id.in_(doomed)))
        bind.execute(sa.delete(runs).where(runs.c.upload_id.in_(duplicates)))
        bind.execute(sa.delete(uploads).where(uploads.c.id.in_(duplicates)))
    with op.batch_alter_table("uploads") as batch:
        batch.drop_constraint(op.f("uq_uploads_profile_id_content_digest"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_uploads_profile_id_sha256"), ["profile_id", "sha256"]
        )
        batch.drop_column("disabled")
        batch.drop_column("flags")
        batch.drop_column("label")
        batch.drop_column("filename")
        batch.drop_column("content_digest")
    op.drop_table("placement_curves")
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("curves_format")
