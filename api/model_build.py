"""Whether ``api.schemas`` builds its pydantic validators at import or on first use.

A CLI command validates one request and writes one answer: building the validators of the
other eighty-odd models at import is most of its start-up (docs/design.md §8.3). The web app
needs them all built up front (FastAPI reads every model as it declares the routes), so only
the CLI entry point turns deferral on, for commands other than ``serve``, before ``api.schemas``
is imported. A process that imported ``api.schemas`` already keeps what it built.
"""

from __future__ import annotations

DEFER = False
