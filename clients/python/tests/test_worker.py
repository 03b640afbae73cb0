"""The `Worker` loop against a real `revenant serve`, both backends: jobs run to the
end, failures retried then dead-lettered, heartbeats holding a lease, a lost lease
never acked, and a stop that finishes or releases what runs.

Every wait is on an event with a generous deadline; nothing asserts on speed.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional

import pytest

from conftest import WORK_TOKEN, Server, eventually, unique
from revenant_client import (
    Client,
    FailResult,
    JobContext,
    Lease,
    NewJob,
    Permanent,
    Retry,
    Snooze,
    Worker,
    WorkerStats,
)


class Running:
    """A worker run in a thread; `stop()` stops it and answers its stats."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.stats: Optional[WorkerStats] = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.stats = self.worker.run(install_signal_handlers=False)
        except BaseException as err:  # noqa: BLE001 - reported by stop()
            self.error = err

    def stop(self, within: float = 90.0) -> WorkerStats:
        self.worker.stop()
        self.thread.join(within)
        assert not self.thread.is_alive(), f"the worker did not stop within {within}s"
        if self.error is not None:
            raise self.error
        assert self.stats is not None
        return self.stats


class RecordingClient(Client):
    """A client that records the settle calls it makes: what the worker sent, not
    only what the server accepted."""

    def __init__(self, server: Server, token: str) -> None:
        super().__init__(server.url, token)
        self.settles: List[str] = []

    def complete(self, job: Lease) -> None:
        self.settles.append(f"complete {job.id}")
        super().complete(job)

    def fail(self, job: Lease, message: str, **options: object) -> FailResult:
        self.settles.append(f"fail {job.id}")
        return super().fail(job, message, **options)  # type: ignore[arg-type]

    def snooze(self, job: Lease, delay: object) -> None:
        self.settles.append(f"snooze {job.id}")
        super().snooze(job, delay)  # type: ignore[arg-type]


FAST_RETRIES = {
    "max_attempts": 3,
    "backoff": {"base": "100ms", "multiplier": 1.0, "cap": "100ms"},
    "jitter": {"kind": "none"},
    "attempt_timeout": "30s",
    "lease": "60s",
    "heartbeat": "20s",
}


def test_the_worker_runs_jobs_to_completion(server: Server) -> None:
    queue = unique("emails")
    seen: List[Dict[str, int]] = []
    lock = threading.Lock()

    def send(job: JobContext) -> None:
        with lock:
            seen.append(job.payload)

    ids = [r.id for r in server.produce.enqueue_many([NewJob(queue, "send", {"n": n}) for n in range(8)])]
    running = Running(Worker(server.work, queue, {"send": send}, name="py-complete", concurrency=3, wait="1s"))
    try:
        eventually(lambda: all(server.admin.job(i).state == "completed" for i in ids), "every job completed")
    finally:
        stats = running.stop()
    assert stats.completed == 8 and stats.failed == 0 and stats.lease_lost == 0
    assert sorted(p["n"] for p in seen) == list(range(8))
    for i in ids:
        job = server.admin.job(i)
        assert job.attempt == 1 and job.worker == "py-complete"
    workers = {w.worker: w for w in server.admin.workers()}
    assert queue in workers["py-complete"].queues


def test_one_worker_serves_several_queues(server: Server) -> None:
    queues = [unique("sms"), unique("push")]
    ids = [server.produce.enqueue(q, "notify", {"via": q}).id for q in queues for _ in range(2)]
    running = Running(Worker(server.work, queues, {"notify": lambda job: None}, name="py-multi", wait="1s"))
    try:
        eventually(lambda: all(server.admin.job(i).state == "completed" for i in ids), "both queues drained")
    finally:
        stats = running.stop()
    assert stats.completed == 4
    registered = {w.worker: w for w in server.admin.workers()}["py-multi"]
    assert sorted(registered.queues) == sorted(queues)


