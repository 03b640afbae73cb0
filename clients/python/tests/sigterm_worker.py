"""A worker process for test_process.py: `python sigterm_worker.py URL TOKEN QUEUE`.

Kinds: `polite` runs until the worker stops, then returns; `stuck` ignores the stop.
Prints the worker's stats as JSON on stdout when it returns.
"""

import json
import logging
import sys

from revenant_client import Client, JobContext, Worker


def polite(job: JobContext) -> None:
    job.stopping.wait(300)


def stuck(job: JobContext) -> None:
    job.lease_lost.wait(300)


def main() -> int:
    url, token, queue = sys.argv[1:4]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    worker = Worker(
        Client(url, token),
        queue,
        {"polite": polite, "stuck": stuck},
        name="py-sigterm",
        concurrency=3,
        lease="5s",
        wait="1s",
        grace="5s",
    )
    stats = worker.run()
    print(json.dumps(stats.as_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
