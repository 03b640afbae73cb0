"""Producers' and remote workers' calls against a real `revenant serve`, both backends."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import Server, unique
from revenant_client import (
    Conflict,
    Forbidden,
    InvalidRequest,
    LeaseLost,
    LeaseRef,
    NewJob,
    NotFound,
    Unauthorized,
)


def test_enqueue_one_job_with_its_options_and_read_it_back(server: Server) -> None:
    queue = unique("emails")
    before = datetime.now(timezone.utc)
    first = server.produce.enqueue(
        queue,
        "send_receipt",
        {"order": 42, "email": "a@b.c"},
        priority=5,
        delay=timedelta(minutes=10),
        max_attempts=3,
        unique_key="receipt-42",
        correlation_id="order-42",
        group_key="customer-7",
    )
    assert first.inserted
    job = server.admin.job(first.id)
    assert (job.queue, job.kind, job.state) == (queue, "send_receipt", "ready")
    assert job.payload == {"order": 42, "email": "a@b.c"}
    assert (job.priority, job.max_attempts, job.attempt) == (5, 3, 0)
    assert (job.unique_key, job.correlation_id, job.group_key) == ("receipt-42", "order-42", "customer-7")
    assert job.run_at >= before + timedelta(minutes=9)
    assert job.errors == [] and job.last_error is None

    again = server.produce.enqueue(queue, "send_receipt", {"order": 42}, unique_key="receipt-42")
    assert (again.id, again.inserted) == (first.id, False)

    at = datetime.now(timezone.utc) + timedelta(hours=2)
    scheduled = server.admin.job(server.produce.enqueue(queue, "later", run_at=at).id)
    assert abs((scheduled.run_at - at).total_seconds()) < 1
    assert scheduled.payload == {}


def test_a_batch_is_enqueued_whole_or_not_at_all(server: Server) -> None:
    queue = unique("batch")
    results = server.produce.enqueue_many(
        [NewJob(queue, "a", {"n": 1}), NewJob(queue, "b", {"n": 2}), NewJob(queue, "c", delay="1h")]
    )
    assert [r.inserted for r in results] == [True, True, True]
    assert len({r.id for r in results}) == 3
    assert [server.admin.job(r.id).kind for r in results] == ["a", "b", "c"]

    with pytest.raises(InvalidRequest) as caught:
        server.produce.enqueue_many([NewJob(queue, "ok"), NewJob(queue, "bad", priority=5000)])
    err = caught.value
    assert (err.status, err.code, err.field) == (400, "invalid_field", "jobs[1].priority")
    assert "5000" in err.message
    # Nothing of the refused batch was written.
    assert len(server.admin.jobs(queue=queue).jobs) == 3


def test_bad_input_is_answered_by_a_typed_exception(server: Server) -> None:
    with pytest.raises(InvalidRequest) as caught:
        server.produce.enqueue("not a queue!", "k")
    assert caught.value.field == "queue"
    with pytest.raises(InvalidRequest) as caught:
        server.produce.enqueue("q", "k", max_attempts=0)
    assert caught.value.field == "max_attempts"
    with pytest.raises(InvalidRequest) as caught:
        server.work.claim("q", "w", limit=101)
    assert caught.value.field == "limit"
    with pytest.raises(NotFound) as missing:
        server.admin.job(987654321)
    assert missing.value.status == 404 and missing.value.code == "not_found"
    # What the client converts itself is refused before anything is sent.
    with pytest.raises(ValueError, match="delay"):
        server.produce.enqueue("q", "k", delay="in a while")


def test_tokens_and_scopes_are_typed_refusals(server: Server) -> None:
    with pytest.raises(Unauthorized) as caught:
        server.client(token=None).enqueue("q", "k")
    assert caught.value.status == 401
    with pytest.raises(Unauthorized):
        server.client(token="not-a-known-token-at-all").queues()
    with pytest.raises(Forbidden) as forbidden:
        server.produce.queues()
    assert forbidden.value.status == 403
    with pytest.raises(Forbidden):
        server.produce.claim("q", "w")


def test_the_work_calls_by_hand_are_fenced_on_the_lease(server: Server) -> None:
    queue = unique("work")
    ids = [r.id for r in server.produce.enqueue_many([NewJob(queue, "k", {"i": i}) for i in range(4)])]
    claimed = server.work.claim(queue, "hand", limit=4, lease="30s")
    assert sorted(j.id for j in claimed) == sorted(ids)
    by_id = {j.id: j for j in claimed}
    a, b, c, d = (by_id[i] for i in ids)
    assert a.attempt == 1 and a.lease_token > 0 and a.payload == {"i": 0}
    assert a.lease_expires_at > datetime.now(timezone.utc) + timedelta(seconds=10)

    server.work.heartbeat(a, lease="45s")
    assert server.admin.job(a.id).lease_expires_at > datetime.now(timezone.utc) + timedelta(seconds=35)
    server.work.complete(a)
    assert server.admin.job(a.id).state == "completed"
    with pytest.raises(LeaseLost) as lost:
        server.work.complete(a)  # a second ack: the job no longer runs under this token
    assert (lost.value.status, lost.value.code) == (409, "lease_lost")
    with pytest.raises(LeaseLost):
        server.work.heartbeat(LeaseRef(b.id, b.lease_token + 1))

    retried = server.work.fail(b, "provider down", retry_after="5m")
    assert retried.state == "ready" and retried.retry_in is not None and retried.dead_reason is None
    job_b = server.admin.job(b.id)
    assert job_b.state == "ready" and job_b.errors[0].message == "provider down"
    assert job_b.errors[0].class_ == "transient" and job_b.errors[0].worker == "hand"
    assert job_b.run_at > datetime.now(timezone.utc) + timedelta(minutes=4)

    dead = server.work.fail(c, "bad template", permanent=True)
    assert (dead.state, dead.dead_reason) == ("dead", "permanent")
    with pytest.raises(ValueError, match="retry_after"):
        server.work.fail(c, "x", permanent=True, retry_after="1s")
    with pytest.raises(InvalidRequest) as blank:
        server.work.fail(d, "   ")
    assert blank.value.field == "message"

    server.work.snooze(d, "1h")
    job_d = server.admin.job(d.id)
    assert job_d.state == "ready" and job_d.attempt == 0, "a snooze gives the attempt back"
    assert job_d.run_at > datetime.now(timezone.utc) + timedelta(minutes=50)


def test_cancel_a_ready_job_and_refuse_a_finished_one(server: Server) -> None:
    queue = unique("cancel")
    job = server.produce.enqueue(queue, "k")
    server.admin.cancel(job.id, reason="not needed")
    assert server.admin.job(job.id).state == "cancelled"
    with pytest.raises(Conflict) as caught:
        server.admin.cancel(job.id)
    assert caught.value.status == 409 and caught.value.code == "conflict"
    with pytest.raises(NotFound):
        server.admin.cancel(987654321)


def test_lists_page_newest_first(server: Server) -> None:
    queue = unique("page")
    ids = [r.id for r in server.produce.enqueue_many([NewJob(queue, "k") for _ in range(5)])]
    first = server.admin.jobs(queue=queue, limit=3)
    assert [j.id for j in first.jobs] == sorted(ids, reverse=True)[:3]
    assert first.next_before is not None
    rest = server.admin.jobs(queue=queue, limit=3, before=first.next_before)
    assert [j.id for j in rest.jobs] == sorted(ids, reverse=True)[3:]
    assert rest.next_before is None
    assert server.admin.jobs(queue=queue, state="completed").jobs == []
    with pytest.raises(InvalidRequest) as caught:
        server.admin.jobs(state="finished")  # type: ignore[arg-type]
    assert caught.value.field == "state"
