"""`Client`: every route of `revenant serve`'s HTTP API, one method each.

The client holds no workflow: it checks what it converts (durations, timestamps,
types), sends, and turns the answer into typed values or the error into a typed
exception (`revenant_client.errors`). The server validates everything else and names
the field at fault. Thread-safe: it keeps no connection between requests.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import errors
from ._values import Duration, duration_seconds, duration_text, parse_time
from .models import (
    Alerts,
    ClaimedJob,
    DeadReason,
    Dependency,
    Enqueued,
    FailResult,
    Fingerprint,
    Job,
    JobPage,
    JobState,
    Json,
    Lease,
    NewJob,
    PolicyList,
    PurgeResult,
    Queue,
    QueueHistoryPoint,
    QueueStats,
    RedriveRecord,
    RedriveResult,
    RetryPolicy,
    StoredPolicy,
    WorkerInfo,
)

DEFAULT_URL = "http://127.0.0.1:8080"
"""`revenant serve`'s default address."""

DEFAULT_TIMEOUT = 10.0
"""Seconds a request may take before it is given up as `Unreachable("timeout")`; a
claim that long-polls gets its `wait` on top."""

_USER_AGENT = "revenant-client-python/0.1.0"


class Client:
    """A connection's settings to one `revenant serve`.

    `url` defaults to `$REVENANT_URL`, else `http://127.0.0.1:8080`; `token` to
    `$REVENANT_TOKEN` (sent as `Authorization: Bearer TOKEN`; a server without tokens
    needs none); `timeout` is in seconds, per request.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        url = url if url is not None else os.environ.get("REVENANT_URL") or DEFAULT_URL
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"url: {url!r} is not an http:// or https:// URL")
        if parsed.query or parsed.fragment:
            raise ValueError(f"url: {url!r} has a query or fragment; give the server's base URL")
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get("REVENANT_TOKEN") or None
        if token is not None and (not token or any(c.isspace() for c in token) or not token.isascii()):
            raise ValueError("token: a token is ASCII without spaces")
        self._token = token
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout: {timeout!r} is not a positive number of seconds")
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"Client(url={self.url!r}, token={'set' if self._token else 'none'}, timeout={self.timeout})"

    # --- transport -----------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Optional[Json] = None,
        *,
        query: Optional[Mapping[str, Any]] = None,
        timeout: Optional[float] = None,
        expect_json: bool = True,
    ) -> Any:
        """One request: JSON in, JSON out (or text with `expect_json=False`); an error
        answer raises its `RevenantError`. Every POST, PUT and DELETE sends a JSON body
        (`{}` when none), as a server without tokens requires of them."""
        url = self.url + path
        if query:
            pairs = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        data = None
        headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
        if method in ("POST", "PUT", "DELETE"):
            data = json.dumps({} if body is None else body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as response:
                status = response.status
                raw = response.read()
        except urllib.error.HTTPError as err:
            with err:
                try:
                    answer = err.read()
                except OSError:  # the error's body was cut: the status still says what
                    answer = b""
            raise errors.from_answer(err.code, answer) from None
        except (socket.timeout, TimeoutError) as err:
            raise errors.Unreachable("timeout", f"{method} {path}: no answer within {timeout or self.timeout}s") from err
        except urllib.error.URLError as err:
            reason = err.reason
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise errors.Unreachable("timeout", f"{method} {path}: no answer within {timeout or self.timeout}s") from err
            raise errors.Unreachable("unreachable", f"{method} {self.url}{path}: {reason}") from err
        except (ConnectionError, OSError) as err:
            raise errors.Unreachable("unreachable", f"{method} {self.url}{path}: {err}") from err
        if not expect_json:
            return raw.decode("utf-8", "replace")
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise errors.ProtocolError(status, "invalid_answer", f"{method} {path}: the answer is not JSON") from None

    def _get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def _post(self, path: str, body: Optional[Json] = None, *, timeout: Optional[float] = None) -> Any:
        return self.request("POST", path, body, timeout=timeout)

    # --- health --------------------------------------------------------------------

    def healthz(self) -> bool:
        """Whether the process answers (never touches the store)."""
        return bool(self._get("/healthz").get("status") == "ok")

    def readyz(self) -> Dict[str, Any]:
        """`{"status": "ready", "backend": "sqlite"}`; `StoreUnavailable` when the
        store does not answer."""
        answer: Dict[str, Any] = self._get("/readyz")
        return answer

    def openapi(self) -> Dict[str, Any]:
        """The API's contract, as the server serves it."""
        answer: Dict[str, Any] = self._get("/openapi.json")
        return answer

    def metrics(self) -> str:
        """`/metrics` in Prometheus' text format (the `metrics` or `admin` scope)."""
        text: str = self.request("GET", "/metrics", expect_json=False)
        return text

    # --- producers -----------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        kind: str,
        payload: Json = None,
        *,
        priority: Optional[int] = None,
        run_at: Optional[datetime] = None,
        delay: Optional[Duration] = None,
        max_attempts: Optional[int] = None,
        group_key: Optional[str] = None,
        unique_key: Optional[str] = None,
        correlation_id: Optional[str] = None,
    ) -> Enqueued:
        """Enqueues one job (`produce` scope). See `NewJob` for the options."""
        job = NewJob(
            queue=queue,
            kind=kind,
            payload=payload,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            group_key=group_key,
            unique_key=unique_key,
            correlation_id=correlation_id,
        )
        answer = self._post("/v1/jobs", job.to_json("job"))
        return _enqueued(answer)[0]

    def enqueue_many(self, jobs: Iterable[NewJob]) -> List[Enqueued]:
        """Enqueues up to 1000 jobs in one transaction: all are checked before any is
        written, and one bad job writes none (the error names it: `jobs[3].kind`).
        Answers one `Enqueued` per job, in order."""
        batch = list(jobs)
        if not batch:
            raise ValueError("jobs: the batch is empty; give at least one job")
        for i, job in enumerate(batch):
            if not isinstance(job, NewJob):
                raise TypeError(f"jobs[{i}]: expected a NewJob, not {type(job).__name__}")
        body = {"jobs": [job.to_json(f"jobs[{i}]") for i, job in enumerate(batch)]}
        return _enqueued(self._post("/v1/jobs", body))

    # --- remote workers ------------------------------------------------------------

    def claim(
        self,
        queue: str,
        worker: str,
        *,
        limit: int = 1,
        lease: Optional[Duration] = None,
        wait: Optional[Duration] = None,
    ) -> List[ClaimedJob]:
        """Leases up to `limit` (1..=100) ready jobs of `queue` for `worker` (`work`
        scope). `lease` is 1s..=1h (default 60s): heartbeat every third of it. `wait`
        (at most 30s) long-polls until a job is ready; the request's timeout grows by
        it. An empty list when nothing is ready."""
        body: Dict[str, Any] = {"queue": queue, "worker": worker, "limit": limit}
        if lease is not None:
            body["lease"] = duration_text(lease, "lease")
        timeout = self.timeout
        if wait is not None:
            body["wait"] = duration_text(wait, "wait")
            timeout += duration_seconds(wait, "wait")
        answer = self._post("/v1/claims", body, timeout=timeout)
        return [ClaimedJob.from_json(job) for job in answer["jobs"]]

    def heartbeat(self, job: Lease, *, lease: Optional[Duration] = None) -> None:
        """Extends the lease: it runs `lease` (default 60s) from now. `LeaseLost` when
        the job is no longer running under this token."""
        body: Dict[str, Any] = {"lease_token": job.lease_token}
        if lease is not None:
            body["lease"] = duration_text(lease, "lease")
        self._post(f"/v1/jobs/{_id(job.id)}/heartbeat", body)

    def complete(self, job: Lease) -> None:
        """running → completed. `LeaseLost` when the lease was lost: nothing changed."""
        self._post(f"/v1/jobs/{_id(job.id)}/complete", {"lease_token": job.lease_token})

    def fail(
        self,
        job: Lease,
        message: str,
        *,
        permanent: bool = False,
        retry_after: Optional[Duration] = None,
    ) -> FailResult:
        """Records a failed attempt; the server's retry policy decides: a transient
        failure goes back to ready after the backoff (at least `retry_after`) while
        attempts are left, else it is dead (`attempts_exhausted`); a `permanent` one is
        dead at once. `message` (not blank) is what the dead-letter view shows."""
        if not isinstance(message, str):
            raise TypeError(f"message: expected a string, not {type(message).__name__}")
        if permanent and retry_after is not None:
            raise ValueError("retry_after: only a transient failure is retried; leave it out for a permanent one")
        body: Dict[str, Any] = {
            "lease_token": job.lease_token,
            "class": "permanent" if permanent else "transient",
            "message": message,
        }
        if retry_after is not None:
            body["retry_after"] = duration_text(retry_after, "retry_after")
        answer = self._post(f"/v1/jobs/{_id(job.id)}/fail", body)
        return FailResult(
            id=int(answer["id"]),
            state=answer["state"],
            retry_in=answer.get("retry_in"),
            dead_reason=answer.get("dead_reason"),
        )

    def snooze(self, job: Lease, delay: Duration) -> None:
        """Back to ready after `delay`, the attempt given back. A delay of 0 releases
        the job at once (what a worker does when it stops before finishing)."""
        self._post(
            f"/v1/jobs/{_id(job.id)}/snooze",
            {"lease_token": job.lease_token, "delay": duration_text(delay, "delay")},
        )

    # --- jobs (admin) --------------------------------------------------------------

    def jobs(
        self,
        *,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        state: Optional[JobState] = None,
        group: Optional[str] = None,
        correlation_id: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[int] = None,
    ) -> JobPage:
        """Jobs, newest first; `limit` 1..=1000 (default 50)."""
        return _page(
            self._get(
                "/v1/jobs",
                queue=queue,
                kind=kind,
                state=state,
                group=group,
                correlation_id=correlation_id,
                limit=limit,
                before=before,
            )
        )

    def job(self, id: int) -> Job:
        """One job with its whole error history; `NotFound` when there is none."""
        return Job.from_json(self._get(f"/v1/jobs/{_id(id)}"))

    def cancel(self, id: int, reason: Optional[str] = None) -> None:
        """A ready or running job becomes cancelled (a running job's worker finds its
        lease lost). `Conflict` when the job is finished, `NotFound` when absent."""
        self._post(f"/v1/jobs/{_id(id)}/cancel", {"reason": reason} if reason is not None else None)

    # --- dead letters (admin) ------------------------------------------------------

    def dead(
        self,
        *,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        fingerprint: Optional[str] = None,
        reason: Optional[DeadReason] = None,
        limit: Optional[int] = None,
        before: Optional[int] = None,
    ) -> JobPage:
        """Dead jobs, newest first."""
        return _page(
            self._get(
                "/v1/dead",
                queue=queue,
                kind=kind,
                fingerprint=fingerprint,
                reason=reason,
                limit=limit,
                before=before,
            )
        )

    def dead_job(self, id: int) -> Job:
        """One dead job; `NotFound` when the job is not dead."""
        return Job.from_json(self._get(f"/v1/dead/{_id(id)}"))

    def dead_fingerprints(
        self,
        *,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        reason: Optional[DeadReason] = None,
        limit: Optional[int] = None,
    ) -> List[Fingerprint]:
        """One group per error, the largest first."""
        answer = self._get("/v1/dead/fingerprints", queue=queue, kind=kind, reason=reason, limit=limit)
        return [Fingerprint.from_json(f) for f in answer["fingerprints"]]

    def redrive_history(self, *, limit: Optional[int] = None) -> List[RedriveRecord]:
        """The redrive audit, newest first."""
        answer = self._get("/v1/dead/history", limit=limit)
        return [RedriveRecord.from_json(r) for r in answer["redrives"]]

    def redrive(
        self,
        *,
        ids: Optional[Sequence[int]] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        fingerprint: Optional[str] = None,
        reason: Optional[DeadReason] = None,
        error_contains: Optional[str] = None,
        all: bool = False,
        limit: Optional[int] = None,
        rate: Union[str, float, None] = None,
        dry_run: bool = False,
        actor: Optional[str] = None,
        note: Optional[str] = None,
    ) -> RedriveResult:
        """Dead → ready with a fresh attempt budget, history kept, audited. Every given
        filter narrows; with none, the server refuses unless `all=True`. `rate`
        (`"20/s"`, `"600/m"`, or a number per second) paces the jobs; `dry_run`
        counts and lists, changing nothing."""
        body = _selection(ids, queue, kind, fingerprint, reason, error_contains, all, limit, dry_run)
        for name, value in (("rate", rate), ("actor", actor), ("note", note)):
            if value is not None:
                body[name] = value
        answer = self._post("/v1/dead/redrive", body)
        return RedriveResult(
            count=int(answer["count"]),
            ids=[int(i) for i in answer["ids"]],
            dry_run=bool(answer["dry_run"]),
            at_least=bool(answer["at_least"]),
            rate_per_sec=answer.get("rate_per_sec"),
        )

    def purge(
        self,
        *,
        ids: Optional[Sequence[int]] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        fingerprint: Optional[str] = None,
        reason: Optional[DeadReason] = None,
        error_contains: Optional[str] = None,
        all: bool = False,
        limit: Optional[int] = None,
        dry_run: bool = False,
    ) -> PurgeResult:
        """Deletes dead jobs for good, selected as for `redrive`."""
        body = _selection(ids, queue, kind, fingerprint, reason, error_contains, all, limit, dry_run)
        answer = self._post("/v1/dead/purge", body)
        ids_answer = answer.get("ids")
        return PurgeResult(
            count=int(answer["count"]),
            dry_run=bool(answer["dry_run"]),
            at_least=bool(answer["at_least"]),
            ids=[int(i) for i in ids_answer] if ids_answer is not None else None,
        )

    # --- queues (admin) ------------------------------------------------------------

    def queues(self) -> List[Queue]:
        """Every known queue with its numbers."""
        return [Queue.from_json(q) for q in self._get("/v1/queues")["queues"]]

    def pause(self, queue: str) -> None:
        """Stops claims from `queue` (enqueues are still accepted); an unknown queue is
        created, paused."""
        self._post(f"/v1/queues/{_segment(queue, 'queue')}/pause")

    def resume(self, queue: str) -> None:
        """Restarts claims from `queue`."""
        self._post(f"/v1/queues/{_segment(queue, 'queue')}/resume")

    def queue_history(self, queue: str, *, minutes: Optional[int] = None) -> List[QueueHistoryPoint]:
        """`minutes + 1` points a minute apart (1..=1440, default 60), rebuilt from the
        jobs' timestamps."""
        answer = self._get(f"/v1/queues/{_segment(queue, 'queue')}/history", minutes=minutes)
        points: List[QueueHistoryPoint] = []
        for p in answer["points"]:
            at = parse_time(p["at"])
            assert at is not None
            points.append(QueueHistoryPoint(at=at, depth=int(p["depth"]), dead=int(p["dead"])))
        return points

    # --- dependencies (admin) ------------------------------------------------------

    def dependencies(self) -> List[Dependency]:
        """Every dependency's breaker, rate limit, retry budget and waiting jobs."""
        answer: List[Dependency] = self._get("/v1/dependencies")["dependencies"]
        return answer

    def dependency(self, key: str) -> Dependency:
        """One dependency; `NotFound` when no worker recorded the key."""
        answer: Dependency = self._get(f"/v1/dependencies/{_segment(key, 'key')}")
        return answer

    def open_breaker(self, key: str) -> Dependency:
        """Holds the breaker open (creating the key) until `close_breaker` or
        `auto_breaker`; answers the dependency after."""
        answer: Dependency = self._post(f"/v1/dependencies/{_segment(key, 'key')}/open")
        return answer

    def close_breaker(self, key: str) -> Dependency:
        """Closes the breaker now, releasing its parked jobs."""
        answer: Dependency = self._post(f"/v1/dependencies/{_segment(key, 'key')}/close")
        return answer

    def auto_breaker(self, key: str) -> Dependency:
        """Releases a hold: the breaker works by itself again."""
        answer: Dependency = self._post(f"/v1/dependencies/{_segment(key, 'key')}/auto")
        return answer

    # --- retry policies (admin) ----------------------------------------------------

    def policies(self) -> PolicyList:
        """The stored retry policies and the default in effect."""
        answer: PolicyList = self._get("/v1/policies")
        return answer

    def set_policy(self, scope: str, policy: RetryPolicy) -> StoredPolicy:
        """Stores a whole policy for `default`, `queue:NAME` or `kind:NAME`."""
        answer: StoredPolicy = self.request("PUT", f"/v1/policies/{_segment(scope, 'scope')}", dict(policy))
        return answer

    def delete_policy(self, scope: str) -> None:
        """Removes a scope's stored policy; `NotFound` when none was stored."""
        self.request("DELETE", f"/v1/policies/{_segment(scope, 'scope')}")

    # --- read-outs (admin) ---------------------------------------------------------

    def workers(self) -> List[WorkerInfo]:
        """The worker registry, local and remote workers."""
        return [WorkerInfo.from_json(w) for w in self._get("/v1/workers")["workers"]]

    def alerts(self) -> Alerts:
        """The configured alert rules and which hold now."""
        answer: Alerts = self._get("/v1/alerts")
        return answer

    def stats(self, queue: Optional[str] = None) -> List[QueueStats]:
        """What `revenant stats --json` prints."""
        answer: List[QueueStats] = self._get("/v1/stats", queue=queue)
        return answer


