"""A real `revenant serve` per test, on a fresh SQLite file or a fresh PostgreSQL
database, with three tokens (admin, work, produce).

The binary is `$REVENANT_BIN`, else the repository's `target/debug/revenant`.
PostgreSQL comes from `$REVENANT_TEST_DATABASE_URL` (scripts/ensure-postgres.sh sets
it); each test gets its own database, created and dropped with `psql`. Without it the
PostgreSQL runs are skipped, saying so, except under `CI=true`, where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, TypeVar

import pytest

from revenant_client import Client

REPO = Path(__file__).resolve().parents[3]
ADMIN_TOKEN = "py-admin-" + "a" * 24
WORK_TOKEN = "py-work-" + "w" * 24
PRODUCE_TOKEN = "py-produce-" + "p" * 24

T = TypeVar("T")


def revenant_bin() -> str:
    path = os.environ.get("REVENANT_BIN") or str(REPO / "target" / "debug" / "revenant")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no revenant binary at {path}: build it (cargo build -p revenant-cli) or set REVENANT_BIN")
    return path


@dataclass
class Server:
    """A running `revenant serve`: its base URL, backend, database URL, and clients
    holding each token."""

    url: str
    backend: str
    database_url: str
    log: Path

    def client(self, token: Optional[str] = ADMIN_TOKEN, timeout: float = 10.0) -> Client:
        return Client(self.url, token=token, timeout=timeout)

    @property
    def admin(self) -> Client:
        return self.client(ADMIN_TOKEN)

    @property
    def work(self) -> Client:
        return self.client(WORK_TOKEN)

    @property
    def produce(self) -> Client:
        return self.client(PRODUCE_TOKEN)


def _psql(url: str, sql: str) -> None:
    if shutil.which("psql") is None:
        pytest.fail("psql is needed to create the PostgreSQL test databases")
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-Atqc", sql], check=True, capture_output=True, timeout=60)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    backend = request.param
    if backend == "sqlite":
        yield f"sqlite://{tmp_path / 'revenant.db'}"
        return
    admin_url = os.environ.get("REVENANT_TEST_DATABASE_URL")
    if not admin_url:
        if os.environ.get("CI") == "true":
            pytest.fail("REVENANT_TEST_DATABASE_URL is not set under CI=true: the PostgreSQL run cannot be skipped")
        pytest.skip("REVENANT_TEST_DATABASE_URL is not set: the PostgreSQL run was NOT exercised")
    name = f"rv_py_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    _psql(admin_url, f"CREATE DATABASE {name}")
    base = admin_url.split("?", 1)[0].rsplit("/", 1)[0]
    query = "?" + admin_url.split("?", 1)[1] if "?" in admin_url else ""
    try:
        yield f"{base}/{name}{query}"
    finally:
        _psql(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[Server]:
    log = tmp_path / "serve.log"
    env = dict(os.environ)
    env["REVENANT_TOKENS"] = (
        f"ops:admin:{ADMIN_TOKEN} fleet:work:{WORK_TOKEN} billing:produce:{PRODUCE_TOKEN}"
    )
    env.setdefault("REVENANT_LOG", "info")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [revenant_bin(), "--database-url", database_url, "serve", "--listen", "127.0.0.1:0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None:
            found = re.search(r"listening on (http://\S+)", log.read_text(errors="replace"))
            if found:
                url = found.group(1)
                break
            if process.poll() is not None:
                pytest.fail(f"revenant serve exited {process.returncode}:\n{log.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"revenant serve printed no address within 60s:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        backend = "sqlite" if database_url.startswith("sqlite") else "postgres"
        yield Server(url=url, backend=backend, database_url=database_url, log=log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test that needs a server runs once per backend, named by it.
    if "database_url" in metafunc.fixturenames:
        metafunc.parametrize("database_url", ["sqlite", "postgres"], indirect=True)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    # A failed test shows the server's log: the server's side of the story.
    if report.failed and "server" in getattr(item, "funcargs", {}):
        server = item.funcargs["server"]
        try:
            text = server.log.read_text(errors="replace")
        except OSError:
            return
        report.sections.append(("revenant serve log", text[-20000:]))


def eventually(check: Callable[[], Optional[T]], what: str, timeout: float = 60.0, every: float = 0.1) -> T:
    """Polls `check` until it answers something truthy, for at most `timeout`
    seconds (generous: the machine may be busy), then fails naming `what`."""
    deadline = time.monotonic() + timeout
    last: Optional[T] = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout}s (last: {last!r})")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def states(client: Client, ids: List[int]) -> List[str]:
    return [client.job(i).state for i in ids]