def test_a_failing_handler_is_retried_then_dead_then_redriven(server: Server) -> None:
    queue = unique("payouts")
    server.admin.set_policy(f"queue:{queue}", FAST_RETRIES)  # type: ignore[arg-type]
    fixed = threading.Event()
    attempts: List[int] = []

    def pay(job: JobContext) -> None:
        attempts.append(job.attempt)
        if not fixed.is_set():
            raise ConnectionError("provider down")

    job_id = server.produce.enqueue(queue, "pay", {"amount": 10}).id
    running = Running(Worker(server.work, queue, {"pay": pay}, name="py-retry", wait="1s"))
    try:
        eventually(lambda: server.admin.job(job_id).state == "dead", "the job dead after its attempts")
        dead = server.admin.dead(queue=queue).jobs
        assert [j.id for j in dead] == [job_id]
        job = dead[0]
        assert job.dead_reason == "attempts_exhausted" and job.attempt == 3
        assert [e.attempt for e in job.errors] == [1, 2, 3]
        assert all(e.class_ == "transient" and e.worker == "py-retry" for e in job.errors)
        assert job.last_error is not None
        assert job.last_error.message.startswith("ConnectionError: provider down")
        assert server.admin.dead_job(job_id).id == job_id

        fixed.set()
        redriven = server.admin.redrive(ids=[job_id], note="provider back")
        assert (redriven.count, redriven.ids) == (1, [job_id])
        eventually(lambda: server.admin.job(job_id).state == "completed", "the redriven job completed")
    finally:
        stats = running.stop()
    assert attempts == [1, 2, 3, 1]
    assert (stats.failed, stats.completed) == (3, 1)
    assert server.admin.job(job_id).redrives == 1


def test_handlers_choose_permanent_retry_after_and_snooze(server: Server) -> None:
    queue = unique("outcomes")

    def permanent(job: JobContext) -> None:
        raise Permanent("template crashes on this name")

    def later(job: JobContext) -> None:
        raise Retry("429 from provider", after="10m")

    def snooze(job: JobContext) -> None:
        raise Snooze("1h")

    handlers = {"permanent": permanent, "later": later, "snooze": snooze}
    results = server.produce.enqueue_many([NewJob(queue, k) for k in [*handlers, "no_such_kind"]])
    ids = dict(zip([*handlers, "unknown"], (r.id for r in results)))
    running = Running(Worker(server.work, queue, handlers, wait="1s"))
    try:
        eventually(lambda: server.admin.job(ids["permanent"]).state == "dead", "the permanent failure dead")
        eventually(lambda: server.admin.job(ids["unknown"]).state == "dead", "the unknown kind dead")
        eventually(lambda: server.admin.job(ids["later"]).errors, "the retry recorded")
        eventually(lambda: server.admin.job(ids["snooze"]).run_at.timestamp() > time.time() + 1800, "the snooze")
    finally:
        stats = running.stop()

    dead = server.admin.job(ids["permanent"])
    assert (dead.dead_reason, dead.attempt) == ("permanent", 1)
    assert dead.last_error is not None and dead.last_error.message == "template crashes on this name"
    unknown = server.admin.job(ids["unknown"])
    assert unknown.dead_reason == "permanent"
    assert unknown.last_error is not None and "no_such_kind" in unknown.last_error.message
    later = server.admin.job(ids["later"])
    assert later.state == "ready" and later.errors[0].message == "429 from provider"
    assert later.run_at.timestamp() > time.time() + 500, "retry_after is a floor under the backoff"
    snoozed = server.admin.job(ids["snooze"])
    assert snoozed.state == "ready" and snoozed.attempt == 0 and snoozed.errors == []
    assert (stats.failed, stats.snoozed, stats.completed) == (3, 1, 0)


