"""The client's own checks and conversions, without a server."""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from revenant_client import (
    Client,
    Conflict,
    InvalidRequest,
    LeaseLost,
    NewJob,
    NotFound,
    RevenantError,
    StoreUnavailable,
    Unreachable,
    Worker,
)
from revenant_client._values import duration_ms, duration_text, parse_time
from revenant_client.errors import from_answer


def test_durations_are_timedeltas_seconds_or_revenant_text() -> None:
    assert duration_ms(timedelta(minutes=2), "d") == 120_000
    assert duration_ms(1.5, "d") == 1500
    assert duration_ms(0, "d") == 0
    assert duration_ms("1h30m", "d") == 5_400_000
    assert duration_ms("250ms", "d") == 250
    assert duration_text(2, "d") == "2000ms"
    assert duration_text("30s", "d") == "30s"


@pytest.mark.parametrize("bad", ["soon", "30", "-5s", "5 s", "", "1.5s"])
def test_a_duration_in_another_syntax_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match="delay"):
        duration_ms(bad, "delay")


def test_negative_infinite_and_odd_durations_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        duration_ms(-1, "lease")
    with pytest.raises(ValueError, match="finite"):
        duration_ms(float("inf"), "lease")
    with pytest.raises(TypeError, match="bool"):
        duration_ms(True, "lease")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        duration_ms([1], "lease")  # type: ignore[arg-type]


def test_timestamps_read_z_and_any_fraction() -> None:
    at = parse_time("2026-12-01T08:00:03.12Z")
    assert at == datetime(2026, 12, 1, 8, 0, 3, 120_000, tzinfo=timezone.utc)
    assert parse_time("2026-12-01T08:00:03.123456789+00:00") == datetime(
        2026, 12, 1, 8, 0, 3, 123_456, tzinfo=timezone.utc
    )
    assert parse_time("2026-12-01T08:00:03Z") == datetime(2026, 12, 1, 8, 0, 3, tzinfo=timezone.utc)
    assert parse_time(None) is None


def test_errors_are_typed_by_the_apis_code() -> None:
    err = from_answer(
        400,
        b'{"error":{"code":"invalid_field","message":"jobs[2].priority: 5000 is out of range","field":"jobs[2].priority"}}',
    )
    assert isinstance(err, InvalidRequest)
    assert (err.status, err.code, err.field) == (400, "invalid_field", "jobs[2].priority")
    assert "5000 is out of range" in str(err)
    assert isinstance(from_answer(409, b'{"error":{"code":"lease_lost","message":"m"}}'), LeaseLost)
    assert isinstance(from_answer(409, b'{"error":{"code":"conflict","message":"m"}}'), Conflict)
    busy = from_answer(503, b'{"error":{"code":"store_unavailable","message":"m"}}')
    assert isinstance(busy, StoreUnavailable) and busy.retryable
    # A proxy's page, not the API's JSON: typed by status, the text kept.
    page = from_answer(404, b"<html>nope</html>")
    assert isinstance(page, NotFound) and page.code == "http_404" and "nope" in page.message
    other = from_answer(502, b"")
    assert type(other) is RevenantError and other.status == 502 and not other.retryable


def test_a_closed_port_is_unreachable_and_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", timeout=5)
    with pytest.raises(Unreachable) as caught:
        client.healthz()
    assert caught.value.retryable and caught.value.status is None


def test_a_silent_server_times_out() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts the connection, never answers
        client = Client(f"http://127.0.0.1:{s.getsockname()[1]}", timeout=0.5)
        with pytest.raises(Unreachable) as caught:
            client.healthz()
    assert caught.value.code == "timeout"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_worker_waits_out_an_unreachable_server_until_stopped() -> None:
    worker = Worker(Client(f"http://127.0.0.1:{closed_port()}", timeout=2), "q", {}, retry_every="100ms")
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(worker.run(install_signal_handlers=False)), daemon=True)
    thread.start()
    time.sleep(1)  # several failed claims
    assert thread.is_alive(), "an unreachable server is waited out, not fatal"
    worker.stop()
    thread.join(60)
    assert not thread.is_alive() and outcome and outcome[0].completed == 0


def test_a_worker_run_once_reports_an_unreachable_server() -> None:
    worker = Worker(Client(f"http://127.0.0.1:{closed_port()}", timeout=2), "q", {})
    with pytest.raises(Unreachable):
        worker.run(once=True, install_signal_handlers=False)
    with pytest.raises(RuntimeError, match="runs once"):
        worker.run(once=True, install_signal_handlers=False)


def test_client_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="url"):
        Client("127.0.0.1:8080")
    with pytest.raises(ValueError, match="url"):
        Client("ftp://example")
    with pytest.raises(ValueError, match="timeout"):
        Client("http://127.0.0.1:8080", timeout=0)
    with pytest.raises(ValueError, match="token"):
        Client("http://127.0.0.1:8080", token="has space")
    monkeypatch.setenv("REVENANT_URL", "http://localhost:9999/")
    monkeypatch.setenv("REVENANT_TOKEN", "from-the-environment")
    client = Client()
    assert client.url == "http://localhost:9999"
    assert "from-the-environment" not in repr(client)


def test_new_job_is_checked_where_the_client_converts() -> None:
    assert NewJob("q", "k", {"a": 1}, delay=timedelta(seconds=2)).to_json() == {
        "queue": "q",
        "kind": "k",
        "payload": {"a": 1},
        "delay": "2000ms",
    }
    with pytest.raises(ValueError, match=r"jobs\[1\]\.run_at.*time zone"):
        NewJob("q", "k", run_at=datetime(2030, 1, 1)).to_json("jobs[1]")
    with pytest.raises(TypeError, match="priority"):
        NewJob("q", "k", priority="high").to_json()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay"):
        NewJob("q", "k", delay="tomorrow").to_json()


def test_worker_settings_are_checked() -> None:
    client = Client("http://127.0.0.1:8080")
    with pytest.raises(ValueError, match="concurrency"):
        Worker(client, "q", {}, concurrency=0)
    with pytest.raises(ValueError, match="lease"):
        Worker(client, "q", {}, lease="500ms")
    with pytest.raises(ValueError, match="heartbeat_every"):
        Worker(client, "q", {}, lease="3s", heartbeat_every="3s")
    with pytest.raises(ValueError, match="wait"):
        Worker(client, "q", {}, wait="1m")
    with pytest.raises(ValueError, match="queues"):
        Worker(client, [], {})
    with pytest.raises(TypeError, match="handlers"):
        Worker(client, "q", {"k": "not a function"})  # type: ignore[dict-item]
