#!/usr/bin/env python3
"""A revenant worker in Python, over `revenant serve`'s HTTP API. Standard library only.

It claims jobs with a lease, keeps each lease alive with heartbeats while the job runs,
and settles each attempt: complete, or fail (transient, optionally with a Retry-After,
or permanent). Every call after the claim carries the job's lease token: if the lease
was lost (it expired and another worker took the job, or an operator cancelled it), the
server answers 409 `lease_lost`, and this worker drops the job instead of pretending.

    revenant serve &                               # 127.0.0.1:8080, no tokens: loopback only
    revenant enqueue -q demo -k echo -p '{"hello": "world"}'
    python3 examples/remote_worker.py --queue demo

With tokens, give one with the `work` scope in REVENANT_TOKEN (or --token).

Handlers are plain functions of the job's payload, registered by kind below. Raise
`Permanent` for a failure that will never pass (the job is dead at once), `RetryAfter`
to say when to come back, any other exception for a transient failure (retried with
the server's backoff while attempts are left). A kind with no handler fails
permanently, as revenant's own workers do (`unknown_kind`).

Exit codes: 0 after a clean stop (Ctrl-C, SIGTERM, or --once done), 1 when the server
refuses the token (or, with --once, cannot be reached or refuses the claim), 2 for bad
arguments. Without --once an outage is waited out, trying again every second.
"""

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


class Permanent(Exception):
    """A failure that will never pass: the job goes to the dead letters at once."""


class RetryAfter(Exception):
    """A transient failure that says when to come back (e.g. an HTTP 429's Retry-After)."""

    def __init__(self, message, after):
        super().__init__(message)
        self.after = after  # a duration: "30s", "5m", or milliseconds


class LeaseLost(Exception):
    """The server says this worker no longer holds the job's lease."""


class ApiError(Exception):
    """Any other error answer: `code` is the API's stable error code."""

    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


# --- handlers: one function per kind, taking the payload and a Job ----------------------


def echo(payload, job):
    print(f"job {job.id}: {json.dumps(payload)}", flush=True)


def sleep(payload, job):
    """Works for payload["seconds"], checking the lease as it goes (heartbeats run
    meanwhile in their own thread)."""
    deadline = time.monotonic() + float(payload.get("seconds", 1))
    while time.monotonic() < deadline:
        if job.lost.is_set():
            raise LeaseLost()
        time.sleep(0.05)


def fail(payload, job):
    """Fails as the payload says: {"class": "transient"|"permanent", "message": ...,
    "retry_after": "30s"}."""
    message = payload.get("message", "failed on purpose")
    if payload.get("class") == "permanent":
        raise Permanent(message)
    if "retry_after" in payload:
        raise RetryAfter(message, payload["retry_after"])
    raise RuntimeError(message)


HANDLERS = {"echo": echo, "sleep": sleep, "fail": fail}


# --- the API client -------------------------------------------------------------------


class Client:
    def __init__(self, url, token, timeout):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def post(self, path, body, timeout=None):
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            try:
                error = json.loads(err.read())["error"]
                code, message = error["code"], error["message"]
            except (ValueError, KeyError, TypeError):
                code, message = "unknown", err.reason
            if code == "lease_lost":
                raise LeaseLost(message) from None
            raise ApiError(err.code, code, message) from None


class Job:
    def __init__(self, claimed):
        self.id = claimed["id"]
        self.kind = claimed["kind"]
        self.payload = claimed["payload"]
        self.attempt = claimed["attempt"]
        self.max_attempts = claimed["max_attempts"]
        self.lease_token = claimed["lease_token"]
        self.lost = threading.Event()  # set when a heartbeat finds the lease gone


# --- the worker -----------------------------------------------------------------------


