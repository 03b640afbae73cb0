#!/usr/bin/env python3
"""A revenant worker in Python, over `revenant serve`'s HTTP API, on the Python client.

The client package (clients/python, `pip install ./clients/python`) does the lease
handling: it claims jobs with a lease, heartbeats each lease while its job runs, and
settles each attempt once: complete, or fail (transient, optionally with a
Retry-After, or permanent), or snooze. If a lease is lost (it expired and another
worker took the job, or an operator cancelled it), the job is dropped, never acked.

    revenant serve &                               # 127.0.0.1:8080, no tokens: loopback only
    revenant enqueue -q demo -k echo -p '{"hello": "world"}'
    python3 examples/remote_worker.py --queue demo

With tokens, give one with the `work` scope in REVENANT_TOKEN (or --token).

Handlers are plain functions of the job, registered by kind below. Raise `Permanent`
for a failure that will never pass (the job is dead at once), `Retry(message, after)`
to say when to come back, any other exception for a transient failure (retried with
the server's backoff while attempts are left). A kind with no handler fails
permanently, as revenant's own workers do (`unknown_kind`).

SIGTERM or Ctrl-C stops claiming, lets running jobs finish for up to --grace, then
hands back those still running (their attempt given back).

Exit codes: 0 after a clean stop (Ctrl-C, SIGTERM, or --once done), 1 when the server
refuses the token (or, with --once, cannot be reached or refuses the claim), 2 for bad
arguments. Without --once an outage is waited out, trying again every second.
"""

import argparse
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

try:
    import revenant_client  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python" / "src"))

from revenant_client import Client, JobContext, Permanent, RevenantError, Retry, Worker

# --- handlers: one function per kind, taking the job ------------------------------------


def echo(job: JobContext) -> None:
    print(f"job {job.id}: {json.dumps(job.payload)}", flush=True)


def sleep(job: JobContext) -> None:
    """Works for payload["seconds"], checking the lease as it goes (heartbeats run
    meanwhile in their own thread)."""
    deadline = time.monotonic() + float(job.payload.get("seconds", 1))
    while time.monotonic() < deadline:
        job.raise_if_lost()
        time.sleep(0.05)


def fail(job: JobContext) -> None:
    """Fails as the payload says: {"class": "transient"|"permanent", "message": ...,
    "retry_after": "30s"}."""
    message = job.payload.get("message", "failed on purpose")
    if job.payload.get("class") == "permanent":
        raise Permanent(message)
    raise Retry(message, after=job.payload.get("retry_after"))


HANDLERS = {"echo": echo, "sleep": sleep, "fail": fail}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("REVENANT_URL", "http://127.0.0.1:8080"),
                        help="the server (default $REVENANT_URL or http://127.0.0.1:8080)")
    parser.add_argument("--token", default=os.environ.get("REVENANT_TOKEN"),
                        help="a token with the work scope (default $REVENANT_TOKEN)")
    parser.add_argument("--queue", "-q", required=True, action="append",
                        help="a queue to serve (repeat for several)")
    parser.add_argument("--worker", default=f"py-{socket.gethostname()}-{os.getpid()}",
                        help="this worker's id in the registry (default py-HOST-PID)")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs at once (default 4)")
    parser.add_argument("--lease", default="30s", help="the lease; heartbeats every third (default 30s)")
    parser.add_argument("--wait", default="10s", help="how long a claim waits for a job (default 10s, at most 30s)")
    parser.add_argument("--grace", default="30s", help="how long running jobs may finish after a stop (default 30s)")
    parser.add_argument("--once", action="store_true",
                        help="claim one batch (up to --concurrency jobs), run it, exit")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"[{args.worker}] %(message)s")

    try:
        worker = Worker(
            Client(args.url, args.token),
            args.queue,
            HANDLERS,
            name=args.worker,
            concurrency=args.concurrency,
            lease=args.lease,
            wait=args.wait,
            grace=args.grace,
        )
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    try:
        stats = worker.run(once=args.once)
    except RevenantError as err:
        logging.error("stopping: %s", err)
        return 1
    print(json.dumps({"completed": stats.completed, "failed": stats.failed, "lease_lost": stats.lease_lost}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
