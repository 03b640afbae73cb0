"""`Worker`: a remote worker's loop over the client, with the lease handling done.

It claims jobs from its queues, runs each in its own thread with the handler
registered for the job's kind, heartbeats each lease in the background (every third
of the lease by default), and settles each attempt exactly once:

- the handler returns: `complete`;
- it raises `Retry(message, after=None)`, or any other exception: a transient `fail`
  with the error's text (retried with the server's backoff while attempts are left);
- it raises `Permanent(message)`, or the kind has no handler: a permanent `fail`, dead
  at once;
- it raises `Snooze(delay)`: back to ready after `delay`, the attempt given back.

A lease lost (a heartbeat answered `409 lease_lost`, or `404` when the job is gone)
stops that job's heartbeats and sets `JobContext.lease_lost`; the job is then never
acked, whatever the handler does: another worker may be running it already.

`run()` stops claiming on SIGTERM or SIGINT (or `stop()`), lets the running jobs
finish within `grace`, heartbeating them meanwhile, then releases those still running
(a snooze of 0: back to ready at once, the attempt given back) and returns. A second
signal ends the grace at once. Handlers can watch `JobContext.stopping` to wrap up
early (raising `Snooze(0)` hands the job back).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import errors
from ._values import Duration, duration_seconds, duration_text
from .client import Client
from .models import ClaimedJob, Json

log = logging.getLogger("revenant_client.worker")

MAX_CONCURRENCY = 100
"""The most jobs one claim takes, so the most a worker runs at once."""


class Retry(Exception):
    """A transient failure: retried with the server's backoff while attempts are left.
    `after` (a duration) is a floor under that backoff, e.g. an HTTP 429's
    Retry-After. Any exception other than these three is a `Retry` without `after`."""

    def __init__(self, message: str, after: Optional[Duration] = None) -> None:
        super().__init__(message)
        self.message = message
        self.after = after
        if after is not None:
            duration_text(after, "after")


class Permanent(Exception):
    """A failure that will never pass (a bad payload, a template bug): dead at once."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Snooze(Exception):
    """Not now: back to ready after `delay`, without spending the attempt."""

    def __init__(self, delay: Duration) -> None:
        super().__init__(f"snoozed for {delay}")
        self.delay = delay
        duration_text(delay, "delay")


class JobContext:
    """What a handler gets: the claimed job, and two events to watch in long work.

    `lease_lost` is set when a heartbeat found the lease gone: the result will be
    dropped, so stop (`raise_if_lost()` raises `LeaseLost`). `stopping` is set when
    the worker is shutting down: finish soon, or raise `Snooze(0)` to hand the job
    back; after the grace period the worker releases the job itself.
    """

    def __init__(self, job: ClaimedJob, worker: str, stopping: threading.Event) -> None:
        self.job = job
        self.worker = worker
        self.lease_lost = threading.Event()
        self.stopping = stopping

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def kind(self) -> str:
        return self.job.kind

    @property
    def payload(self) -> Json:
        return self.job.payload

    @property
    def attempt(self) -> int:
        return self.job.attempt

    def raise_if_lost(self) -> None:
        """Raises `LeaseLost` when the lease is gone."""
        if self.lease_lost.is_set():
            raise errors.LeaseLost(409, "lease_lost", f"job {self.id}: the lease was lost")


Handler = Callable[[JobContext], None]
"""A function of the job; its return or exception says how the attempt ended."""


@dataclass
class WorkerStats:
    """How the attempts this worker ran ended."""

    completed: int = 0
    failed: int = 0
    """Failures reported (transient or permanent)."""
    snoozed: int = 0
    released: int = 0
    """Handed back unfinished at shutdown (snoozed 0, attempt given back)."""
    lease_lost: int = 0
    """Dropped without an ack: the lease was lost."""

    def as_dict(self) -> Dict[str, int]:
        return asdict(self)


