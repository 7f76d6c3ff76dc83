# commest API image: the package with the PostgreSQL driver, run as a non-root user.
# Build: docker build -t commest .   Run: see docker-compose.yml (api + postgres:16).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY estimator ./estimator
COPY profiles ./profiles
COPY api ./api
COPY migrations ./migrations
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    COMMEST_DATA_DIR=/data \
    COMMEST_PORT=8000
RUN groupadd --system --gid 10001 commest \
    && useradd --system --uid 10001 --gid commest --home-dir /data --shell /usr/sbin/nologin commest \
    && mkdir -p /data \
    && chown commest:commest /data
COPY --from=build /wheels /wheels
RUN pip install "$(ls /wheels/commest-*.whl)[postgres]" && rm -rf /wheels
USER commest
WORKDIR /data
# SQLite (when COMMEST_DATABASE_URL is unset) and the generated API token live here.
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('COMMEST_PORT', '8000') + '/healthz', timeout=4)" || exit 1
# `commest serve` applies the migrations, adds the nominal profiles, then runs uvicorn.
ENTRYPOINT ["commest"]
CMD ["serve", "--host", "0.0.0.0"]
