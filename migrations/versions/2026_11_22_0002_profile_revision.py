"""Profile revision: a random token renewed by every committed write to a profile or its data.

Caches of what is derived from a profile are keyed by (profile id, revision), a key that never
repeats (ids do: SQLite reuses the rowid of a deleted newest row). Every existing profile gets
a token of its own.

Revision ID: 2026_11_22_0002
Revises: 2026_11_21_0001
Create Date: 2026-11-22 09:00:00 UTC
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2026_11_22_0002"
down_revision: str | Sequence[str] | None = "2026_11_21_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_profiles = sa.table("profiles", sa.column("id", sa.Integer()), sa.column("revision"))


def upgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("revision", sa.String(length=32), nullable=True))
    bind = op.get_bind()
    for (profile_id,) in bind.execute(sa.select(_profiles.c.id)).all():
        bind.execute(
            sa.update(_profiles)
            .where(_profiles.c.id == profile_id)
            .values(revision=uuid.uuid4().hex)
        )
    with op.batch_alter_table("profiles") as batch:
        batch.alter_column("revision", existing_type=sa.String(length=32), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("revision")
