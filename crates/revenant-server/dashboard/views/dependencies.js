// `#/dependencies`: every dependency's circuit breaker, rate limit and retry budget,
// the jobs waiting on it, and an operator's hand on the breaker: Open (hold it open),
// Close (close now, release the parked jobs) and Auto (release a hold). The same as
// `revenant breaker list` and `revenant breaker open|close|auto`; docs/breakers.md.

import { html, count, when, duration, plural } from "../format.js";

let root = null;
let known = new Map(); // key -> the last DependencyState drawn, for the confirmations

export default {
  nav: "dependencies",
  title: () => "Dependencies",

  mount(main, params, ctx) {
    root = main;
    known = new Map();
    main.innerHTML = String(html`
      <div class="page-head"><h1>Dependencies</h1><span class="sub" data-region="summary"></span></div>
      <div data-region="action-result" aria-live="polite"></div>
      <section class="panel flush" aria-labelledby="deps-h" data-testid="dependencies-panel">
        <header><h2 id="deps-h">Breakers, rate limits and retry budgets</h2></header>
        <div data-region="dependencies"><p class="loading empty">Loading…</p></div>
      </section>
      <p class="small">A breaker opens when too many answers in its window are transient failures; its jobs are then <em>parked</em> (not run, no attempt spent) until a probe succeeds or someone closes it. <strong>Open</strong> holds it open (planned maintenance: no job of it runs, no probe goes); <strong>Close</strong> closes it now and releases the parked jobs, paced by the rate limit; <strong>Auto</strong> releases a hold: a probe goes at once and the breaker works by itself again. The numbers are the store's, as every worker sees them.</p>`);
    // On the panel, not on `main`: `main` outlives this view, the panel does not.
    main.querySelector('[data-testid="dependencies-panel"]').addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-breaker-action]");
      if (button) act(ctx, button.dataset.dependency, button.dataset.breakerAction);
    });
  },

  async refresh(ctx, current) {
    const { dependencies } = await ctx.api.get("dependencies");
    if (!current()) return;
    known = new Map(dependencies.map((d) => [d.dependency, d]));
    const open = dependencies.filter((d) => d.breaker !== "closed").length;
    const parked = dependencies.reduce((n, d) => n + d.waiting.breaker, 0);
    ctx.patch(root.querySelector('[data-region="summary"]'), dependencies.length
      ? html`${plural(dependencies.length, "dependency", "dependencies")} · <span class="${open ? "bad-text" : ""}">${count(open)} not closed</span> · ${plural(parked, "parked job")}`
      : "");
    ctx.patch(root.querySelector('[data-region="dependencies"]'), table(dependencies));
  },
};

const pct = (share) => `${Math.round((share || 0) * 100)}%`;

/** A number of requests or tokens: whole when it is, else one decimal. */
function trim(x) {
  return Number.isInteger(x) ? count(x) : Number(x).toFixed(1);
}

function breakerCell(d) {
  const state = d.breaker.replace("_", "-");
  const level = d.breaker === "open" ? "bad" : d.breaker === "half_open" ? "warn" : "ok";
  return html`<span class="badge ${level}" data-testid="breaker-state">${state}</span>${d.held_open
    ? html` <span class="badge warn" data-testid="held-open" title="Held open by an operator: no probe goes until Close or Auto">held</span>`
    : ""}
    <div class="small">${d.trips ? html`${plural(d.trips, "trip")}` : "never tripped"}${d.changed_at ? html` · changed ${when(d.changed_at)}` : ""}</div>`;
}

function answersCell(d) {
  const a = d.answers;
  const slow = a.slow || 0;
  const total = a.successes + a.failures + slow;
  const over = total > 0 && total >= a.min_requests && a.failure_share >= a.threshold;
  const slowOver = a.slow_threshold != null && total >= a.min_requests && a.slow_share >= a.slow_threshold;
  return html`<span class="${over ? "bad-text" : ""}" data-testid="failure-share">${pct(a.failure_share)}</span> failed of ${trim(total)}
    ${a.slow_threshold != null ? html`<div><span class="${slowOver ? "bad-text" : ""}" data-testid="slow-share">${pct(a.slow_share)}</span> slow (over ${duration(a.slow_call_secs)})</div>` : ""}
    <div class="small">opens at ${pct(a.threshold)}${a.slow_threshold != null ? html` failed or ${pct(a.slow_threshold)} slow` : ""} of at least ${count(a.min_requests)} in ${duration(a.window_secs)}</div>`;
}