def test_heartbeats_keep_a_long_job_past_its_lease(server: Server) -> None:
    queue = unique("long")
    started = threading.Event()
    finish = threading.Event()

    def long_job(job: JobContext) -> None:
        started.set()
        assert finish.wait(120), "the test never let the job finish"
        job.raise_if_lost()

    job_id = server.produce.enqueue(queue, "long").id
    # A 5 s lease, a heartbeat every second: four beats may be late before it lapses.
    running = Running(Worker(server.work, queue, {"long": long_job}, lease="5s", heartbeat_every="1s", wait="1s"))
    try:
        assert started.wait(60), "the worker never started the job"
        claimed = server.admin.job(job_id)
        first_expiry = claimed.lease_expires_at
        assert first_expiry is not None
        # Wait until heartbeats pushed the lease two whole lease lengths past the first
        # claim's, by the server's clock: the job has outlived its first lease.
        eventually(
            lambda: (server.admin.job(job_id).lease_expires_at or first_expiry).timestamp()
            > first_expiry.timestamp() + 10,
            "the lease extended by heartbeats past two lease lengths",
        )
        # The lease is alive: another worker finds nothing to claim.
        assert server.work.claim(queue, "thief", limit=10) == []
        finish.set()
        eventually(lambda: server.admin.job(job_id).state == "completed", "the long job completed")
    finally:
        finish.set()
        stats = running.stop()
    job = server.admin.job(job_id)
    assert job.attempt == 1 and job.errors == []
    assert (stats.completed, stats.lease_lost) == (1, 0)


def test_a_lost_lease_stops_heartbeats_and_is_never_acked(server: Server) -> None:
    queue = unique("lost")
    started = threading.Event()
    noticed = threading.Event()

    def stubborn(job: JobContext) -> None:
        started.set()
        assert job.lease_lost.wait(120), "the worker never noticed the lost lease"
        noticed.set()
        # Returns normally: the worker must still not complete the job.

    job_id = server.produce.enqueue(queue, "stubborn").id
    client = RecordingClient(server, WORK_TOKEN)
    running = Running(Worker(client, queue, {"stubborn": stubborn}, lease="3s", heartbeat_every="1s", wait="1s"))
    try:
        assert started.wait(60)
        server.admin.cancel(job_id, reason="operator")
        assert noticed.wait(120)
        eventually(lambda: running.worker.stats.lease_lost == 1, "the drop counted")
    finally:
        stats = running.stop()
    assert (stats.lease_lost, stats.completed, stats.failed) == (1, 0, 0)
    assert client.settles == [], "nothing is sent for a job whose lease was lost"
    assert server.admin.job(job_id).state == "cancelled"


def test_a_stop_finishes_cooperative_jobs_and_releases_stuck_ones(server: Server) -> None:
    queue = unique("stop")
    started = {"polite": threading.Event(), "stuck": threading.Event()}
    never = threading.Event()

    def polite(job: JobContext) -> None:
        started["polite"].set()
        assert job.stopping.wait(120)

    def stuck(job: JobContext) -> None:
        started["stuck"].set()
        never.wait(300)  # ignores the stop

    ids = {k: server.produce.enqueue(queue, k).id for k in ("polite", "stuck")}
    running = Running(
        Worker(server.work, queue, {"polite": polite, "stuck": stuck}, concurrency=2, grace="5s", wait="1s")
    )
    try:
        assert started["polite"].wait(60) and started["stuck"].wait(60)
        stats = running.stop()
    finally:
        never.set()
    assert (stats.completed, stats.released) == (1, 1)
    assert server.admin.job(ids["polite"]).state == "completed"
    stuck_job = server.admin.job(ids["stuck"])
    assert stuck_job.state == "ready" and stuck_job.attempt == 0, "released with the attempt given back"
    # The released job is claimable again at once.
    assert [j.id for j in server.work.claim(queue, "next", limit=5)] == [ids["stuck"]]


def test_a_refused_token_stops_the_worker_with_its_error(server: Server) -> None:
    from revenant_client import Forbidden

    worker = Worker(server.produce, unique("q"), {}, wait="1s")
    with pytest.raises(Forbidden):
        worker.run(install_signal_handlers=False)
