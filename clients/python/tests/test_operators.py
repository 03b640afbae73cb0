"""Operator calls against a real `revenant serve`, both backends: queues, dead
letters, policies, dependencies and the read-outs."""

from __future__ import annotations

from typing import List

import pytest

from conftest import Server, unique
from revenant_client import ClaimedJob, InvalidRequest, NewJob, NotFound


def make_dead(server: Server, queue: str, messages: List[str]) -> List[int]:
    """Enqueues one job per message and fails each permanently with it."""
    ids = [r.id for r in server.produce.enqueue_many([NewJob(queue, "send", {"i": i}) for i in range(len(messages))])]
    claimed: List[ClaimedJob] = sorted(server.work.claim(queue, "ops-test", limit=len(ids)), key=lambda j: j.id)
    assert [j.id for j in claimed] == sorted(ids)
    for job, message in zip(claimed, messages):
        assert server.work.fail(job, message, permanent=True).state == "dead"
    return sorted(ids)


def test_pause_stops_claims_and_resume_restarts_them(server: Server) -> None:
    queue = unique("paused")
    job_id = server.produce.enqueue(queue, "k").id
    server.admin.pause(queue)
    assert {q.name: q for q in server.admin.queues()}[queue].paused
    assert server.work.claim(queue, "w") == [], "a paused queue gives nothing"
    assert server.produce.enqueue(queue, "k2").inserted, "enqueues are still accepted"
    server.admin.resume(queue)
    info = {q.name: q for q in server.admin.queues()}[queue]
    assert not info.paused and info.depth == 2
    assert job_id in [j.id for j in server.work.claim(queue, "w", limit=2)]


def test_dead_letters_are_listed_grouped_redriven_and_purged(server: Server) -> None:
    queue = unique("dead")
    a, b, c = make_dead(server, queue, ["HTTP 503 from provider after 120ms", "HTTP 503 from provider after 80ms", "bad template"])
    ready = server.produce.enqueue(queue, "alive").id

    page = server.admin.dead(queue=queue)
    assert sorted(j.id for j in page.jobs) == [a, b, c]
    assert all(j.state == "dead" and j.dead_reason == "permanent" for j in page.jobs)
    assert server.admin.dead_job(a).last_error is not None
    with pytest.raises(NotFound):
        server.admin.dead_job(ready)

    groups = server.admin.dead_fingerprints(queue=queue)
    assert sorted(g.count for g in groups) == [1, 2], "the two 503s share a fingerprint"
    biggest = groups[0]
    assert biggest.count == 2 and queue in biggest.queues
    assert sorted(j.id for j in server.admin.dead(fingerprint=biggest.fingerprint).jobs) == [a, b]

    with pytest.raises(InvalidRequest):
        server.admin.redrive()  # no selection and no all=True: refused
    preview = server.admin.redrive(fingerprint=biggest.fingerprint, dry_run=True)
    assert preview.dry_run and sorted(preview.ids) == [a, b]
    assert server.admin.job(a).state == "dead", "a dry run changes nothing"

    done = server.admin.redrive(fingerprint=biggest.fingerprint, actor="py-test", note="provider is back", rate="100/s")
    assert sorted(done.ids) == [a, b] and not done.dry_run and done.rate_per_sec == 100.0
    for job_id in (a, b):
        job = server.admin.job(job_id)
        assert job.state == "ready" and job.attempt == 0 and job.redrives == 1
        assert job.errors, "the history is kept"
    audit = server.admin.redrive_history(limit=5)
    assert audit[0].actor == "py-test" and audit[0].note == "provider is back" and audit[0].count == 2
    with pytest.raises(InvalidRequest) as bad_rate:
        server.admin.redrive(ids=[c], rate="fast")
    assert bad_rate.value.field == "rate"

    would = server.admin.purge(ids=[c], dry_run=True)
    assert would.dry_run and would.ids == [c]
    purged = server.admin.purge(ids=[c])
    assert purged.count == 1 and not purged.dry_run
    with pytest.raises(NotFound):
        server.admin.job(c)


def test_policies_are_stored_read_and_removed(server: Server) -> None:
    scope = f"queue:{unique('pol')}"
    policy = {
        "max_attempts": 8,
        "backoff": {"base": "30s", "multiplier": 2.0, "cap": "30m"},
        "jitter": {"kind": "equal"},
        "attempt_timeout": "30s",
        "lease": "60s",
        "heartbeat": "20s",
    }
    stored = server.admin.set_policy(scope, policy)  # type: ignore[arg-type]
    assert stored["scope"] == scope and stored["policy"]["max_attempts"] == 8
    listed = server.admin.policies()
    assert scope in [p["scope"] for p in listed["stored"]]
    assert listed["default"]["max_attempts"] >= 1
    with pytest.raises(InvalidRequest) as bad:
        server.admin.set_policy(scope, {**policy, "max_attempts": 0})  # type: ignore[arg-type]
    assert bad.value.field == "max_attempts"
    server.admin.delete_policy(scope)
    with pytest.raises(NotFound):
        server.admin.delete_policy(scope)


def test_breakers_are_held_open_and_closed(server: Server) -> None:
    key = unique("email-provider")
    with pytest.raises(NotFound):
        server.admin.dependency(key)
    held = server.admin.open_breaker(key)
    assert held["breaker"] == "open" and held["held_open"]
    assert key in [d["dependency"] for d in server.admin.dependencies()]
    closed = server.admin.close_breaker(key)
    assert closed["breaker"] == "closed" and not closed["held_open"]
    assert server.admin.auto_breaker(key)["dependency"] == key
    with pytest.raises(InvalidRequest) as bad:
        server.admin.dependency("a\nb")
    assert bad.value.field == "key"


def test_read_outs_answer(server: Server) -> None:
    queue = unique("reads")
    server.produce.enqueue(queue, "k")
    assert server.admin.healthz()
    assert server.admin.readyz()["backend"] == server.backend
    assert "/v1/claims" in server.admin.openapi()["paths"]
    stats = server.admin.stats(queue)
    assert [s["queue"] for s in stats] == [queue] and stats[0]["ready"] == 1
    history = server.admin.queue_history(queue, minutes=5)
    assert len(history) == 6 and history[-1].depth == 1
    alerts = server.admin.alerts()
    assert alerts["configured"] is False and alerts["firing"] == []
    assert "revenant_queue" in server.admin.metrics()
    server.work.claim(queue, "reader")
    assert "reader" in [w.worker for w in server.admin.workers()]
