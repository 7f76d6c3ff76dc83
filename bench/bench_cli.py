"""CLI cold start: ``commest --help``, a local ``estimate`` and ``check``, each a new process.

Every figure is the median wall time of ``--runs`` (5) runs of the console script, after one
unmeasured run (warm disk, bytecode cached), on the default SQLite database in a temporary
data directory (``COMMEST_DATA_DIR``; the first run migrates it and adds the nominal
profiles). Targets (issue 9 §4): ``--help`` under 0.3 s, a local ``estimate``/``check`` under
0.4 s. For scale, the best analytical peers' CLIs take 0.53 s (Calculon) and 0.65 s
(llm-analysis) for the same work on this machine. ``python -c pass`` is printed as the floor
of any Python CLI here; ``cpu`` is the median user + system time of a run (about what the wall
time comes to on an idle machine: the machine is shared, so read the wall figures with the
floor beside them); the modules each command imported (``-X importtime``) show that web and
plotting libraries stay out.

    python3 bench/bench_cli.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# The modules whose presence tells what a command paid for (web, database, plotting, output).
WATCHED = (
    "numpy",
    "pydantic",
    "pydantic_settings",
    "sqlalchemy",
    "sqlalchemy.orm",
    "alembic",
    "httpx",
    "rich",
    "fastapi",
    "starlette",
    "uvicorn",
    "matplotlib",
)


def commest() -> list[str]:
    """The console script next to this interpreter (else the entry point through ``-c``)."""
    script = Path(sys.executable).with_name("commest")
    if script.exists():
        return [str(script)]
    found = shutil.which("commest")
    if found:
        return [found]
    return [sys.executable, "-c", "from api.cli import main; main()"]


def run_s(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run; the command must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def imported(argv: list[str], env: dict[str, str]) -> list[str]:
    """Which watched modules the command imported (one run under ``-X importtime``)."""
    done = subprocess.run(
        argv, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, capture_output=True, check=False
    )
    seen = set()
    for line in done.stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:"):
            seen.add(line.rsplit("|", 1)[-1].strip())
    return [name for name in WATCHED if name in seen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cli = commest()
    gpt3 = str(EXAMPLES / "estimate-gpt3-175b.json")  # cluster.profile: dgx-a100-nominal
    scalar = str(EXAMPLES / "estimate-paper-scalar-c.json")  # fixed bandwidths, no profile
    cases: list[tuple[str, list[str], float | None]] = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
        ("commest --help", [*cli, "--help"], 0.3),
        ("commest estimate (stored profile)", [*cli, "estimate", "--request", gpt3], 0.4),
        ("commest estimate (fixed bandwidth)", [*cli, "estimate", "--request", scalar], 0.4),
        (
            "commest check (stored profile)",
            [*cli, "check", "--request", gpt3, "--max-iteration-time", "1000"],
            0.4,
        ),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        # As installed for a user: bytecode cached (pip compiles a wheel's modules; the first run
        # of a checkout writes its own). This machine's shell sets PYTHONDONTWRITEBYTECODE,
        # which would recompile every module of the checkout on every run.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("COMMEST_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        env["COMMEST_DATA_DIR"] = tmp  # the default SQLite file <data_dir>/commest.sqlite3
        run_s([*cli, "estimate", "--request", gpt3], env)  # migrate, add nominal profiles
        print(
            f"{'what':<36} {'median':>8} {'min':>7} {'cpu':>7} {'target':>7} {'ratio':>6}  imported"
        )
        for label, argv, target in cases:
            run_s(argv, env)  # warm disk and caches
            runs = [run_s(argv, env) for _ in range(args.runs)]
            times = [wall for wall, _ in runs]
            median = statistics.median(times)
            cpu = statistics.median(cpu for _, cpu in runs)
            shown_target = f"{target:.2f} s" if target else "-"
            ratio = f"{median / target:.2f}" if target else "-"
            verdict = ("OK" if median < target else "MISS") if target else ""
            loaded = ", ".join(imported(argv, env)) if argv[0] != sys.executable else ""
            print(
                f"{label:<36} {median:6.3f} s {min(times):5.3f} s {cpu:5.3f} s {shown_target:>7}"
                f" {ratio:>6}"
                f"  {verdict:<4} {loaded}"
            )
    print("peers for scale: Calculon 0.53 s, llm-analysis 0.65 s (same work, same machine)")


if __name__ == "__main__":
    main()
