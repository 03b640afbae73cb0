// graphile-worker's driver in the benchmark harness: one task, one JSON line (see
// ../README.md). Jobs are deleted when they complete; a job that used all its attempts
// stays in the table (attempts = max_attempts): that is its dead state.
//
// graphile-worker's retry delay is fixed (exp(min(attempts, 10)) seconds) and cannot
// be shortened, so W2 waits about 84 s for a 5-attempt poison job to die.
//
// Profiles (the task's `profile`):
// - `tuned` (the default): the settings graphile-worker's docs give for high
//   throughput. The runner's pool has max(10, concurrency + 2) connections (the
//   `maxPoolSize` docs: "10 or concurrentJobs + 2, whichever is larger"), and batching
//   as in its perfTest config and Performance docs: `localQueue` of 500 with a 10 ms
//   refetch delay, `completeJobBatchDelay: 0`, `failJobBatchDelay: 0`; `pollInterval`
//   100 ms, so retries that come due are picked up promptly (W2).
// - `defaults`: graphile-worker's own defaults (a pool of 10, no local queue, no
//   batched completion, 2 s polling), the workload's slots and attempts only.
// The producer and the harness's count queries use a pool of their own, apart from
// the runner's.
import pg from 'pg'
import { Logger, makeWorkerUtils, run } from 'graphile-worker'
import * as c from './common.mjs'

const t = c.task()
const quiet = new Logger(() => () => {})
const tuned = t.profile !== 'defaults'
// The docs' size, within this process's share of the server's connections.
const runnerPoolSize = Math.min(tuned ? Math.max(10, t.concurrency + 2) : 10,
  (t.pool_cap || 1000) - 2)
const preset = tuned
  ? {
      worker: {
        localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
        pollInterval: 100
      }
    }
  : { worker: {} }
const settings = {
  profile: tuned ? 'tuned' : 'defaults',
  concurrency: t.concurrency,
  runner_pool: runnerPoolSize,
  local_queue: tuned ? 'size 500, refetchDelay 10 ms' : 'off (default)',
  complete_job_batch_delay: tuned ? 0 : 'off (default)',
  fail_job_batch_delay: tuned ? 0 : 'off (default)',
  poll_interval_ms: tuned ? 100 : 2000,
  producer_and_count_pool: 2
}
const pool = new pg.Pool({ connectionString: t.url, max: 2 })
const runnerPool = new pg.Pool({ connectionString: t.url, max: runnerPoolSize })
runnerPool.on('error', err => console.error(`pg: ${err.message}`))
let polls = 0 // the harness's count queries (W4 takes their commits out)
const figures = await main()
await pool.end()
await runnerPool.end()
c.result({ ...figures, settings })
process.exit(0)

async function main () {
  switch (t.task) {
    case 'enqueue': return enqueue()
    case 'drain': return drain(false)
    case 'failures': return drain(true)
    case 'latency': return latency()
    default: throw new Error(`unknown task ${t.task}`)
  }
}

async function utils () {
  const u = await makeWorkerUtils({ pgPool: pool, logger: quiet })
  await u.migrate()
  return u
}

async function enqueueJobs (u, payload) {
  const tick = c.progress(t.jobs)
  const deadline = c.now() + t.time_limit * 1000
  let done = 0
  while (done < t.jobs && c.now() < deadline) {
    const n = Math.min(Math.max(t.batch, 1), t.jobs - done)
    if (n === 1) {
      await u.addJob('noop', payload(done), { maxAttempts: t.max_attempts })
    } else {
      const specs = []
      for (let i = done; i < done + n; i++) {
        specs.push({ identifier: 'noop', payload: payload(i), maxAttempts: t.max_attempts })
      }
      await u.addJobs(specs)
    }
    done += n
    tick(done)
  }
  return done
}

async function enqueue () {
  const u = await utils()
  const started = c.now()
  const done = await enqueueJobs(u, () => ({}))
  const seconds = (c.now() - started) / 1000
  await u.release()
  return { enqueued: done, seconds, per_sec: done / seconds, partial: done < t.jobs }
}

async function counts () {
  polls++
  const { rows } = await pool.query(
    `SELECT count(*)::int AS left,
            count(*) FILTER (WHERE attempts >= max_attempts AND locked_at IS NULL)::int AS dead
     FROM graphile_worker._private_jobs`)
  return { done: t.jobs - rows[0].left, dead: rows[0].dead }
}

async function drain (failures) {
  const u = await utils()
  if (failures) {
    await enqueueJobs(u, i => ({ i }))
    await pool.query('ANALYZE') // as the harness does after every bulk enqueue
  }
  let attempts = 0
  let lastStart = 0 // when a job last started (waitFinished)
  const startedAt = c.unixSeconds()
  const started = c.now()
  const runner = await run({
    pgPool: runnerPool,
    concurrency: t.concurrency,
    noHandleSignals: true,
    logger: quiet,
    preset,
    taskList: {
      noop: async (payload, helpers) => {
        attempts++
        lastStart = c.now()
        if (failures && c.attemptFails(t, payload.i, helpers.job.attempts)) {
          throw new Error('planned transient failure')
        }
      }
    }
  })
  const figures = await c.waitFinished(t, counts, started, startedAt, () => lastStart)
  figures.polls = polls
  await runner.stop()
  if (failures) {
    const { rows } = await pool.query(
      `SELECT (payload->>'i')::int AS i FROM graphile_worker._private_jobs
       WHERE attempts >= max_attempts`)
    const dead = rows.map(r => r.i)
    figures.expected_dead = c.expectedDead(t)
    figures.dead_are_exactly_the_poison_jobs =
      dead.length === figures.expected_dead && dead.every(i => c.isPoison(t, i))
    figures.attempts = attempts
  }
  await u.release()
  return figures
}

async function latency () {
  const u = await utils()
  const samples = []
  const runner = await run({
    pgPool: runnerPool,
    concurrency: t.concurrency,
    noHandleSignals: true,
    logger: quiet,
    preset,
    taskList: { noop: async payload => { samples.push(c.now() - payload.t) } }
  })
  await c.sleep(500)
  const figures = await c.openLoop(t, at => u.addJob('noop', { t: at }), samples)
  await runner.stop()
  await u.release()
  return figures
}
