// What every Node.js peer driver shares: the task (one JSON argument), progress lines,
// the one JSON line of figures (the protocol of ../README.md), and W2's failure pattern,
// bit for bit the same as the Rust and Python drivers'.
import { performance } from 'node:perf_hooks'

export function task () {
  try {
    const t = JSON.parse(process.argv[2])
    return {
      queue: 'bench', jobs: 0, batch: 1, concurrency: 1, fail_percent: 0, poison_every: 0,
      max_attempts: 5, rates: [], seconds: 0, ...t
    }
  } catch (err) {
    console.error(`usage: node driver.mjs '<task JSON>' (${err.message})`)
    process.exit(2)
  }
}

export const now = () => performance.now() // ms, W3's clock
export const unixSeconds = () => Date.now() / 1000
export const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

export function progress (total) {
  let last = 0
  return done => {
    const t = now()
    if (t - last < 250) return
    last = t
    process.stderr.write(`@progress ${done} ${total}\n`)
  }
}

export function result (figures) {
  process.stdout.write(JSON.stringify(figures) + '\n')
}

const M = (1n << 64n) - 1n
function splitmix (x) {
  let z = (x + 0x9E3779B97F4A7C15n) & M
  z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & M
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & M
  return z ^ (z >> 31n)
}

export const isPoison = (t, i) => t.poison_every > 0 && i % t.poison_every === 0

// Poison jobs fail every attempt; the others fail in fail_percent of attempts, never
// on the last allowed one, so only the poison jobs can end dead.
export function attemptFails (t, i, attempt) {
  if (isPoison(t, i)) return true
  if (attempt >= t.max_attempts) return false
  const h = splitmix((BigInt(i) * 31n + BigInt(attempt)) & M)
  return h % 100n < BigInt(t.fail_percent)
}

export function expectedDead (t) {
  let n = 0
  for (let i = 0; i < t.jobs; i++) if (isPoison(t, i)) n++
  return n
}

export function percentile (sorted, p) {
  if (!sorted.length) return 0
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1]
}

export function latencySummary (rate, jobs, arrivalsSecs, ms) {
  const s = [...ms].sort((a, b) => a - b)
  return {
    rate, jobs, started: s.length, achieved_rate: jobs / Math.max(arrivalsSecs, 1e-9),
    p50_ms: percentile(s, 50), p99_ms: percentile(s, 99), max_ms: s.length ? s[s.length - 1] : 0
  }
}

// Open-loop arrivals (W3): for each rate, each enqueue is started at its scheduled time
// whether or not the previous one returned; `enqueue(t)` adds one job carrying `t`.
export async function openLoop (t, enqueue, samples) {
  const deadline = now() + t.time_limit * 1000
  const total = t.rates.reduce((a, r) => a + Math.round(r * t.seconds), 0)
  const tick = progress(total)
  const out = []
  let expected = 0
  for (const rate of t.rates) {
    const n = Math.round(rate * t.seconds)
    const first = expected
    expected += n
    const start = now()
    const pending = []
    for (let k = 0; k < n; k++) {
      const at = start + (k * 1000) / rate
      if (at >= deadline) break
      const wait = at - now()
      if (wait > 1) await sleep(wait)
      pending.push(enqueue(now()))
      tick(samples.length)
    }
    const arrivals = (now() - start) / 1000
    await Promise.all(pending)
    while (samples.length < expected && now() < deadline) {
      tick(samples.length)
      await sleep(10)
    }
    out.push(latencySummary(rate, n, arrivals, samples.slice(first)))
  }
  return { rates: out }
}

const POLL_MS = 50 // between a drain's looks at its counts, but near its end
const QUIET_MS = 5 // from this long after the last start...
const QUIET_END_MS = 100 // ...to this long after it, look every END_POLL_MS
const END_POLL_MS = 2

// Whether a drain that last looked at its counts at `looked` (a `now()`) looks again
// now, its last job having started here at `last` (0: none yet): every END_POLL_MS from
// QUIET_MS to QUIET_END_MS after the last start, else every POLL_MS (before any start,
// while jobs keep starting, and in a longer pause: a retry's backoff, not the end).
function lookNow (looked, last) {
  const t = now()
  const sinceStart = t - last
  const nearEnd = last > 0 && sinceStart >= QUIET_MS && sinceStart < QUIET_END_MS
  return t - looked >= POLL_MS || (nearEnd && t - looked >= END_POLL_MS)
}

async function pollPause (lastStart) {
  const looked = now()
  do {
    await sleep(END_POLL_MS)
  } while (!lookNow(looked, lastStart()))
}

// Polls `counts()` -> {done, dead} until `jobs` are finished or the time limit;
// returns the figures of a drain. `lastStart` gives the `now()` at which a job last
// started here (0 for none yet); the counts are looked at every 2 ms from 5 ms to
// 100 ms after it, else every 50 ms (`lookNow`). A drain's last jobs finish a few
// milliseconds after the last one starts, and at 50 ms a drain of 0.4 s would be
// measured up to 12% long, and W2's clean drains of 5,000 jobs (0.12 to 0.21 s on
// revenant) up to a third long, while the ceilings, which know when their loop ends,
// are not. Past 100 ms a pause in starts is a retry's backoff (W2; graphile-worker's
// is seconds), polled at 50 ms again. revenant's driver does the same (`LastStart` in
// its driver.rs), as do the other peers' drivers.
export async function waitFinished (t, counts, started, startedAt, lastStart) {
  const deadline = started + t.time_limit * 1000
  const tick = progress(t.jobs)
  let c
  for (;;) {
    c = await counts()
    tick(c.done + c.dead)
    if (c.done + c.dead >= t.jobs || now() >= deadline) break
    await pollPause(lastStart)
  }
  const seconds = (now() - started) / 1000
  return {
    completed: c.done, dead: c.dead, seconds, per_sec: c.done / seconds,
    started_at: startedAt, ended_at: unixSeconds(), partial: c.done + c.dead < t.jobs
  }
}
