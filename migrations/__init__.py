"""Alembic environment and revisions of the profiles database (shipped inside the package)."""