class _Running:
    """One attempt in flight: its context, and the flag that makes its settle once."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.done = threading.Event()  # the attempt is settled or dropped: no more heartbeats
        self.lock = threading.Lock()
        self.settled = False


class Worker:
    """Runs jobs of `queues` with `handlers` (kind → function) through `client`.

    - `name`: this worker in the registry (default `py-HOST-PID`);
    - `concurrency`: jobs at once, 1..=100 (default 4);
    - `lease`: each claim's lease, 1s..=1h (default 30s); heartbeats every
      `heartbeat_every` (default a third of the lease);
    - `wait`: how long a claim long-polls when nothing is ready, at most 30s (default
      5s; with several queues each claim waits at most 1s, so none starves);
    - `grace`: how long running jobs may finish after a stop (default 30s);
    - `retry_every`: the pause after a claim failed for a reason that may pass (the
      server unreachable, the store busy), default 1s.
    """

    def __init__(
        self,
        client: Client,
        queues: Union[str, Sequence[str]],
        handlers: Mapping[str, Handler],
        *,
        name: Optional[str] = None,
        concurrency: int = 4,
        lease: Duration = "30s",
        heartbeat_every: Optional[Duration] = None,
        wait: Duration = "5s",
        grace: Duration = "30s",
        retry_every: Duration = "1s",
    ) -> None:
        if not isinstance(client, Client):
            raise TypeError(f"client: expected a revenant_client.Client, not {type(client).__name__}")
        self.client = client
        self.queues: List[str] = [queues] if isinstance(queues, str) else list(queues)
        if not self.queues or not all(isinstance(q, str) and q for q in self.queues):
            raise ValueError("queues: give at least one queue name")
        self.handlers: Dict[str, Handler] = dict(handlers)
        for kind, handler in self.handlers.items():
            if not callable(handler):
                raise TypeError(f"handlers[{kind!r}]: not callable")
        self.name = name or f"py-{socket.gethostname()}-{os.getpid()}"
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency: {concurrency!r} is out of range; use 1..={MAX_CONCURRENCY}")
        self.concurrency = concurrency
        self.lease = duration_text(lease, "lease")
        self.lease_seconds = duration_seconds(lease, "lease")
        if not 1 <= self.lease_seconds <= 3600:
            raise ValueError(f"lease: {lease!r} is out of range; use 1s..=1h")
        beat = self.lease_seconds / 3 if heartbeat_every is None else duration_seconds(heartbeat_every, "heartbeat_every")
        if not 0 < beat < self.lease_seconds:
            raise ValueError(f"heartbeat_every: {heartbeat_every!r} must be above 0 and below the lease ({lease})")
        self.heartbeat_seconds = beat
        self.wait = duration_text(wait, "wait")
        if duration_seconds(wait, "wait") > 30:
            raise ValueError(f"wait: {wait!r} is over 30s, the longest a claim waits")
        self.wait_seconds = duration_seconds(wait, "wait")
        self.grace_seconds = duration_seconds(grace, "grace")
        self.retry_seconds = duration_seconds(retry_every, "retry_every")

        self.stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self._stopping = threading.Event()
        self._hurry = threading.Event()  # a second stop: the grace ends now
        self._active: Dict[int, _Running] = {}
        self._changed = threading.Condition()
        self._next_queue = 0
        self._ran = False

    # --- control -------------------------------------------------------------------

    def stop(self) -> None:
        """Stops claiming; `run()` then finishes or releases the running jobs and
        returns. A second call ends the grace period at once. Safe from any thread and
        from a signal handler."""
        if self._stopping.is_set():
            self._hurry.set()
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self, *, once: bool = False, install_signal_handlers: bool = True) -> WorkerStats:
        """Claims and runs jobs until stopped, then drains; answers the counts.

        With `once`, claims one batch (up to `concurrency` jobs, waiting up to `wait`
        for the first), runs it to the end and returns. SIGTERM and SIGINT call
        `stop()` while it runs when `install_signal_handlers` and this is the main
        thread (the previous handlers are restored after).

        Raises what makes claiming pointless (`Unauthorized`, `Forbidden`,
        `InvalidRequest`, `NotFound`; with `once`, also `Unreachable` and 503s) after
        draining the running jobs as on a stop. A Worker runs once.
        """
        if self._ran:
            raise RuntimeError("a Worker runs once: its stop is final; make a new Worker")
        self._ran = True
        previous: Dict[signal.Signals, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        fatal: Optional[BaseException] = None
        try:
            log.info("worker %s serving %s from %s", self.name, ", ".join(self.queues), self.client.url)
            try:
                self._claim_loop(once)
            except errors.RevenantError as err:
                fatal = err
                log.error("worker %s: claiming failed: %s", self.name, err)
                self._stopping.set()
            self._drain()
        finally:
            for restored, old in previous.items():
                signal.signal(restored, old)
        log.info("worker %s stopped: %s", self.name, self.stats.as_dict())
        if fatal is not None:
            raise fatal
        return self.stats

    def _on_signal(self, signum: int, _frame: Optional[FrameType]) -> None:
        # Only sets events: safe between any two bytecodes of the main thread.
        self.stop()

    # --- claiming ------------------------------------------------------------------

    def _claim_loop(self, once: bool) -> None:
        while not self._stopping.is_set():
            free = self._free_slots()
            if free == 0:
                continue
            queue = self.queues[self._next_queue % len(self.queues)]
            self._next_queue += 1
            wait = self.wait_seconds if len(self.queues) == 1 else min(self.wait_seconds, 1.0)
            try:
                jobs = self.client.claim(
                    queue, self.name, limit=free, lease=self.lease, wait=f"{round(wait * 1000)}ms"
                )
            except errors.RevenantError as err:
                if once or not err.retryable and not _server_side(err):
                    raise
                log.warning("worker %s: claim from %s failed: %s; trying again in %ss", self.name, queue, err, self.retry_seconds)
                self._stopping.wait(self.retry_seconds)
                continue
            for job in jobs:
                if self._stopping.is_set():
                    # Claimed while the stop came: hand it back at once, unrun.
                    self._release_unstarted(job)
                else:
                    self._start(job)
            if once:
                return

    def _free_slots(self) -> int:
        """Free slots; when none, waits a little for one (or a stop)."""
        with self._changed:
            free = self.concurrency - len(self._active)
            if free == 0:
                self._changed.wait(0.2)
            return free

    def _release_unstarted(self, job: ClaimedJob) -> None:
        try:
            self.client.snooze(job, 0)
            self._count("released")
            log.info("job %s (%s): released unrun, the worker is stopping", job.id, job.kind)
        except errors.LeaseLost:
            self._count("lease_lost")
        except errors.RevenantError as err:
            log.warning("job %s: could not release it (%s); its lease will expire", job.id, err)

    # --- one attempt ---------------------------------------------------------------

    def _start(self, job: ClaimedJob) -> None:
        running = _Running(JobContext(job, self.name, self._stopping))
        with self._changed:
            self._active[job.id] = running
        # Daemon threads: a handler that never returns cannot keep the process alive
        # past the grace period (its job is released by then).
        threading.Thread(target=self._attempt, args=(running,), name=f"revenant-job-{job.id}", daemon=True).start()
        threading.Thread(target=self._heartbeats, args=(running,), name=f"revenant-beat-{job.id}", daemon=True).start()

    def _attempt(self, running: _Running) -> None:
        ctx = running.ctx
        try:
            self._settle(running, self._run_handler(ctx))
        except Exception:  # noqa: BLE001 - a bug here must not kill the loop silently
            log.exception("job %s: settling failed", ctx.id)
        finally:
            running.done.set()
            with self._changed:
                self._active.pop(ctx.id, None)
                self._changed.notify_all()

    def _run_handler(self, ctx: JobContext) -> "_Outcome":
        handler = self.handlers.get(ctx.kind)
        if handler is None:
            return _Outcome("fail", message=f"no handler for kind {ctx.kind!r} in this worker", permanent=True)
        try:
            handler(ctx)
        except errors.LeaseLost:
            return _Outcome("drop")
        except Permanent as err:
            return _Outcome("fail", message=_text(err.message, err), permanent=True)
        except Retry as err:
            return _Outcome("fail", message=_text(err.message, err), after=err.after)
        except Snooze as err:
            return _Outcome("snooze", after=err.delay)
        except Exception as err:  # noqa: BLE001 - any other error is a transient failure
            trace = "".join(traceback.format_exception(type(err), err, err.__traceback__, limit=5))
            return _Outcome("fail", message=f"{type(err).__name__}: {err}\n{trace}".strip())
        return _Outcome("complete")

    def _settle(self, running: _Running, outcome: "_Outcome") -> None:
        """Reports the outcome once; never after the lease was lost or the job was
        released at shutdown."""
        ctx = running.ctx
        with running.lock:
            if running.settled:
                log.warning("job %s: the handler finished after the job was released; result dropped", ctx.id)
                return
            running.settled = True
        running.done.set()  # no heartbeat races the ack
        if outcome.action == "drop" or ctx.lease_lost.is_set():
            self._count("lease_lost")
            log.warning("job %s (%s): lease lost; its result is dropped, not acked", ctx.id, ctx.kind)
            return
        try:
            self._call_settle(ctx.job, outcome)
        except errors.LeaseLost:
            self._count("lease_lost")
            log.warning("job %s (%s): lease lost before the %s; nothing recorded", ctx.id, ctx.kind, outcome.action)
        except errors.RevenantError as err:
            log.error("job %s (%s): the %s was not recorded (%s); the lease will expire and the job run again",
                      ctx.id, ctx.kind, outcome.action, err)

    def _call_settle(self, job: ClaimedJob, outcome: "_Outcome") -> None:
        """One settle call, tried again (three times in all) while the answer says it
        may pass: an ack lost to a blip would otherwise cost a whole lease."""
        for attempt in range(3):
            try:
                if outcome.action == "complete":
                    self.client.complete(job)
                    self._count("completed")
                    log.info("job %s (%s) completed", job.id, job.kind)
                elif outcome.action == "snooze":
                    assert outcome.after is not None
                    self.client.snooze(job, outcome.after)
                    self._count("snoozed")
                    log.info("job %s (%s) snoozed for %s", job.id, job.kind, outcome.after)
                else:
                    result = self.client.fail(job, outcome.message, permanent=outcome.permanent, retry_after=outcome.after)
                    self._count("failed")
                    then = f"retry in {result.retry_in}" if result.state == "ready" else f"dead ({result.dead_reason})"
                    log.info("job %s (%s) failed, %s: %s", job.id, job.kind,
                             "permanent" if outcome.permanent else "transient", then)
                return
            except errors.RevenantError as err:
                if not err.retryable or attempt == 2:
                    raise
                time.sleep(1 + attempt)

    def _heartbeats(self, running: _Running) -> None:
        """Extends the lease every `heartbeat_every` until the attempt is settled or
        the lease is lost. A failed beat that may pass is tried again at the next."""
        ctx = running.ctx
        while not running.done.wait(self.heartbeat_seconds):
            try:
                self.client.heartbeat(ctx.job, lease=self.lease)
            except (errors.LeaseLost, errors.NotFound) as err:
                if running.done.is_set():
                    return  # settled meanwhile: the ack, not the beat, says what happened
                ctx.lease_lost.set()
                log.warning("job %s (%s): lease lost (%s); its result will be dropped", ctx.id, ctx.kind, err.code)
                return
            except errors.RevenantError as err:
                log.warning("job %s: heartbeat failed: %s; trying again in %.1fs", ctx.id, err, self.heartbeat_seconds)

    # --- stopping ------------------------------------------------------------------

    def _drain(self) -> None:
        """Waits for the running jobs; once stopping, for at most `grace`, then
        releases those left (their attempt given back)."""
        deadline: Optional[float] = None
        with self._changed:
            while self._active:
                if self._stopping.is_set():
                    if deadline is None:
                        deadline = time.monotonic() + self.grace_seconds
                        log.info("worker %s stopping: %d job(s) running, %ss to finish", self.name, len(self._active), self.grace_seconds)
                    if self._hurry.is_set() or time.monotonic() >= deadline:
                        break
                self._changed.wait(0.1)
            left = list(self._active.values())
        for running in left:
            self._release(running)

    def _release(self, running: _Running) -> None:
        ctx = running.ctx
        with running.lock:
            if running.settled:
                return
            running.settled = True
        running.done.set()
        if ctx.lease_lost.is_set():
            self._count("lease_lost")
            return
        try:
            self.client.snooze(ctx.job, 0)
            self._count("released")
            log.warning("job %s (%s): still running after the grace period; released (attempt given back)", ctx.id, ctx.kind)
        except errors.LeaseLost:
            self._count("lease_lost")
        except errors.RevenantError as err:
            log.error("job %s: could not release it (%s); its lease will expire", ctx.id, err)

    def _count(self, outcome: str) -> None:
        with self._stats_lock:
            setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)


@dataclass
class _Outcome:
    action: str  # complete, fail, snooze, drop
    message: str = ""
    permanent: bool = False
    after: Optional[Duration] = None


def _text(message: str, err: BaseException) -> str:
    """A failure's message, never blank (the server refuses a blank one)."""
    text = str(message).strip() if message is not None else ""
    return text or type(err).__name__


def _server_side(err: errors.RevenantError) -> bool:
    """A 5xx other than the retryable ones (a proxy's 502): worth trying again."""
    return err.status is not None and err.status >= 500
