"""Shared fixtures: an isolated runs directory and helpers to call the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from builders import quickstart_data

from orchestrator.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# Tests live by stage (tests/<stage>/, mirroring orchestrator/); the shared builders sit here
# in tests/, and a test module that another stage's tests reuse (a harness, a fixture) is found
# by its name from any stage.
for _stage in sorted(Path(__file__).resolve().parent.iterdir()):
    if _stage.is_dir() and any(_stage.glob("test_*.py")) and str(_stage) not in sys.path:
        sys.path.append(str(_stage))

# `make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`). Modules that
# drive the one local Slurm, the two-node cluster in network namespaces or a Ray runtime run
# on one worker, one after another, as they share those daemons and their fixed addresses;
# modules with a module-scoped fixture (a campaign, a reference run) stay on one worker so
# that it runs once. Everything else is spread test by test.
SHARED_DAEMONS = {"test_cluster_slurm", "test_cluster_ray", "test_slurm_backend",
                  "test_ray_backend", "test_reports"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        if module in SHARED_DAEMONS:
            item.add_marker(pytest.mark.xdist_group("shared-daemons"))
        elif any(definition.scope == "module"
                 for definitions in item._fixtureinfo.name2fixturedefs.values()
                 for definition in definitions):
            item.add_marker(pytest.mark.xdist_group(module))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Stop before any test runs where pytest-xdist did not tag the grouped node ids ("@group"):
    loadgroup then spreads tests that share daemons over workers, silently (so it does on
    pytest 9.2, pytest-xdist issue 1386; hence pytest below 9.2 in pyproject.toml)."""
    if node.config.getoption("dist") != "loadgroup":
        return
    grouped = [i for i in ids if Path(i.split("::")[0]).stem in SHARED_DAEMONS]
    if grouped and not any(i.rfind("@") > i.rfind("]") for i in grouped):
        pytest.exit(f"pytest-xdist ignored the xdist_group marks ({grouped[0]} has no @group): "
                    "use pytest below 9.2 (pytest-xdist issue 1386)", returncode=3)


@pytest.fixture
def runs_dir(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "runs"
    monkeypatch.setenv("PARATUNE_RUNS_DIR", str(path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return path


@pytest.fixture
def cli(capsys):
    """Run `paratune ARGS` in-process; return (exit code, stdout, stderr)."""

    def call(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def run_cli_process(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """Run the CLI as a real process (how users meet it), with the repo importable."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
        cwd=ROOT, env={**os.environ, **(env or {})}, **kw,
    )


@pytest.fixture
def spec_file(tmp_path):
    """Write a spec's text to a file; its path, as the CLI takes it."""
    def write(text: str) -> str:
        path = tmp_path / "spec.yaml"
        path.write_text(text)
        return str(path)
    return write


def write_spec(path: Path, **changes) -> Path:
    """The quickstart spec with top-level sections replaced or merged, written to `path`."""
    path.write_text(yaml.safe_dump(quickstart_data(**changes)))
    return path


def journal_events(campaign_dir: Path) -> list[dict]:
    lines = (campaign_dir / "journal.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def alive_naming(marker: Path) -> list[int]:
    """Live (not zombie) processes whose command line names `marker` (a trial's folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            named = str(marker).encode() in (proc / "cmdline").read_bytes()
            zombie = "State:\tZ" in (proc / "status").read_text()
        except (OSError, ValueError):
            continue
        if named and not zombie:
            found.append(int(proc.name))
    return found


def alive_after(marker: Path, within_s: float = 30) -> list[int]:
    """`alive_naming(marker)` once they have ended or `within_s` has passed: a SIGKILLed
    process still has to be scheduled to die, which takes a while on a busy machine."""
    deadline = time.monotonic() + within_s
    while (alive := alive_naming(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def builtin_request(folder_path: Path, trial_id: str, settings: dict, *, timeout_s: float = 300,
                    env: dict | None = None, config=None):
    """A TrialRequest running the built-in job with these settings, for backend tests."""
    from orchestrator.backends.base import TrialRequest
    from orchestrator.space import Layout
    from orchestrator.trainers import BuiltinTrainer, Measure
    from orchestrator.trainers.builtin import builtin_run
    from orchestrator.trial.folder import TrialFolder

    config = config or Layout(dp=2, micro_batch_size=2, grad_accum_steps=2)
    folder = TrialFolder(folder_path)
    measure = Measure(world_size=config.world_size, seq_len=64, tokens_per_step=512,
                      model_flops_per_step=1e9, peak_tflops=1.0, warmup_steps=0)
    return TrialRequest(trial_id=trial_id, config=config, folder=folder, trainer=BuiltinTrainer(),
                        run=builtin_run(folder, settings), measure=measure,
                        steps=settings.get("steps", 2), timeout_s=timeout_s, env=dict(env or {}))


def wait_for_result(handle, limit: float = 420, what: str = "the trial"):
    """Poll a backend's trial handle until it gives a result; fail after `limit` seconds."""
    deadline = time.time() + limit
    while (result := handle.poll()) is None:
        assert time.time() < deadline, f"{what} did not end within {limit:g}s"
        time.sleep(0.5)
    return result


POSTGRES_ELSE_SQLITE = "postgresql-else-sqlite"


def on_database(backend: str):
    """Run a `database_url` test on one backend only ("sqlite", "postgresql", or
    POSTGRES_ELSE_SQLITE: PostgreSQL where one is given, else SQLite), for tests whose subject
    is not how the database behaves, so that each runs once."""
    return pytest.mark.parametrize("database_url", [backend], indirect=True)


POSTGRES_SKIP_REASON = ("no PostgreSQL: run `make test` as root, which starts one from the "
                        "distribution's packages (or set PARATUNE_TEST_POSTGRES_URL)")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """A SQLAlchemy URL to an empty database of its own, once per backend.

    sqlite: a file in this test's tmp_path. postgresql: a fresh database created for this test
    on the server $PARATUNE_TEST_POSTGRES_URL names (`make test` starts one as root; see
    tests/postgres/) and dropped, sessions and all, when the test ends; skipped when unset.
    A test that needs one backend only names it with `on_database(...)`.
    """
    server_url = os.environ.get("PARATUNE_TEST_POSTGRES_URL")
    if request.param == "sqlite" or (request.param == POSTGRES_ELSE_SQLITE and not server_url):
        yield f"sqlite:///{tmp_path}/server.db"
        return
    if not server_url:
        pytest.skip(POSTGRES_SKIP_REASON)
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    url = make_url(server_url)
    libpq_url = url.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"paratune_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(libpq_url, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        error = str(exc).strip().splitlines()[0]
    else:
        error = None
    if error:
        shown = url.render_as_string(hide_password=True)
        pytest.fail(f"PARATUNE_TEST_POSTGRES_URL={shown} does not answer: {error}", pytrace=False)
    database = sql.Identifier(name)
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(database))
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:  # WITH (FORCE): sessions the test left open do not keep it
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))


@pytest.fixture
def service(tmp_path, database_url):
    """Make real `paratune server` processes on this test's state folder; each is stopped by
    its PID when the test ends."""
    from service_harness import ServiceProcess  # it imports this module

    started: list = []

    def make(*extra: str):
        server = ServiceProcess(tmp_path / "service", database_url, *extra)
        server.state_dir.mkdir(exist_ok=True)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
