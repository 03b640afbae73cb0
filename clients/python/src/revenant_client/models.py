"""What the API answers, as typed values.

The records the client reads field by field (jobs, claims, dead-letter results,
queues) are frozen dataclasses with timestamps as aware datetimes; each keeps the
answer it came from in `raw`, so a field a newer server adds is not lost. The
operators' read-outs that mirror the CLI's JSON (dependencies, policies, alerts,
stats) are TypedDicts: the JSON as is, typed.

The request side has `NewJob`, one job to enqueue with every option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Literal, Mapping, Optional, Protocol, TypedDict

from ._values import Duration, duration_text, format_time, parse_time

JobState = Literal["ready", "running", "completed", "dead", "cancelled"]
DeadReason = Literal["permanent", "attempts_exhausted", "lease_expired", "decode_error", "unknown_kind"]
Json = Any
"""Any JSON value: dict, list, str, int, float, bool or None."""


def _time(raw: Mapping[str, Any], key: str) -> datetime:
    value = parse_time(raw[key])
    assert value is not None, f"{key} is required"
    return value


@dataclass(frozen=True)
class ErrorEntry:
    """One failed attempt in a job's history."""

    attempt: int
    at: datetime
    class_: str
    """`transient`, `permanent`, `panic`, `timeout`, `lease_expired`, `decode_error`
    or `unknown_kind` (`class` in the JSON)."""
    message: str
    worker: Optional[str]

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "ErrorEntry":
        return cls(
            attempt=int(raw["attempt"]),
            at=_time(raw, "at"),
            class_=str(raw["class"]),
            message=str(raw["message"]),
            worker=raw.get("worker"),
        )


@dataclass(frozen=True)
class Job:
    """A job as an operator sees it (`GET /v1/jobs/{id}`, lists, dead letters)."""

    id: int
    queue: str
    kind: str
    payload: Json
    state: JobState
    priority: int
    attempt: int
    """Attempts made so far, counted at claim."""
    max_attempts: int
    run_at: datetime
    created_at: datetime
    attempted_at: Optional[datetime]
    finished_at: Optional[datetime]
    lease_expires_at: Optional[datetime]
    worker: Optional[str]
    group_key: Optional[str]
    unique_key: Optional[str]
    correlation_id: Optional[str]
    dead_reason: Optional[DeadReason]
    fingerprint: Optional[str]
    last_error: Optional[ErrorEntry]
    errors: List[ErrorEntry]
    """Every failed attempt, oldest first (the newest 25 are kept)."""
    redrives: int
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Job":
        last = raw.get("last_error")
        return cls(
            id=int(raw["id"]),
            queue=str(raw["queue"]),
            kind=str(raw["kind"]),
            payload=raw.get("payload"),
            state=raw["state"],
            priority=int(raw.get("priority", 0)),
            attempt=int(raw["attempt"]),
            max_attempts=int(raw["max_attempts"]),
            run_at=_time(raw, "run_at"),
            created_at=_time(raw, "created_at"),
            attempted_at=parse_time(raw.get("attempted_at")),
            finished_at=parse_time(raw.get("finished_at")),
            lease_expires_at=parse_time(raw.get("lease_expires_at")),
            worker=raw.get("worker"),
            group_key=raw.get("group_key"),
            unique_key=raw.get("unique_key"),
            correlation_id=raw.get("correlation_id"),
            dead_reason=raw.get("dead_reason"),
            fingerprint=raw.get("fingerprint"),
            last_error=ErrorEntry.from_json(last) if last else None,
            errors=[ErrorEntry.from_json(e) for e in raw.get("errors", [])],
            redrives=int(raw.get("redrives", 0)),
            raw=raw,
        )


class Lease(Protocol):
    """Anything that names one attempt of a job: its id and lease token. A
    `ClaimedJob` is one; so is `LeaseRef`."""

    @property
    def id(self) -> int: ...

    @property
    def lease_token(self) -> int: ...


@dataclass(frozen=True)
class LeaseRef:
    """A job id and lease token, for a worker that kept only those."""

    id: int
    lease_token: int


@dataclass(frozen=True)
class ClaimedJob:
    """A job claimed by a worker, with the lease token every later call carries."""

    id: int
    queue: str
    kind: str
    payload: Json
    attempt: int
    """This attempt's number, counted at claim (1 on the first run)."""
    max_attempts: int
    priority: int
    lease_token: int
    lease_expires_at: datetime
    run_at: datetime
    created_at: datetime
    group_key: Optional[str]
    unique_key: Optional[str]
    correlation_id: Optional[str]
    redrives: int
    errors: List[ErrorEntry]
    """The earlier attempts' failures, oldest first."""
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "ClaimedJob":
        return cls(
            id=int(raw["id"]),
            queue=str(raw["queue"]),
            kind=str(raw["kind"]),
            payload=raw.get("payload"),
            attempt=int(raw["attempt"]),
            max_attempts=int(raw["max_attempts"]),
            priority=int(raw.get("priority", 0)),
            lease_token=int(raw["lease_token"]),
            lease_expires_at=_time(raw, "lease_expires_at"),
            run_at=_time(raw, "run_at"),
            created_at=_time(raw, "created_at"),
            group_key=raw.get("group_key"),
            unique_key=raw.get("unique_key"),
            correlation_id=raw.get("correlation_id"),
            redrives=int(raw.get("redrives", 0)),
            errors=[ErrorEntry.from_json(e) for e in raw.get("errors", [])],
            raw=raw,
        )


