"""What ships is what was tested (issue 9 §7).

The Docker image installs the wheel its build stage makes, not the checkout, and no Docker
engine runs where the tests do. So this module does what the Dockerfile does, without Docker:
it copies the build stage's ``COPY`` sources (minus ``.dockerignore``) into an empty folder,
runs the build stage's ``pip wheel`` there, installs that wheel (with the extras the runtime
stage asks for; dependencies from the configured index) into a fresh virtual environment and
uses it from a temporary folder, with the source tree off ``sys.path``. Migrations, the
validation set and every other non-Python file of the packages must be in the wheel.

The wheel and the environment are built once per test session (slow: tens of seconds, most of
it installing the dependencies).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from profiles.db import head_revision
from profiles.validation.report import run_validation
from tests.api.servers import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
EXAMPLE_ESTIMATE = REPO / "examples" / "estimate-gpt3-175b.json"
PIP_TIMEOUT_S = 600  # a cold wheel cache on a slow index; a hang is a failure, not a wait
START_TIMEOUT_S = 60.0  # liveness bound for `commest serve`, not a speed target


def shipped_packages() -> list[str]:
    """The top-level packages pyproject.toml ships (``packages.find`` include patterns)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    include: list[str] = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.rstrip("*").rstrip(".") for pattern in include})


# --- the Dockerfile's build stage, without Docker ------------------------------------------


@dataclass(frozen=True)
class BuildStage:
    copies: list[tuple[list[str], str]]  # (sources, destination) of each COPY
    runs: list[str]
    install: str  # the runtime stage's RUN that installs the wheel


def read_dockerfile() -> BuildStage:
    """The build stage's COPY and RUN lines and the runtime stage's wheel install."""
    stages: list[list[str]] = []
    for raw in DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        line = raw.strip()
        if line.upper().startswith("FROM "):
            stages.append([])
        elif line and not line.startswith("#") and stages:
            stages[-1].append(line)
    assert len(stages) >= 2, "the Dockerfile should build the wheel in a stage of its own"
    build, runtime = stages[0], stages[-1]
    copies = []
    for line in build:
        if line.upper().startswith("COPY "):
            *sources, destination = line.split()[1:]
            assert not any(s.startswith("--") for s in sources), line
            copies.append((sources, destination))
    runs = [line[4:].strip() for line in build if line.upper().startswith("RUN ")]
    installs = [line for line in runtime if "pip install" in line and "/wheels" in line]
    assert len(installs) == 1, "the runtime stage should pip install the built wheel"
    return BuildStage(copies, runs, installs[0])


def dockerignore_patterns() -> list[re.Pattern[str]]:
    """``.dockerignore`` as regular expressions (Go filepath.Match plus ``**``)."""
    path = REPO / ".dockerignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    patterns = []
    for raw in lines:
        line = raw.strip().strip("/")
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("!"), "exceptions in .dockerignore: teach this test them"
        regex = ""
        for part in re.split(r"(\*\*/|\*\*|\*|\?)", line):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                part, re.escape(part)
            )
        patterns.append(re.compile(regex))
    return patterns


def ignored(relative: str, patterns: list[re.Pattern[str]]) -> bool:
    """Whether Docker leaves ``relative`` (or a folder above it) out of the context."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(p.fullmatch(prefix) for p in patterns for prefix in prefixes)


def copy_build_context(stage: BuildStage, context: Path) -> None:
    """What the build stage's COPY lines put in its WORKDIR, as Docker would."""
    patterns = dockerignore_patterns()
    for sources, destination in stage.copies:
        for source in sources:
            assert not ignored(source, patterns), f".dockerignore leaves out {source}"
            origin = REPO / source
            target = context / destination / source if destination.endswith("/") else None
            target = target or context / destination
            if origin.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
                continue
            for path in sorted(origin.rglob("*")):
                relative = path.relative_to(REPO).as_posix()
                if path.is_file() and not ignored(relative, patterns):
                    out = target / path.relative_to(origin)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, out)


def tracked_package_files(packages: list[str]) -> list[str]:
    """Every file of the shipped packages that the repository holds (not caches)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", *packages],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout.decode()
        files = [name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        files = [
            p.relative_to(REPO).as_posix()
            for package in packages
            for p in (REPO / package).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return sorted(f for f in files if (REPO / f).is_file())


# --- one installed wheel per session -------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def commest(self) -> Path:
        return self.venv / "bin" / "commest"

    def env(self, data_dir: Path) -> dict[str, str]:
        """The process environment: nothing of this checkout or of the test session."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("COMMEST_", "PYTHON", "VIRTUAL_ENV"))
        }
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PYTHONSAFEPATH"] = "1"  # never the current folder on sys.path
        env["COMMEST_DATA_DIR"] = str(data_dir)
        return env


