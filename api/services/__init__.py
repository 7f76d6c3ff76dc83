"""One service module per resource, beside its router in ``api/routes/`` (same name).

Service functions are keyword-only, take request schemas and a session or profile source,
and return response schemas; they know nothing of HTTP and import neither fastapi nor
starlette, so the command line can call them in process without building the web app.
Translation of a request into engine objects, shared by several resources, is
``api.scenario``.
"""