// The bulkhead: attempts in flight across the workers, and the limits.
function inFlightCell(d) {
  const b = d.bulkhead;
  if (!b) return html`<span class="faint">no limit</span>`;
  const limit = b.shared_limit != null
    ? html` of ${count(b.shared_limit)}`
    : "";
  const perWorker = b.per_worker_limit != null
    ? `${count(b.per_worker_limit)} per worker`
    : `${pct(b.per_worker_share)} of a queue's slots per worker`;
  const full = b.shared_limit != null && b.in_flight >= b.shared_limit;
  return html`<span class="${full ? "warn-text" : ""}" data-testid="in-flight">${count(b.in_flight)}${limit}</span>
    <div class="small">${perWorker}${b.adaptive ? " (adaptive)" : ""} · ${count(b.turned_back)} turned back</div>`;
}

function probeCell(d) {
  if (d.probe) {
    return html`<span class="badge info">in flight</span> <a href="#/job/${d.probe.job_id}">job ${d.probe.job_id}</a>
      <div class="small">${d.probe.worker}${d.probe.expires_at ? html` · lost ${when(d.probe.expires_at)}` : ""}</div>`;
  }
  if (d.held_open) return html`<span class="faint">none while held</span>`;
  if (d.probe_at) {
    const due = new Date(d.probe_at).getTime() <= Date.now();
    return html`${due ? "due" : when(d.probe_at)}${d.cooldown_secs > 0 ? html`<div class="small">cool-down ${duration(d.cooldown_secs)}</div>` : ""}`;
  }
  return html`<span class="faint">–</span>`;
}

function rateCell(d) {
  const r = d.rate_limit;
  if (!r) return html`<span class="faint">none</span>`;
  return html`${trim(r.per_second)}/s burst ${count(r.burst)}
    <div class="small">${Number(r.tokens).toFixed(1)} tokens${r.booked_secs > 0 ? html` · booked ${duration(r.booked_secs)} ahead` : ""}</div>`;
}

function budgetCell(d) {
  const b = d.retry_budget;
  if (!b) return html`<span class="faint">none</span>`;
  const spent = b.retries >= b.allowed && b.allowed > 0;
  return html`<span class="${spent ? "warn-text" : ""}">${trim(Math.round(b.retries))} of ${trim(Math.round(b.allowed))} retries</span>
    <div class="small">${pct(b.ratio)} of ${trim(Math.round(b.fresh))} first attempts, at least ${count(b.min_retries)}, per ${duration(b.window_secs)}</div>`;
}

function waitingCell(d) {
  const w = d.waiting;
  const total = w.breaker + w.rate_limit + w.retry_budget;
  if (!total) return html`<span class="faint" data-testid="waiting">none</span>`;
  return html`<div data-testid="waiting">${w.breaker ? html`<div><strong class="${d.breaker === "closed" ? "" : "bad-text"}">${count(w.breaker)}</strong> parked by the breaker</div>` : ""}
    ${w.rate_limit ? html`<div>${count(w.rate_limit)} holding a rate-limit turn</div>` : ""}
    ${w.retry_budget ? html`<div>${count(w.retry_budget)} over the retry budget</div>` : ""}</div>`;
}

function buttons(d) {
  const key = d.dependency;
  // Each button does something here: Open unless already held, Close unless closed,
  // Auto while held or open (a probe at once).
  const canOpen = !d.held_open;
  const canClose = d.breaker !== "closed" || d.held_open;
  const canAuto = d.held_open || d.breaker === "open";
  const button = (action, label, enabled, cls, title) => html`<button type="button" class="small ${cls}"
    data-breaker-action="${action}" data-dependency="${key}" data-key="${action}-${key}" data-testid="breaker-${action}"
    title="${title}" ${enabled ? "" : "disabled"}>${label}</button>`;
  return html`<div class="btns">
    ${button("open", "Open", canOpen, "danger", "Hold the breaker open: no job of it runs and no probe goes until Close or Auto")}
    ${button("close", "Close", canClose, "", "Close the breaker now and release the parked jobs, paced by the rate limit")}
    ${button("auto", "Auto", canAuto, "", "Release a hold: a probe goes at once, then the breaker works by itself")}
  </div>`;
}

