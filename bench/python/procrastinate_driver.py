"""procrastinate's driver in the benchmark harness: one task, one JSON line (see
../README.md).

The worker runs `concurrency` jobs at once with LISTEN/NOTIFY wake-ups. Profiles (the
task's `profile`): `tuned` (the default) gives the connector's pool concurrency + 1
connections, as procrastinate's docs on pool size ask for short jobs ("as many
connections as your concurrency (plus one)"); `defaults` leaves the pool at
psycopg_pool's defaults (4 connections). The harness's count queries use a connection
of their own. Retries: `RetryStrategy(max_attempts=max_attempts - 1, wait=0)`,
procrastinate counting retries after the first attempt; its waits are whole seconds,
and 0 is the nearest to the 10 ms the other systems use.
"""

import asyncio
import json
import sys
import time

import procrastinate
import psycopg

M = (1 << 64) - 1


def splitmix(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def is_poison(t, i):
    return t["poison_every"] > 0 and i % t["poison_every"] == 0


def attempt_fails(t, i, attempt):
    """Poison jobs fail every attempt; the others in fail_percent of attempts, never on
    the last allowed one (the same pattern as every other driver)."""
    if is_poison(t, i):
        return True
    if attempt >= t["max_attempts"]:
        return False
    return splitmix((i * 31 + attempt) & M) % 100 < t["fail_percent"]


def now_ms():
    return time.perf_counter() * 1000.0


class Progress:
    def __init__(self, total):
        self.total, self.last = total, 0.0

    def tick(self, done):
        t = now_ms()
        if t - self.last >= 250:
            self.last = t
            print(f"@progress {done} {self.total}", file=sys.stderr, flush=True)


def percentile(s, p):
    if not s:
        return 0.0
    rank = -(-p * len(s) // 100)
    return s[min(max(int(rank), 1), len(s)) - 1]


def main():
    t = {"queue": "bench", "jobs": 0, "batch": 1, "concurrency": 1, "fail_percent": 0,
         "poison_every": 0, "max_attempts": 5, "rates": [], "seconds": 0.0}
    t.update(json.loads(sys.argv[1]))
    figures = asyncio.run(run(t))
    figures["settings"] = settings(t)
    print(json.dumps(figures), flush=True)


def tuned(t):
    return t.get("profile", "tuned") != "defaults"


def pool_options(t):
    """The connector's pool: concurrency + 1 (tuned), or psycopg_pool's defaults."""
    if not tuned(t):
        return {}
    # The docs' size, within this process's share of the server's connections (one
    # kept for the LISTEN connection, one for the harness's count queries).
    size = min(t["concurrency"] + 1, t.get("pool_cap", 1000) - 2)
    return {"min_size": min(4, size), "max_size": size}


def settings(t):
    pool = pool_options(t)
    return {"profile": "tuned" if tuned(t) else "defaults", "concurrency": t["concurrency"],
            "pool_max_size": pool.get("max_size", "4 (psycopg_pool default)"),
            "listen_notify": True, "retry_wait_s": 0, "count_connection": "separate"}


async def run(t):
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=t["url"], **pool_options(t)))
    state = {"tries": {}, "attempts": 0, "samples": [], "failures": t["task"] == "failures",
             "last_start": 0.0}

    @app.task(name="noop", queue=t["queue"], pass_context=False,
              retry=procrastinate.RetryStrategy(max_attempts=t["max_attempts"] - 1, wait=0))
    async def noop(i=0, at=0.0):
        if t["task"] == "latency":
            state["samples"].append(now_ms() - at)
            return
        state["attempts"] += 1
        state["last_start"] = now_ms()
        if state["failures"]:
            n = state["tries"].get(i, 0) + 1
            state["tries"][i] = n
            if attempt_fails(t, i, n):
                raise RuntimeError("planned transient failure")

    async with app.open_async():
        async with app.connector.pool.connection() as conn:
            row = await (await conn.execute("SELECT to_regclass('procrastinate_jobs')")).fetchone()
        if row[0] is None:
            await app.schema_manager.apply_schema_async()
        task = t["task"]
        if task == "enqueue":
            return await enqueue(t, noop, lambda i: {})
        if task in ("drain", "failures"):
            return await drain(t, app, noop, state)
        if task == "latency":
            return await latency(t, app, noop, state)
        raise SystemExit(f"unknown task {task}")


async def enqueue_jobs(t, noop, payload):
    progress, deadline = Progress(t["jobs"]), now_ms() + t["time_limit"] * 1000
    done = 0
    while done < t["jobs"] and now_ms() < deadline:
        n = min(max(t["batch"], 1), t["jobs"] - done)
        if n == 1:
            await noop.defer_async(**payload(done))
        else:
            await noop.batch_defer_async(*[payload(i) for i in range(done, done + n)])
        done += n
        progress.tick(done)
    return done


async def enqueue(t, noop, payload):
    started = now_ms()
    done = await enqueue_jobs(t, noop, payload)
    seconds = (now_ms() - started) / 1000
    return {"enqueued": done, "seconds": seconds, "per_sec": done / seconds,
            "partial": done < t["jobs"]}


