// `#/`: every queue with its four numbers and the last hour, firing alerts, workers.

import { html, count, when, plural } from "../format.js";
import { sparkline } from "../chart.js";
import { alertList, firingIndex } from "./alerts.js";
import { fourNumbers } from "./numbers.js";

// History is one point a minute: fetching it on every 5 s refresh would be waste.
const HISTORY_TTL_MS = 30000;
const histories = new Map(); // queue -> { at, points }

async function history(api, name) {
  const hit = histories.get(name);
  if (hit && Date.now() - hit.at < HISTORY_TTL_MS) return hit;
  const data = await api.get(`queues/${encodeURIComponent(name)}/history${api.query({ minutes: 60 })}`);
  const fresh = { at: Date.now(), points: data.points || [] };
  histories.set(name, fresh);
  return fresh;
}

let root = null;

export default {
  nav: "overview",
  title: () => "Overview",

  mount(main) {
    root = main;
    main.innerHTML = String(html`
      <div class="page-head"><h1>Overview</h1><span class="sub" data-region="summary"></span></div>
      <section class="panel" aria-labelledby="alerts-h" data-testid="alerts-panel">
        <header><h2 id="alerts-h">Alerts</h2><span class="spacer"></span><span class="small" data-region="alert-rules"></span></header>
        <div data-region="alerts"><p class="loading">Loading…</p></div>
      </section>
      <section class="panel flush" aria-labelledby="queues-h">
        <header><h2 id="queues-h">Queues</h2><span class="spacer"></span>
          <span class="legend" aria-hidden="true"><span><span class="key depth"></span>depth</span><span><span class="key dead"></span>dead</span></span>
        </header>
        <div data-region="queues"><p class="loading empty">Loading…</p></div>
      </section>
      <section class="panel flush" aria-labelledby="workers-h">
        <header><h2 id="workers-h">Workers</h2><span class="spacer"></span><a href="#/workers" class="small">All workers</a></header>
        <div data-region="workers"><p class="loading empty">Loading…</p></div>
      </section>`);
  },

  async refresh(ctx, current) {
    const { api } = ctx;
    const [queues, alerts, workers] = await Promise.all([
      api.get("queues"),
      api.get("alerts"),
      api.get("workers"),
    ]);
    const points = new Map();
    await Promise.all(queues.queues.map(async (q) => {
      try { points.set(q.name, await history(api, q.name)); } catch { points.set(q.name, null); }
    }));
    if (!current()) return;
    const region = (name) => root.querySelector(`[data-region="${name}"]`);
    const firing = firingIndex(alerts);
    const dead = queues.queues.reduce((n, q) => n + q.dead, 0);
    const alive = workers.workers.filter((w) => w.alive).length;
    ctx.patch(region("summary"), html`${plural(queues.queues.length, "queue")} · <span class="${dead ? "bad-text" : ""}">${plural(dead, "dead job")}</span> · ${plural(alive, "worker")} alive`);
    ctx.patch(region("alerts"), alertList(alerts));
    ctx.patch(region("alert-rules"), alerts.configured ? `${plural(alerts.rules.length, "rule")} configured` : "");
    ctx.patch(region("queues"), queuesTable(queues.queues, firing, points));
    ctx.patch(region("workers"), workersTable(workers.workers.filter((w) => w.alive), workers.workers.length));
  },
};

function cell(n, testid) {
  return html`<td class="r" data-testid="${testid}"><div class="big ${n.level}">${n.value}</div><div class="small">${n.note}</div></td>`;
}

function queuesTable(queues, firing, points) {
  if (!queues.length) {
    return html`<p class="empty">No queues yet. A queue appears when its first job is enqueued (<code>revenant enqueue</code> or <code>POST /v1/jobs</code>).</p>`;
  }
  return html`<div class="table-scroll"><table class="queues" data-testid="queues-table">
    <thead><tr>
      <th scope="col">Queue</th>
      <th scope="col" class="r">Depth</th>
      <th scope="col" class="r">Oldest due</th>
      <th scope="col" class="r">Dead</th>
      <th scope="col" class="r">Workers alive</th>
      <th scope="col" class="spark-cell">Last hour</th>
    </tr></thead>
    <tbody>${queues.map((q) => {
      const [depth, oldest, dead, workers] = fourNumbers(q, firing);
      const pts = points.get(q.name);
      return html`<tr data-queue="${q.name}">
        <th scope="row"><a class="qname" href="#/queue/${encodeURIComponent(q.name)}" data-key="q-${q.name}">${q.name}</a>
          ${q.paused ? html` <span class="badge warn">paused</span>` : ""}
          <div class="small">${count(q.running)} running · ${count(q.completed_last_minute)} done/min${q.failed_last_minute ? html` · ${count(q.failed_last_minute)} failed/min` : ""}</div></th>
        ${cell(depth, "depth")}${cell(oldest, "oldest")}
        <td class="r" data-testid="dead">${q.dead > 0
          ? html`<a href="#/dead?queue=${encodeURIComponent(q.name)}" class="big bad" data-key="dead-${q.name}" title="Triage the dead jobs of ${q.name}">${dead.value}</a>`
          : html`<div class="big ${dead.level}">${dead.value}</div>`}<div class="small">${dead.note}</div></td>
        ${cell(workers, "workers")}
        <td class="spark-cell">${pts ? sparkline(pts.points, { now: pts.at }) : html`<span class="small">history unavailable</span>`}</td>
      </tr>`;
    })}</tbody>
  </table></div>`;
}

function workersTable(alive, total) {
  if (!alive.length) {
    return html`<p class="empty">${total ? `No worker seen in the last 30 s (${total} registered earlier).` : "No worker has registered."} Jobs wait until one runs: <code>revenant work</code>, or a remote worker claiming through <code>POST /v1/claims</code>.</p>`;
  }
  return html`<div class="table-scroll"><table>
    <thead><tr><th scope="col">Worker</th><th scope="col">Host</th><th scope="col" class="r">Pid</th><th scope="col">Queues</th><th scope="col">Started</th><th scope="col">Last seen</th></tr></thead>
    <tbody>${alive.map((w) => html`<tr>
      <td class="mono">${w.worker}</td><td>${w.host}</td><td class="r">${w.pid}</td>
      <td>${w.queues.join(", ")}</td><td>${when(w.started_at)}</td><td>${when(w.last_seen_at)}</td>
    </tr>`)}</tbody>
  </table></div>`;
}
