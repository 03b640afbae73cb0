"""Worker processes against a real `revenant serve`, both backends: SIGTERM stops a
worker cleanly, and the example remote worker runs a batch."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from conftest import REPO, WORK_TOKEN, Server, eventually, unique
from revenant_client import NewJob

HERE = Path(__file__).resolve().parent


def test_sigterm_stops_claiming_finishes_or_releases_and_exits_zero(server: Server) -> None:
    queue = unique("term")
    ids = {k: server.produce.enqueue(queue, k).id for k in ("polite", "stuck")}
    process = subprocess.Popen(
        [sys.executable, str(HERE / "sigterm_worker.py"), server.url, WORK_TOKEN, queue],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(
            lambda: all(server.admin.job(i).state == "running" for i in ids.values()) or process.poll() is not None,
            "both jobs running in the worker process",
        )
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        process.send_signal(signal.SIGTERM)
        late = server.produce.enqueue(queue, "polite").id  # after the signal: never run
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    stats = json.loads(stdout.strip().splitlines()[-1])
    assert stats["completed"] == 1, stderr
    assert stats["released"] >= 1 and stats["failed"] == 0 and stats["lease_lost"] == 0, stderr
    assert server.admin.job(ids["polite"]).state == "completed"
    for job_id in (ids["stuck"], late):
        job = server.admin.job(job_id)
        assert job.state == "ready" and job.attempt == 0, f"job {job_id} given back: {job}"
    assert "released" in stderr


def test_the_example_remote_worker_runs_a_batch(server: Server) -> None:
    queue = unique("example")
    results = server.produce.enqueue_many(
        [
            NewJob(queue, "echo", {"hello": "world"}),
            NewJob(queue, "fail", {"class": "permanent", "message": "bad template"}),
            NewJob(queue, "fail", {"message": "provider down", "retry_after": "1m"}),
        ]
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "remote_worker.py"), "--once", "--queue", queue,
         "--worker", "py-example", "--wait", "2s", "--url", server.url],
        env={**__import__("os").environ, "REVENANT_TOKEN": WORK_TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"completed": 1, "failed": 2, "lease_lost": 0}
    echo, permanent, transient = (server.admin.job(r.id) for r in results)
    assert echo.state == "completed"
    assert permanent.state == "dead" and permanent.dead_reason == "permanent"
    assert transient.state == "ready" and transient.errors[0].message == "provider down"