function table(dependencies) {
  if (!dependencies.length) {
    return html`<p class="empty" data-testid="dependencies-empty">No dependencies yet. A worker protecting dependencies (<code>revenant work</code> does by default) records a key the first time it claims one of its jobs: an <code>http</code> job's host or <code>dependency</code> field, or what a handler names. To hold a breaker open before a key's first job (planned maintenance): <code>revenant breaker open KEY</code> or <code>POST /v1/dependencies/KEY/open</code>.</p>`;
  }
  return html`<div class="table-scroll"><table class="deps" data-testid="dependencies-table">
    <thead><tr>
      <th scope="col">Dependency</th>
      <th scope="col">Breaker</th>
      <th scope="col">Failures</th>
      <th scope="col">In flight</th>
      <th scope="col">Next probe</th>
      <th scope="col">Rate limit</th>
      <th scope="col">Retry budget</th>
      <th scope="col">Waiting</th>
      <th scope="col" class="r"><span class="visually-hidden">Actions</span></th>
    </tr></thead>
    <tbody>${dependencies.map((d) => html`<tr data-testid="dependency-row" data-dependency="${d.dependency}">
      <th scope="row" class="mono dep-key">${d.dependency}</th>
      <td>${breakerCell(d)}</td>
      <td>${answersCell(d)}</td>
      <td>${inFlightCell(d)}</td>
      <td>${probeCell(d)}</td>
      <td>${rateCell(d)}</td>
      <td>${budgetCell(d)}</td>
      <td>${waitingCell(d)}</td>
      <td class="r">${buttons(d)}</td>
    </tr>`)}</tbody>
  </table></div>`;
}

async function act(ctx, key, action) {
  const out = root.querySelector('[data-region="action-result"]');
  const before = known.get(key);
  const parked = before ? before.waiting.breaker : 0;
  const rate = before && before.rate_limit;
  if (action === "open") {
    const ok = await ctx.confirm({
      title: `Hold ${key} open?`,
      body: html`<p>No job of <strong>${key}</strong> runs and no probe goes until you press <strong>Close</strong> or <strong>Auto</strong>. Its jobs wait, parked, their attempts given back; nothing is lost. Every worker sees the hold at its next claim.</p>`,
      ok: "Hold open",
      danger: true,
    });
    if (!ok) return;
  } else if (action === "close") {
    const pace = parked && rate ? html`, paced at ${trim(rate.per_second)}/s (about ${duration(parked / rate.per_second)})` : "";
    const ok = await ctx.confirm({
      title: `Close ${key}?`,
      body: html`<p>The breaker closes now${parked ? html` and <strong>${plural(parked, "parked job")}</strong> go back to work${pace}` : ""}. If <strong>${key}</strong> is still failing, the breaker opens again by itself once enough answers fail.</p>`,
      ok: "Close breaker",
    });
    if (!ok) return;
  }
  try {
    const d = await ctx.api.post(`dependencies/${encodeURIComponent(key)}/${action}`);
    ctx.patch(out, html`<div class="result-box ok" role="status" data-testid="breaker-result">${said(action, d, parked)}</div>`);
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
  }
  ctx.refreshNow();
}

/** What the action did, in the words of `revenant breaker`. */
function said(action, d, parked) {
  const key = d.dependency;
  if (action === "open") {
    return html`Breaker <strong>${key}</strong> held open: no job of it runs and no probe goes until Close or Auto.`;
  }
  if (action === "close") {
    const pace = parked && d.rate_limit ? `, paced at ${trim(d.rate_limit.per_second)}/s` : "";
    return html`Breaker <strong>${key}</strong> closed; ${plural(parked, "parked job")} released${pace}.`;
  }
  const now = d.breaker === "open" ? "it sends a probe at once" : d.breaker === "half_open" ? "a probe is in flight" : "it is closed";
  return html`Breaker <strong>${key}</strong> works by itself again: ${now}.`;
}