class Worker:
    def __init__(self, client, args):
        self.client = client
        self.args = args
        self.stopping = threading.Event()
        self.settled = {"completed": 0, "failed": 0, "lease_lost": 0}
        self.lock = threading.Lock()

    def log(self, message):
        print(f"[{self.args.worker}] {message}", file=sys.stderr, flush=True)

    def count(self, outcome):
        with self.lock:
            self.settled[outcome] += 1

    def heartbeat(self, job, done):
        """Extends the lease every third of it until the job is done or the lease is lost."""
        every = self.args.lease_seconds / 3
        while not done.wait(every):
            try:
                self.client.post(
                    f"/v1/jobs/{job.id}/heartbeat",
                    {"lease_token": job.lease_token, "lease": self.args.lease},
                )
            except LeaseLost:
                self.log(f"job {job.id}: lease lost; its result will be dropped")
                job.lost.set()
                return
            except (ApiError, OSError) as err:
                # A passing outage: the lease still runs; try again next beat.
                self.log(f"job {job.id}: heartbeat failed: {err}")

    def run_one(self, job):
        done = threading.Event()
        beat = threading.Thread(target=self.heartbeat, args=(job, done), daemon=True)
        beat.start()
        body = {"lease_token": job.lease_token}
        try:
            handler = HANDLERS.get(job.kind)
            if handler is None:
                raise Permanent(f"no handler for kind {job.kind!r} in this worker")
            handler(job.payload, job)
            action = "complete"
        except LeaseLost:
            action = None
        except Permanent as err:
            action, body = "fail", {**body, "class": "permanent", "message": str(err)}
        except RetryAfter as err:
            action = "fail"
            body = {**body, "class": "transient", "message": str(err), "retry_after": err.after}
        except Exception as err:  # noqa: BLE001 - any other error is transient
            message = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=5)}"
            action, body = "fail", {**body, "class": "transient", "message": message}
        finally:
            done.set()
            beat.join()
        if action is None or job.lost.is_set():
            self.count("lease_lost")
            return
        try:
            answer = self.client.post(f"/v1/jobs/{job.id}/{action}", body)
        except LeaseLost:
            self.log(f"job {job.id}: lease lost before the {action}; nothing recorded")
            self.count("lease_lost")
            return
        if action == "complete":
            self.count("completed")
            self.log(f"job {job.id} ({job.kind}) completed")
        else:
            self.count("failed")
            then = f"retry in {answer['retry_in']}" if answer["state"] == "ready" else f"dead ({answer['dead_reason']})"
            self.log(f"job {job.id} ({job.kind}) failed, {body['class']}: {then}")

    def claim(self, limit):
        answer = self.client.post(
            "/v1/claims",
            {
                "queue": self.args.queue,
                "worker": self.args.worker,
                "limit": limit,
                "lease": self.args.lease,
                "wait": self.args.wait,
            },
            timeout=self.client.timeout + self.args.wait_seconds,
        )
        return [Job(job) for job in answer["jobs"]]

    def run(self):
        with ThreadPoolExecutor(max_workers=self.args.concurrency) as pool:
            busy = set()
            while not self.stopping.is_set():
                busy = {f for f in busy if not f.done()}
                free = self.args.concurrency - len(busy)
                if free == 0:
                    time.sleep(0.05)
                    continue
                try:
                    jobs = self.claim(free)
                except ApiError as err:
                    if err.status in (401, 403) or self.args.once:
                        raise
                    self.log(f"claim failed: {err}; retrying in 1s")
                    self.stopping.wait(1)
                    continue
                except OSError as err:
                    if self.args.once:
                        raise ApiError(0, "unreachable", str(err)) from None
                    self.log(f"the server is unreachable: {err}; retrying in 1s")
                    self.stopping.wait(1)
                    continue
                for job in jobs:
                    busy.add(pool.submit(self.run_one, job))
                if self.args.once:
                    break
            for future in busy:
                future.result()


def seconds(duration):
    """Reads "30s", "5m", "250ms", "1h" (what the API accepts) into seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if duration.endswith(unit) and duration[: -len(unit)].isdigit():
            return int(duration[: -len(unit)]) * units[unit]
    raise argparse.ArgumentTypeError(f"{duration!r} is not a duration like 30s, 5m, 250ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("REVENANT_URL", "http://127.0.0.1:8080"),
                        help="the server (default $REVENANT_URL or http://127.0.0.1:8080)")
    parser.add_argument("--token", default=os.environ.get("REVENANT_TOKEN"),
                        help="a token with the work scope (default $REVENANT_TOKEN)")
    parser.add_argument("--queue", "-q", required=True, help="the queue to serve")
    parser.add_argument("--worker", default=f"py-{socket.gethostname()}-{os.getpid()}",
                        help="this worker's id in the registry (default py-HOST-PID)")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs at once (default 4)")
    parser.add_argument("--lease", default="30s", help="the lease; heartbeats every third (default 30s)")
    parser.add_argument("--wait", default="10s", help="how long a claim waits for a job (default 10s, at most 30s)")
    parser.add_argument("--once", action="store_true",
                        help="claim one batch (up to --concurrency jobs), run it, exit")
    args = parser.parse_args()
    try:
        args.lease_seconds = seconds(args.lease)
        args.wait_seconds = seconds(args.wait)
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")

    worker = Worker(Client(args.url, args.token, timeout=10), args)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: worker.stopping.set())
    worker.log(f"serving queue {args.queue} from {args.url}")
    try:
        worker.run()
    except ApiError as err:
        worker.log(f"stopping: {err}")
        return 1
    worker.log(f"stopped: {worker.settled}")
    print(json.dumps(worker.settled), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
