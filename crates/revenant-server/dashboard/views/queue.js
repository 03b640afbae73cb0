// `#/queue/NAME`: one queue's four numbers, its last hour, its alerts, its dead-letter
// groups and recent jobs, and pause/resume.

import { html, count, when } from "../format.js";
import { chart, bindChart } from "../chart.js";
import { alertList, firingIndex } from "./alerts.js";
import { fourNumbers } from "./numbers.js";
import { jobsTable, clip } from "./jobs-table.js";

let root = null;
let name = "";
let stateFilter = "";
let historyCache = { at: 0, points: [] };

export default {
  nav: "overview",
  title: (p) => `Queue ${p.name}`,

  mount(main, params, ctx) {
    root = main;
    name = params.name;
    stateFilter = "";
    historyCache = { at: 0, points: [] };
    const q = encodeURIComponent(name);
    main.innerHTML = String(html`
      <div class="crumbs"><a href="#/">Overview</a> / queue</div>
      <div class="page-head"><h1 data-testid="queue-name">${name}</h1><span data-region="badges"></span>
        <span class="spacer"></span>
        <span data-region="pause"></span>
      </div>
      <div data-region="action-result"></div>
      <div class="tiles" data-region="tiles"></div>
      <section class="panel" aria-labelledby="chart-h">
        <header><h2 id="chart-h">Last hour</h2><span class="spacer"></span>
          <span class="legend" aria-hidden="true"><span><span class="key depth"></span>depth</span><span><span class="key dead"></span>dead</span></span></header>
        <div data-region="chart"><p class="loading">Loading…</p></div>
        <p class="small" data-region="counts"></p>
      </section>
      <div class="grid-2">
        <section class="panel" aria-labelledby="qalerts-h">
          <header><h2 id="qalerts-h">Alerts</h2></header>
          <div data-region="alerts"></div>
        </section>
        <section class="panel flush" aria-labelledby="qdead-h">
          <header><h2 id="qdead-h">Dead letters by error</h2><span class="spacer"></span><a class="small" href="#/dead?queue=${q}">Triage</a></header>
          <div data-region="dead"></div>
        </section>
      </div>
      <section class="panel flush" aria-labelledby="qjobs-h">
        <header><h2 id="qjobs-h">Recent jobs</h2><span class="spacer"></span>
          <label for="qstate" class="visually-hidden">State</label>
          <select id="qstate" data-testid="queue-state-filter">
            <option value="">every state</option>
            ${["ready", "running", "completed", "dead", "cancelled"].map((s) => html`<option value="${s}">${s}</option>`)}
          </select>
        </header>
        <div data-region="jobs"></div>
      </section>`);
    main.querySelector("#qstate").addEventListener("change", (ev) => {
      stateFilter = ev.target.value;
      ctx.refreshNow();
    });
    // On the pause region, not on `main`: `main` outlives this view, the region does
    // not. (On `main`, every visit to a queue added a listener, and one click on Pause
    // asked and posted once per visit.)
    main.querySelector('[data-region="pause"]').addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-pause]");
      if (button) togglePause(ctx, button.dataset.pause === "pause");
    });
  },

  async refresh(ctx, current) {
    const { api } = ctx;
    const q = encodeURIComponent(name);
    const historyDue = Date.now() - historyCache.at > 30000;
    const [queues, alerts, fps, jobs, hist] = await Promise.all([
      api.get("queues"),
      api.get("alerts"),
      api.get(`dead/fingerprints${api.query({ queue: name, limit: 5 })}`),
      api.get(`jobs${api.query({ queue: name, state: stateFilter, limit: 20 })}`),
      historyDue ? api.get(`queues/${q}/history${api.query({ minutes: 60 })}`) : null,
    ]);
    if (!current()) return;
    if (hist) historyCache = { at: Date.now(), points: hist.points || [] };
    const region = (r) => root.querySelector(`[data-region="${r}"]`);
    const queue = queues.queues.find((x) => x.name === name);
    if (!queue) {
      ctx.patch(region("tiles"), html`<div class="panel span-all"><p>No queue named <strong>${name}</strong> has jobs. A queue exists once a job is enqueued to it.</p></div>`);
      ctx.patch(region("chart"), "");
      return;
    }
    const firing = firingIndex(alerts);
    ctx.patch(region("badges"), queue.paused ? html`<span class="badge warn" data-testid="paused-badge">paused</span>` : "");
    ctx.patch(region("pause"), queue.paused
      ? html`<button type="button" class="primary" data-pause="resume" data-key="pause" data-testid="resume">Resume claims</button>`
      : html`<button type="button" data-pause="pause" data-key="pause" data-testid="pause">Pause claims</button>`);
    ctx.patch(region("tiles"), html`${fourNumbers(queue, firing).map((n) => html`
      <div class="tile ${n.level === "zero" ? "" : n.level}" data-testid="tile-${n.key}">
        <div class="label">${n.label}</div><div class="value">${n.key === "dead" && queue.dead > 0 ? html`<a href="#/dead?queue=${q}" class="bad-text">${n.value}</a>` : n.value}</div>
        <div class="note">${n.note}</div>
      </div>`)}`);
    const chartEl = region("chart");
    const before = chartEl.__html;
    // Drawn against the time of the fetch, not of this refresh, so the chart is
    // redrawn (and its hover re-wired) only when new points arrive.
    ctx.patch(chartEl, chart(historyCache.points, { now: historyCache.at }));
    if (chartEl.__html !== before) bindChart(chartEl.querySelector("svg"), historyCache.points, ctx.tooltip);
    ctx.patch(region("counts"), html`${count(queue.running)} running · ${count(queue.scheduled)} scheduled · ${count(queue.retrying)} retrying (waiting out a backoff) · ${count(queue.completed)} completed and kept · ${count(queue.cancelled)} cancelled · last minute: ${count(queue.completed_last_minute)} completed, ${count(queue.failed_last_minute)} failed attempts`);
    ctx.patch(region("alerts"), alertList(alerts, { queue: name }));
    ctx.patch(region("dead"), fps.fingerprints.length
      ? html`<table><thead><tr><th scope="col" class="r">Count</th><th scope="col">Error</th><th scope="col">Last died</th></tr></thead><tbody>
        ${fps.fingerprints.map((f) => html`<tr><td class="r"><span class="bad-text">${count(f.count)}</span></td>
          <td class="wrap"><a class="mono small" href="#/dead/${encodeURIComponent(f.fingerprint)}?queue=${q}">${clip(f.pattern || f.sample_error, 120)}</a></td>
          <td>${when(f.last_dead_at)}</td></tr>`)}
        </tbody></table>`
      : html`<p class="calm empty">No dead jobs in this queue.</p>`);
    ctx.patch(region("jobs"), jobsTable(jobs.jobs, { hideQueue: true, empty: stateFilter ? `No ${stateFilter} jobs.` : "No jobs (finished jobs are pruned after the retention)." }));
  },
};

async function togglePause(ctx, pause) {
  const out = root.querySelector('[data-region="action-result"]');
  if (pause) {
    const ok = await ctx.confirm({
      title: `Pause ${name}?`,
      body: html`<p>Workers stop claiming jobs from <strong>${name}</strong>. Jobs already running finish; new jobs are still accepted and wait. Nothing is lost: resume to drain them.</p>`,
      ok: "Pause claims",
      danger: true,
    });
    if (!ok) return;
  }
  try {
    await ctx.api.post(`queues/${encodeURIComponent(name)}/${pause ? "pause" : "resume"}`);
    ctx.patch(out, html`<div class="result-box ok" role="status">${pause ? `Paused ${name}: no new claims.` : `Resumed ${name}.`}</div>`);
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
  }
  ctx.refreshNow();
}