def _enqueued(answer: Any) -> List[Enqueued]:
    return [Enqueued(id=int(j["id"]), inserted=bool(j["inserted"])) for j in answer["jobs"]]


def _page(answer: Any) -> JobPage:
    next_before = answer.get("next_before")
    return JobPage(
        jobs=[Job.from_json(j) for j in answer["jobs"]],
        next_before=int(next_before) if next_before is not None else None,
    )


def _selection(
    ids: Optional[Sequence[int]],
    queue: Optional[str],
    kind: Optional[str],
    fingerprint: Optional[str],
    reason: Optional[str],
    error_contains: Optional[str],
    all: bool,
    limit: Optional[int],
    dry_run: bool,
) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if ids is not None:
        if isinstance(ids, (str, bytes)):
            raise TypeError("ids: expected a sequence of job ids, not a string")
        body["ids"] = [_id(i) for i in ids]
    for name, value in (
        ("queue", queue),
        ("kind", kind),
        ("fingerprint", fingerprint),
        ("reason", reason),
        ("error_contains", error_contains),
        ("limit", limit),
    ):
        if value is not None:
            body[name] = value
    if all:
        body["all"] = True
    if dry_run:
        body["dry_run"] = True
    return body


def _id(value: int) -> int:
    """A job id as the client sends it: an int (not a bool, not text)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"id: expected an int job id, not {type(value).__name__}")
    return value


def _segment(value: str, name: str) -> str:
    """A path parameter, percent-encoded whole (a `/` in it stays in the segment)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a string, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{name}: is empty")
    return urllib.parse.quote(value, safe="")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