def run(command: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``command``; its output, or a failure that quotes it."""
    result = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return str(result.stdout)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("shipped")
    stage = read_dockerfile()
    context = root / "context"
    context.mkdir()
    copy_build_context(stage, context)
    wheel_runs = [r for r in stage.runs if "pip wheel" in r]
    assert len(wheel_runs) == 1, "the build stage should make the wheel with `pip wheel`"
    wheel_args = wheel_runs[0].split("pip wheel", 1)[1].split()
    assert wheel_args[-1] == "." and "--wheel-dir" in wheel_args, wheel_runs[0]
    wheels = root / "wheels"
    wheel_args[wheel_args.index("--wheel-dir") + 1] = str(wheels)
    run([sys.executable, "-m", "pip", "wheel", "-q", *wheel_args[:-1], context], cwd=root)
    (wheel,) = wheels.glob("commest-*.whl")

    extras = re.search(r"commest-\*\.whl\)?\"?(\[[\w,-]+\])?", stage.install)
    assert extras is not None, stage.install
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", env_dir / "bin" / "python"]
    run([*pip, "install", "-q", "--no-compile", f"{wheel}{extras.group(1) or ''}"], cwd=root)
    return Installed(wheel, env_dir)


# --- what is in the wheel ------------------------------------------------------------------


def test_the_dockerfile_copies_every_shipped_package() -> None:
    copied = {source.rstrip("/") for sources, _ in read_dockerfile().copies for source in sources}
    assert set(shipped_packages()) <= copied
    assert {"pyproject.toml", "README.md"} <= copied  # the build reads both


def test_the_wheel_holds_every_file_of_the_packages(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = [f for f in tracked_package_files(shipped_packages()) if f not in names]
    assert not missing, f"not in the wheel (add them to package-data in pyproject): {missing}"
    # the ones serving depends on, by name, in case the repository listing is wrong
    assert any(n.startswith("migrations/versions/") and n.endswith(".py") for n in names)
    assert "migrations/script.py.mako" in names
    assert "profiles/validation/published_runs.csv" in names
    # the web page and the library it imports (served at / from the package, never a CDN)
    assert {"api/web/static/index.html", "api/web/static/js/app.js"} <= names
    assert "api/web/static/vendor/htm-preact-3.1.1.mjs" in names


# --- the installed wheel, away from the source tree ----------------------------------------


def test_the_packages_import_from_the_environment_not_the_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    code = (
        "import json, api, estimator, migrations, profiles; "
        "print(json.dumps([m.__file__ for m in (api, estimator, migrations, profiles)]))"
    )
    env = installed.env(tmp_path)
    # -I: isolated mode (no PYTHON* variables, no script folder or cwd on sys.path)
    for cwd in (tmp_path, REPO):  # even from the checkout's root
        files = json.loads(run([installed.python, "-I", "-c", code], cwd=cwd, env=env))
        for file in files:
            assert Path(file).resolve().is_relative_to(installed.venv.resolve()), file


class _Assets(HTMLParser):
    """The script, stylesheet and image URLs of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


@pytest.fixture
def served(installed: Installed, tmp_path: Path) -> Iterator[tuple[httpx.Client, Path]]:
    """``commest serve`` of the installed wheel on a free port, over a fresh data folder."""
    data_dir = tmp_path / "data"
    port = free_port()
    command = [installed.commest, "serve", "--host", "127.0.0.1", "--port", str(port)]
    log_path = tmp_path / "serve.log"
    with (
        log_path.open("wb") as log,
        subprocess.Popen(
            [str(c) for c in command],
            cwd=tmp_path,
            env=installed.env(data_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
        ) as process,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client,
    ):
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, log_path.read_text(errors="replace")
                assert time.monotonic() < deadline, log_path.read_text(errors="replace")
                time.sleep(0.1)
            yield client, data_dir
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def test_commest_serve_from_the_wheel_migrates_a_fresh_sqlite_file_and_answers(
    served: tuple[httpx.Client, Path],
) -> None:
    client, data_dir = served
    database = data_dir / "commest.sqlite3"
    with sqlite3.connect(database) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    assert revision == head_revision()  # the shipped migrations reach this checkout's head
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200

    docs = client.get("/docs")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assets = _Assets()
    assets.feed(docs.text)
    page = str(docs.url)
    ours = [urljoin(page, u) for u in assets.urls]
    ours = [u for u in ours if urlsplit(u).netloc == urlsplit(page).netloc]
    for url in [*ours, urljoin(page, "/openapi.json")]:  # what the page loads from us
        assert client.get(url).status_code == 200, url

    # the planner's page at / and what it loads, from the installed package
    index = client.get("/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assets = _Assets()
    assets.feed(index.text)
    page_assets = [urljoin(str(index.url), u) for u in assets.urls if not u.startswith("data:")]
    assert any(u.endswith("/web/js/app.js") for u in page_assets), page_assets
    for url in [*page_assets, urljoin(str(index.url), "/web/vendor/htm-preact-3.1.1.mjs")]:
        assert urlsplit(url).netloc == urlsplit(str(index.url)).netloc, url  # nothing remote
        assert client.get(url).status_code == 200, url

    # the scored published runs ship with the package (profiles/validation/results.json)
    validation = client.get("/v1/validation", params={"model": "qwen3-30b-a3b"})
    assert validation.status_code == 200, validation.text
    assert validation.json()["rows"] and validation.json()["summary"]["rows"] > 100

    body = json.loads(EXAMPLE_ESTIMATE.read_text(encoding="utf-8"))
    estimate = client.post("/v1/estimates", json=body)
    assert estimate.status_code == 200, estimate.text
    seconds = estimate.json()["iteration_time_s"]
    assert isinstance(seconds, float) and math.isfinite(seconds) and seconds > 0


def test_commest_validate_from_the_wheel_reports_the_published_runs(
    installed: Installed, tmp_path: Path
) -> None:
    command: list[str | Path] = [installed.commest, "validate", "--format", "json"]
    out = run(command, cwd=tmp_path, env=installed.env(tmp_path / "data"))
    shipped = json.loads(out)
    assert shipped == json.loads(run_validation().to_json())  # the same data as the checkout
    assert len(shipped["rows"]) > 0
