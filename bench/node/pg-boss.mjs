// pg-boss's driver in the benchmark harness: one task, one JSON line (see ../README.md).
//
// `concurrency` slots are one `work()` with `batchSize = concurrency`, whose handler
// runs the batch's jobs at once (pg-boss 10 has no other in-process concurrency
// setting; each `work()` fetches, runs and completes one batch at a time). Polling is
// at pg-boss's minimum interval, 0.5 s, and a handler that got a full batch calls
// `notifyWorker(id)`, which pg-boss's docs give "to bypass the job polling interval"
// for the next fetch: a busy queue is fetched again at once, an empty one is polled.
// The pool is pg-boss's default (max 10); the harness's count queries use a pool of
// their own. Retries: `retryDelay: 0` (whole seconds only; 0 is the nearest to the
// 10 ms the other systems use), no backoff.
import pg from 'pg'
import PgBoss from 'pg-boss'
import * as c from './common.mjs'

const t = c.task()
const options = { retryLimit: t.max_attempts - 1, retryDelay: 0, retryBackoff: false }
const pool = new pg.Pool({ connectionString: t.url, max: 2 })
const boss = new PgBoss({
  connectionString: t.url,
  max: 10,
  supervise: t.task !== 'enqueue',
  schedule: false,
  migrate: true
})
boss.on('error', err => console.error(`pg-boss: ${err.message}`))
await boss.start()
await boss.createQueue(t.queue)
const settings = {
  batch_size: t.concurrency,
  polling_interval_s: 0.5,
  notify_worker_after_full_batch: true,
  pool: 10,
  retry_delay_s: 0,
  count_pool: 2
}
let polls = 0 // the harness's count queries (W4 takes their commits out)
const figures = await main()
await boss.stop({ graceful: true, wait: true, timeout: 5000 })
await pool.end()
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

async function enqueueJobs (payload) {
  const tick = c.progress(t.jobs)
  const deadline = c.now() + t.time_limit * 1000
  let done = 0
  while (done < t.jobs && c.now() < deadline) {
    const n = Math.min(Math.max(t.batch, 1), t.jobs - done)
    if (n === 1) {
      await boss.send(t.queue, payload(done), options)
    } else {
      const jobs = []
      for (let i = done; i < done + n; i++) jobs.push({ name: t.queue, data: payload(i), ...options })
      await boss.insert(jobs)
    }
    done += n
    tick(done)
  }
  return done
}

async function enqueue () {
  const started = c.now()
  const done = await enqueueJobs(() => ({}))
  const seconds = (c.now() - started) / 1000
  return { enqueued: done, seconds, per_sec: done / seconds, partial: done < t.jobs }
}

async function counts () {
  polls++
  const { rows } = await pool.query(
    `SELECT count(*) FILTER (WHERE state = 'completed')::int AS done,
            count(*) FILTER (WHERE state = 'failed')::int AS dead
     FROM pgboss.job WHERE name = $1`, [t.queue])
  return rows[0]
}

async function drain (failures) {
  if (failures) {
    await enqueueJobs(i => ({ i }))
    await pool.query('ANALYZE') // as the harness does after every bulk enqueue
  }
  const tries = new Map()
  let attempts = 0
  let lastStart = 0 // when a job last started (waitFinished)
  const startedAt = c.unixSeconds()
  const started = c.now()
  let workerId = null
  workerId = await boss.work(t.queue, { batchSize: t.concurrency, pollingIntervalSeconds: 0.5 }, async jobs => {
    attempts += jobs.length
    lastStart = c.now()
    if (jobs.length === t.concurrency && workerId) boss.notifyWorker(workerId)
    if (!failures) return
    const failed = []
    for (const job of jobs) {
      const n = (tries.get(job.data.i) || 0) + 1
      tries.set(job.data.i, n)
      if (c.attemptFails(t, job.data.i, n)) failed.push(job.id)
    }
    // Failed first: the batch's completion then only completes the jobs still active.
    if (failed.length) await boss.fail(t.queue, failed, { message: 'planned transient failure' })
  })
  const figures = await c.waitFinished(t, counts, started, startedAt, () => lastStart)
  figures.polls = polls
  await boss.offWork(t.queue)
  if (failures) {
    const { rows } = await pool.query(
      `SELECT (data->>'i')::int AS i FROM pgboss.job WHERE name = $1 AND state = 'failed'`, [t.queue])
    const dead = rows.map(r => r.i)
    figures.expected_dead = c.expectedDead(t)
    figures.dead_are_exactly_the_poison_jobs =
      dead.length === figures.expected_dead && dead.every(i => c.isPoison(t, i))
    figures.attempts = attempts
  }
  return figures
}

async function latency () {
  const samples = []
  let workerId = null
  workerId = await boss.work(t.queue, { batchSize: t.concurrency, pollingIntervalSeconds: 0.5 }, async jobs => {
    if (jobs.length === t.concurrency && workerId) boss.notifyWorker(workerId)
    const at = c.now()
    for (const job of jobs) samples.push(at - job.data.t)
  })
  await c.sleep(500)
  const figures = await c.openLoop(t, at => boss.send(t.queue, { t: at }), samples)
  await boss.offWork(t.queue)
  return figures
}
