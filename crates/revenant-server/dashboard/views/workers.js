// `#/workers`: the worker registry. A worker is alive when seen in the last 30 s.

import { html, when, plural } from "../format.js";

let root = null;

export default {
  nav: "workers",
  title: () => "Workers",

  mount(main) {
    root = main;
    main.innerHTML = String(html`
      <div class="page-head"><h1>Workers</h1><span class="sub" data-region="summary"></span></div>
      <section class="panel flush" aria-label="Workers"><div data-region="workers"><p class="loading empty">Loading…</p></div></section>
      <p class="small">Each worker process registers itself and heartbeats the registry; one not seen for 30 s counts as gone. A queue with due jobs and no live worker raises the <code>no_workers</code> alert.</p>`);
  },

  async refresh(ctx, current) {
    const { workers } = await ctx.api.get("workers");
    if (!current()) return;
    const alive = workers.filter((w) => w.alive).length;
    ctx.patch(root.querySelector('[data-region="summary"]'), `${plural(alive, "worker")} alive of ${workers.length} registered`);
    ctx.patch(root.querySelector('[data-region="workers"]'), workers.length
      ? html`<div class="table-scroll"><table data-testid="workers-table">
        <thead><tr><th scope="col">State</th><th scope="col">Worker</th><th scope="col">Host</th><th scope="col" class="r">Pid</th><th scope="col">Queues</th><th scope="col">Started</th><th scope="col">Last seen</th></tr></thead>
        <tbody>${workers.map((w) => html`<tr>
          <td>${w.alive ? html`<span class="badge ok">alive</span>` : html`<span class="badge">gone</span>`}</td>
          <td class="mono">${w.worker}</td><td>${w.host}</td><td class="r">${w.pid}</td>
          <td>${w.queues.map((q, i) => html`${i ? ", " : ""}<a href="#/queue/${encodeURIComponent(q)}">${q}</a>`)}</td>
          <td>${when(w.started_at)}</td><td>${when(w.last_seen_at)}</td>
        </tr>`)}</tbody></table></div>`
      : html`<p class="empty">No worker has registered.</p>`);
  },
};