async def counts(conn, t):
    cur = await conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
        "       count(*) FILTER (WHERE status = 'failed')"
        " FROM procrastinate_jobs WHERE queue_name = %s", (t["queue"],))
    done, dead = await cur.fetchone()
    return done, dead


POLL_MS = 50  # between a drain's looks at its counts, but near its end
QUIET_MS = 5  # from this long after the last start...
QUIET_END_MS = 100  # ...to this long after it, look every END_POLL_MS
END_POLL_MS = 2


def look_now(looked, last):
    """Whether a drain that last looked at its counts at `looked` (a `now_ms()`) looks
    again now, its last job having started here at `last` (0: none yet): every 2 ms from
    5 ms to 100 ms after the last start, else every 50 ms (before any start, while jobs
    keep starting, and in a longer pause: a retry's backoff, not the end). A drain's
    last jobs finish a few milliseconds after the last one starts, and at 50 ms a drain
    of 0.4 s would be measured up to 12% long, and W2's clean drains of 5,000 jobs
    (0.12 to 0.21 s on revenant) up to a third long, while the ceilings, which know
    when their loop ends, are not. revenant's driver and the other peers' drivers do
    the same."""
    t = now_ms()
    since_start = t - last
    near_end = last > 0 and QUIET_MS <= since_start < QUIET_END_MS
    return t - looked >= POLL_MS or (near_end and t - looked >= END_POLL_MS)


async def poll_pause(state):
    """The pause between a drain's looks at its counts (`look_now`; the task sets
    `state["last_start"]`)."""
    looked = now_ms()
    while True:
        await asyncio.sleep(END_POLL_MS / 1000)
        if look_now(looked, state["last_start"]):
            return


def start_worker(t, app):
    return asyncio.create_task(app.run_worker_async(
        queues=[t["queue"]], concurrency=t["concurrency"], wait=True,
        install_signal_handlers=False, delete_jobs="never", shutdown_graceful_timeout=5))


async def stop_worker(worker):
    worker.cancel()
    try:
        await asyncio.wait_for(worker, 10)
    except (asyncio.CancelledError, asyncio.TimeoutError):
        pass


async def drain(t, app, noop, state):
    # The harness's own connection, apart from procrastinate's pool.
    conn = await psycopg.AsyncConnection.connect(t["url"], autocommit=True)
    if state["failures"]:
        await enqueue_jobs(t, noop, lambda i: {"i": i})
        await conn.execute("ANALYZE")  # as the harness does after every bulk enqueue
    progress, deadline = Progress(t["jobs"]), now_ms() + t["time_limit"] * 1000
    started_at, started = time.time(), now_ms()
    worker = start_worker(t, app)
    polls = 0
    while True:
        polls += 1
        done, dead = await counts(conn, t)
        progress.tick(done + dead)
        if done + dead >= t["jobs"] or now_ms() >= deadline:
            break
        await poll_pause(state)
    seconds = (now_ms() - started) / 1000
    figures = {"completed": done, "dead": dead, "seconds": seconds, "per_sec": done / seconds,
               "started_at": started_at, "ended_at": time.time(),
               "partial": done + dead < t["jobs"], "polls": polls}
    await stop_worker(worker)
    await conn.close()
    if state["failures"]:
        async with app.connector.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT (args->>'i')::int FROM procrastinate_jobs"
                " WHERE queue_name = %s AND status = 'failed'", (t["queue"],))
            dead_is = [r[0] for r in await cur.fetchall()]
        expected = sum(1 for i in range(t["jobs"]) if is_poison(t, i))
        figures.update({
            "expected_dead": expected,
            "dead_are_exactly_the_poison_jobs":
                len(dead_is) == expected and all(is_poison(t, i) for i in dead_is),
            "attempts": state["attempts"],
        })
    return figures


async def latency(t, app, noop, state):
    samples = state["samples"]
    worker = start_worker(t, app)
    await asyncio.sleep(0.5)
    deadline = now_ms() + t["time_limit"] * 1000
    total = sum(round(r * t["seconds"]) for r in t["rates"])
    progress, out, expected = Progress(total), [], 0
    for rate in t["rates"]:
        n = round(rate * t["seconds"])
        first = expected
        expected += n
        start = now_ms()
        pending = []
        for k in range(n):
            at = start + k * 1000.0 / rate
            if at >= deadline:
                break
            wait = at - now_ms()
            if wait > 0:
                await asyncio.sleep(wait / 1000)
            pending.append(asyncio.create_task(noop.defer_async(at=now_ms())))
            progress.tick(len(samples))
        arrivals = (now_ms() - start) / 1000
        await asyncio.gather(*pending)
        while len(samples) < expected and now_ms() < deadline:
            progress.tick(len(samples))
            await asyncio.sleep(0.01)
        s = sorted(samples[first:])
        out.append({"rate": rate, "jobs": n, "started": len(s),
                    "achieved_rate": n / max(arrivals, 1e-9),
                    "p50_ms": percentile(s, 50), "p99_ms": percentile(s, 99),
                    "max_ms": s[-1] if s else 0.0})
    await stop_worker(worker)
    return {"rates": out}


if __name__ == "__main__":
    main()
