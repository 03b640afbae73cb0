// `#/schedules`: the periodic jobs. Each schedule's rule, the job it enqueues, its next
// and last tick, and buttons to pause, resume or run it now. Every worker enqueues
// each tick once, whatever their number (docs/periodic-jobs.md).

import { html, when, plural } from "../format.js";

let root = null;

export default {
  nav: "schedules",
  title: () => "Schedules",

  mount(main, params, ctx) {
    root = main;
    main.innerHTML = String(html`
      <div class="page-head"><h1>Schedules</h1><span class="sub" data-region="summary"></span></div>
      <div data-region="action-result"></div>
      <section class="panel flush" aria-label="Schedules"><div data-region="schedules"><p class="loading empty">Loading…</p></div></section>
      <p class="small">Set schedules with <code>revenant cron set</code> or <code>PUT /v1/schedules/{name}</code>, or declare them on a worker. Ticks missed while no worker ran follow the schedule's misfire policy: skipped, or the last one enqueued.</p>`);
    // On the region, not on `main`: `main` outlives this view.
    main.querySelector('[data-region="schedules"]').addEventListener("click", (ev) => {
      const button = ev.target.closest("[data-schedule-action]");
      if (button) act(ctx, button.dataset.name, button.dataset.scheduleAction);
    });
  },

  async refresh(ctx, current) {
    const { schedules } = await ctx.api.get("schedules");
    if (!current()) return;
    const paused = schedules.filter((s) => s.paused).length;
    ctx.patch(root.querySelector('[data-region="summary"]'), `${plural(schedules.length, "schedule")}, ${paused} paused`);
    ctx.patch(root.querySelector('[data-region="schedules"]'), schedules.length
      ? html`<div class="table-scroll"><table data-testid="schedules-table">
        <thead><tr><th scope="col">State</th><th scope="col">Schedule</th><th scope="col">Rule</th><th scope="col">Job</th><th scope="col">Next tick</th><th scope="col">Last tick</th><th scope="col">Misfire</th><th scope="col">Actions</th></tr></thead>
        <tbody>${schedules.map((s) => html`<tr>
          <td>${s.paused ? html`<span class="badge">paused</span>` : html`<span class="badge ok">active</span>`}</td>
          <td class="mono">${s.name}</td><td class="mono small">${s.rule}</td>
          <td><a href="#/queue/${encodeURIComponent(s.spec.job.queue)}">${s.spec.job.queue}</a> / ${s.spec.job.kind}</td>
          <td>${when(s.next_tick)}</td>
          <td>${s.last_tick ? (s.last_job ? html`<a href="#/job/${s.last_job}">${when(s.last_tick)}</a>` : when(s.last_tick)) : "never"}</td>
          <td>${s.misfire} (grace ${s.grace})</td>
          <td>${s.paused
            ? html`<button type="button" class="primary" data-schedule-action="resume" data-name="${s.name}" data-key="resume-${s.name}">Resume</button>`
            : html`<button type="button" data-schedule-action="pause" data-name="${s.name}" data-key="pause-${s.name}">Pause</button>`}
            <button type="button" data-schedule-action="run" data-name="${s.name}" data-key="run-${s.name}">Run now</button></td>
        </tr>`)}</tbody></table></div>`
      : html`<p class="empty">No schedules.</p>`);
  },
};

async function act(ctx, name, action) {
  const out = root.querySelector('[data-region="action-result"]');
  if (action === "pause") {
    const ok = await ctx.confirm({
      title: `Pause ${name}?`,
      body: html`<p>No tick of <strong>${name}</strong> is enqueued until it is resumed; the ticks in between are not enqueued later.</p>`,
      ok: "Pause schedule",
      danger: true,
    });
    if (!ok) return;
  }
  try {
    const answer = await ctx.api.post(`schedules/${encodeURIComponent(name)}/${action}`);
    const done = action === "run" ? `Enqueued job ${answer.job.id} for ${name}.` : `${action === "pause" ? "Paused" : "Resumed"} ${name}.`;
    ctx.patch(out, html`<div class="result-box ok" role="status">${done}</div>`);
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
  }
  ctx.refreshNow();
}