@dataclass(frozen=True)
class NewJob:
    """One job to enqueue, with every option of the API (all optional but `queue` and
    `kind`). `run_at` (an aware datetime) and `delay` exclude each other; the server
    checks every field and names the one at fault (`jobs[3].priority`)."""

    queue: str
    kind: str
    payload: Json = None
    """Any JSON value (at most 1 MiB); None sends none: the server's default `{}`."""
    priority: Optional[int] = None
    """-1000..=1000, higher first; default 0."""
    run_at: Optional[datetime] = None
    delay: Optional[Duration] = None
    max_attempts: Optional[int] = None
    """1..=1000; default the retry policy's for the job's kind, else queue, else 12."""
    group_key: Optional[str] = None
    """Jobs of one group run one at a time, in order."""
    unique_key: Optional[str] = None
    """A second enqueue with a held key answers the first job's id, `inserted` false."""
    correlation_id: Optional[str] = None

    def to_json(self, at: str = "job") -> Dict[str, Any]:
        """The request's JSON; client-side checks name the field under `at`."""
        for name in ("queue", "kind"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{at}.{name}: expected a string, not {type(getattr(self, name)).__name__}")
        body: Dict[str, Any] = {"queue": self.queue, "kind": self.kind}
        if self.payload is not None:
            body["payload"] = self.payload
        for name in ("priority", "max_attempts"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{at}.{name}: expected an int, not {type(value).__name__}")
                body[name] = value
        if self.run_at is not None:
            body["run_at"] = format_time(self.run_at, f"{at}.run_at")
        if self.delay is not None:
            body["delay"] = duration_text(self.delay, f"{at}.delay")
        for name in ("group_key", "unique_key", "correlation_id"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


@dataclass(frozen=True)
class Enqueued:
    """What one enqueued job became: `inserted` is False when its `unique_key` was
    already held, and `id` is then the existing job's."""

    id: int
    inserted: bool


@dataclass(frozen=True)
class FailResult:
    """The fate of a failed attempt, decided by the server's retry policy."""

    id: int
    state: Literal["ready", "dead"]
    retry_in: Optional[str]
    """When retried: the delay before the next attempt, as a duration (`"2m"`)."""
    dead_reason: Optional[DeadReason]


@dataclass(frozen=True)
class JobPage:
    """One page of a list, newest first; pass `next_before` as `before` for the next
    page (None on the last)."""

    jobs: List[Job]
    next_before: Optional[int]


@dataclass(frozen=True)
class Queue:
    """A queue's four numbers (depth, oldest due age, dead, workers alive) and the rest."""

    name: str
    paused: bool
    depth: int
    """Ready and due now."""
    oldest_due_age_ms: Optional[int]
    """How long the oldest due job has waited; None when none is due."""
    dead: int
    dead_last_hour: int
    running: int
    scheduled: int
    retrying: int
    completed: int
    cancelled: int
    workers_alive: int
    last_completed_at: Optional[datetime]
    completed_last_minute: int
    failed_last_minute: int
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Queue":
        age = raw.get("oldest_due_age")
        return cls(
            name=str(raw["name"]),
            paused=bool(raw["paused"]),
            depth=int(raw["depth"]),
            oldest_due_age_ms=int(age) if age is not None else None,
            dead=int(raw["dead"]),
            dead_last_hour=int(raw.get("dead_last_hour", 0)),
            running=int(raw.get("running", 0)),
            scheduled=int(raw.get("scheduled", 0)),
            retrying=int(raw.get("retrying", 0)),
            completed=int(raw.get("completed", 0)),
            cancelled=int(raw.get("cancelled", 0)),
            workers_alive=int(raw.get("workers_alive", 0)),
            last_completed_at=parse_time(raw.get("last_completed_at")),
            completed_last_minute=int(raw.get("completed_last_minute", 0)),
            failed_last_minute=int(raw.get("failed_last_minute", 0)),
            raw=raw,
        )


@dataclass(frozen=True)
class QueueHistoryPoint:
    at: datetime
    depth: int
    dead: int


@dataclass(frozen=True)
class RedriveResult:
    """`count` jobs redriven (or, on a dry run, that would be: `at_least` when the
    count stopped at 10,000), their `ids`, and the pace."""

    count: int
    ids: List[int]
    dry_run: bool
    at_least: bool
    rate_per_sec: Optional[float]


@dataclass(frozen=True)
class PurgeResult:
    """`count` dead jobs deleted (or, on a dry run, that would be, listed in `ids`)."""

    count: int
    dry_run: bool
    at_least: bool
    ids: Optional[List[int]]


@dataclass(frozen=True)
class Fingerprint:
    """One group of dead jobs with the same error, normalised."""

    fingerprint: str
    count: int
    sample_error: str
    pattern: str
    kinds: List[str]
    queues: List[str]
    example_id: int
    first_dead_at: datetime
    last_dead_at: datetime

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Fingerprint":
        return cls(
            fingerprint=str(raw["fingerprint"]),
            count=int(raw["count"]),
            sample_error=str(raw["sample_error"]),
            pattern=str(raw["pattern"]),
            kinds=list(raw.get("kinds", [])),
            queues=list(raw.get("queues", [])),
            example_id=int(raw["example_id"]),
            first_dead_at=_time(raw, "first_dead_at"),
            last_dead_at=_time(raw, "last_dead_at"),
        )


@dataclass(frozen=True)
class RedriveRecord:
    """One redrive in the audit."""

    id: int
    at: datetime
    count: int
    first_job_id: int
    last_job_id: int
    spacing_ms: int
    actor: Optional[str]
    note: Optional[str]
    filter: Dict[str, Any]

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "RedriveRecord":
        return cls(
            id=int(raw["id"]),
            at=_time(raw, "at"),
            count=int(raw["count"]),
            first_job_id=int(raw["first_job_id"]),
            last_job_id=int(raw["last_job_id"]),
            spacing_ms=int(raw.get("spacing_ms", 0)),
            actor=raw.get("actor"),
            note=raw.get("note"),
            filter=dict(raw.get("filter") or {}),
        )


@dataclass(frozen=True)
class WorkerInfo:
    """A worker in the registry, local or remote (`pid` 0, `host` its address)."""

    worker: str
    host: str
    pid: int
    queues: List[str]
    started_at: datetime
    last_seen_at: datetime
    alive: bool
    """Seen in the last 30 s."""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "WorkerInfo":
        return cls(
            worker=str(raw["worker"]),
            host=str(raw["host"]),
            pid=int(raw["pid"]),
            queues=list(raw.get("queues", [])),
            started_at=_time(raw, "started_at"),
            last_seen_at=_time(raw, "last_seen_at"),
            alive=bool(raw["alive"]),
        )


# --- the operators' read-outs, as the CLI's JSON ---------------------------------------


class Dependency(TypedDict, total=False):
    """A dependency's breaker, rate limit, retry budget and waiting jobs, as `revenant
    breaker list --json` prints it (schema `Dependency` of the OpenAPI document)."""

    dependency: str
    breaker: Literal["closed", "open", "half_open"]
    held_open: bool
    opened_at: Optional[str]
    probe_at: Optional[str]
    cooldown_secs: float
    probe: Optional[Dict[str, Any]]
    answers: Dict[str, Any]
    trips: int
    changed_at: Optional[str]
    rate_limit: Optional[Dict[str, Any]]
    retry_budget: Optional[Dict[str, Any]]
    waiting: Dict[str, int]


class RetryPolicy(TypedDict, total=False):
    """A retry policy, every field given when read (`revenant policy show --json`)."""

    max_attempts: int
    backoff: Dict[str, Any]
    """`{"base": "10s", "multiplier": 2.0, "cap": "1h"}`"""
    jitter: Dict[str, Any]
    """`{"kind": "equal"}`; `proportional` takes a `factor` in (0, 1]."""
    attempt_timeout: Any
    lease: Any
    heartbeat: Any


class StoredPolicy(TypedDict, total=False):
    scope: str
    """`default`, `queue:NAME` or `kind:NAME`."""
    policy: RetryPolicy
    updated_at: str


class PolicyList(TypedDict):
    stored: List[StoredPolicy]
    default: RetryPolicy


class Alerts(TypedDict):
    """The alert rules of `revenant serve --alerts` and which hold now."""

    configured: bool
    status: Literal["ok", "warning", "critical"]
    rules: List[Dict[str, Any]]
    firing: List[Dict[str, Any]]


class QueueStats(TypedDict, total=False):
    """One queue as `revenant stats --json` prints it."""

    queue: str
    paused: bool
    ready: int
    scheduled: int
    retrying: int
    running: int
    completed: int
    dead: int
    dead_last_hour: int
    cancelled: int
    oldest_due_age_secs: float
    workers_alive: int
    last_completed_at: Optional[str]
    interval_secs: float
    completed_last_interval: int
    failed_last_interval: int
