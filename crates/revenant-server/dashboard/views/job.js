// `#/job/ID`: one job, every field, its payload, and its whole attempt history as a
// timeline, with redrive (when dead) and cancel (when ready or running).

import { html, count, when, exact, between, millis, relative } from "../format.js";
import { stateBadge } from "./jobs-table.js";

let root = null;
let id = "";

export default {
  nav: "jobs",
  title: (p) => `Job ${p.id}`,

  mount(main, params, ctx) {
    root = main;
    id = params.id;
    main.innerHTML = String(html`
      <div class="crumbs"><a href="#/jobs">Jobs</a> / job</div>
      <div class="page-head"><h1>Job <span data-testid="job-id">${id}</span></h1><span data-region="head"></span>
        <span class="spacer"></span><span data-region="actions"></span></div>
      <div data-region="action-result" aria-live="polite"></div>
      <div data-region="body"><p class="loading">Loading…</p></div>`);
    // On the actions region, not on `main`: `main` outlives this view, the region
    // does not.
    main.querySelector('[data-region="actions"]').addEventListener("click", (ev) => {
      const el = ev.target.closest("[data-action]");
      if (el && el.dataset.action === "redrive-job") redriveJob(ctx);
      if (el && el.dataset.action === "cancel-job") cancelJob(ctx);
    });
  },

  async refresh(ctx, current) {
    let job;
    try {
      job = await ctx.api.get(`jobs/${id}`);
    } catch (err) {
      if (err.status === 404) {
        if (!current()) return;
        ctx.patch(root.querySelector('[data-region="body"]'), html`<div class="panel"><p>No job ${id}. It may never have existed, or it finished and was pruned after the retention, or it was purged from the dead letters.</p></div>`);
        ctx.patch(root.querySelector('[data-region="head"]'), "");
        ctx.patch(root.querySelector('[data-region="actions"]'), "");
        return;
      }
      throw err;
    }
    if (!current()) return;
    const region = (r) => root.querySelector(`[data-region="${r}"]`);
    ctx.patch(region("head"), html`${stateBadge(job)} <span class="muted"><span class="mono">${job.kind}</span> in <a href="#/queue/${encodeURIComponent(job.queue)}">${job.queue}</a></span>`);
    ctx.patch(region("actions"), actions(job));
    ctx.patch(region("body"), body(job));
  },
};

function actions(job) {
  if (job.state === "dead") {
    return html`<button type="button" class="primary" data-action="redrive-job" data-key="redrive-job" data-testid="job-redrive">Redrive this job</button>`;
  }
  if (job.state === "ready" || job.state === "running") {
    return html`<button type="button" class="danger" data-action="cancel-job" data-key="cancel-job" data-testid="job-cancel">Cancel job</button>`;
  }
  return "";
}

function callout(job) {
  if (job.state === "dead") {
    const e = job.last_error;
    return html`<section class="panel bad-panel" aria-label="Why it died">
      <p><strong class="bad-text">Dead: ${(job.dead_reason || "unknown").replaceAll("_", " ")}</strong>
        after ${count(job.attempt)} of ${count(job.max_attempts)} attempts, ${when(job.finished_at)}.
        ${job.fingerprint ? html`Others died of the same error: <a href="#/dead/${encodeURIComponent(job.fingerprint)}">fingerprint <span class="mono">${job.fingerprint}</span></a>.` : ""}</p>
      ${e ? html`<div class="timeline"><div class="msg">${e.message}</div></div>` : ""}
    </section>`;
  }
  if (job.state === "ready" && job.attempt > 0 && new Date(job.run_at) > Date.now()) {
    return html`<section class="panel" aria-label="Retrying"><p>Retrying: attempt ${count(job.attempt + 1)} of ${count(job.max_attempts)} is due ${when(job.run_at)}.</p></section>`;
  }
  return "";
}

function field(label, value) {
  return html`<dt>${label}</dt><dd>${value === null || value === undefined || value === "" ? html`<span class="faint">–</span>` : value}</dd>`;
}

function at(ts) {
  return ts ? html`${when(ts)} <span class="small">${exact(ts).split(" · ")[1]}</span>` : null;
}

function body(job) {
  return html`${callout(job)}
  <div class="grid-2">
    <section class="panel" aria-labelledby="fields-h">
      <header><h2 id="fields-h">Fields</h2></header>
      <dl class="fields" data-testid="job-fields">
        ${field("State", html`${job.state}${job.dead_reason ? ` (${job.dead_reason.replaceAll("_", " ")})` : ""}`)}
        ${field("Queue", html`<a href="#/queue/${encodeURIComponent(job.queue)}">${job.queue}</a>`)}
        ${field("Kind", html`<span class="mono">${job.kind}</span>`)}
        ${field("Attempts", `${count(job.attempt)} of ${count(job.max_attempts)}`)}
        ${field("Redrives", count(job.redrives))}
        ${field("Priority", count(job.priority))}
        ${field("Created", at(job.created_at))}
        ${field("Run at", at(job.run_at))}
        ${field("Last attempt", at(job.attempted_at))}
        ${field("Finished", at(job.finished_at))}
        ${field("Lease expires", job.state === "running" ? at(job.lease_expires_at) : null)}
        ${field("Worker", job.worker ? html`<span class="mono">${job.worker}</span>` : null)}
        ${field("Fingerprint", job.fingerprint ? html`<a class="mono" href="#/dead/${encodeURIComponent(job.fingerprint)}">${job.fingerprint}</a>` : null)}
        ${field("Correlation id", job.correlation_id ? html`<span class="mono">${job.correlation_id}</span>` : null)}
        ${field("Group", job.group_key ? html`<span class="mono">${job.group_key}</span>` : null)}
        ${field("Unique key", job.unique_key ? html`<span class="mono">${job.unique_key}</span>` : null)}
      </dl>
    </section>
    <section class="panel" aria-labelledby="payload-h">
      <header><h2 id="payload-h">Payload</h2></header>
      <pre class="json" tabindex="0" data-testid="job-payload">${JSON.stringify(job.payload, null, 2)}</pre>
    </section>
  </div>
  <section class="panel" aria-labelledby="history-h">
    <header><h2 id="history-h">Attempt history</h2><span class="spacer"></span>
      <span class="small">${job.errors.length ? `${job.errors.length} failed ${job.errors.length === 1 ? "attempt" : "attempts"} recorded (the newest 25 are kept), oldest first` : "no failed attempt"}</span></header>
    ${timeline(job)}
  </section>`;
}

/**
 * The story of the job, oldest first: enqueued, each failed attempt, redrives (seen as
 * the attempt count starting again), and where it is now. Only the latest attempt's
 * start is recorded (`attempted_at`), so only its duration is known.
 */
function timeline(job) {
  const items = [];
  items.push(html`<li class="info"><div class="head"><strong>Enqueued</strong> ${when(job.created_at)}</div>
    ${job.attempt === 0 && job.redrives === 0 && !job.errors.length && between(job.created_at, job.run_at) > 1 ? html`<div class="meta">scheduled to run ${relative(job.run_at, new Date(job.created_at).getTime()).replace("in ", "")} later</div>` : ""}</li>`);
  let previous = 0;
  // A long history folds its middle (still on the page, one click away): at 3am the
  // first failure and the last few are what a reader needs.
  const fold = job.errors.length > 8 ? [2, job.errors.length - 4] : null;
  let folded = [];
  job.errors.forEach((e, index) => {
    const into = fold && index >= fold[0] && index < fold[1] ? folded : items;
    if (e.attempt <= previous) {
      into.push(html`<li class="info"><div class="head"><strong>Redriven</strong> <span class="muted">attempts started again with a fresh budget</span></div></li>`);
    }
    previous = e.attempt;
    const latest = e === job.errors[job.errors.length - 1] && e.attempt === job.attempt;
    const took = latest ? between(job.attempted_at, e.at) : null;
    const fatal = job.state === "dead" && latest;
    into.push(html`<li class="${fatal ? "fatal" : "fail"}" data-testid="attempt">
      <div class="head"><strong>Attempt ${count(e.attempt)}</strong>
        <span class="badge ${e.class === "permanent" || fatal ? "bad" : "warn"}">${e.class.replaceAll("_", " ")}</span>
        ${when(e.at)}
        <span class="muted small">${took !== null && took >= 0 ? `ran ${millis(took * 1000)}` : ""}</span></div>
      <div class="msg">${e.message}</div>
      <div class="meta">${e.worker ? html`worker <span class="mono">${e.worker}</span>` : "worker unknown"}</div>
    </li>`);
    if (fold && index === fold[1] - 1) {
      items.push(html`<li class="more"><details><summary>Show attempts ${job.errors[fold[0]].attempt} to ${e.attempt} (${fold[1] - fold[0]} more)</summary><ol class="timeline">${folded}</ol></details></li>`);
      folded = [];
    }
  });
  // The last redrive, when it came after the last recorded failure: the attempt count
  // restarted below it.
  const lastFailed = job.errors.length ? job.errors[job.errors.length - 1].attempt : 0;
  if (job.redrives > 0 && job.state !== "dead" && job.attempt <= lastFailed) {
    items.push(html`<li class="info"><div class="head"><strong>Redriven</strong> <span class="muted">back to ready with fresh attempts${job.redrives > 1 ? ` (redrive ${count(job.redrives)})` : ""}</span></div></li>`);
  }
  items.push(now(job));
  return html`<ol class="timeline" data-testid="timeline">${items}</ol>`;
}

function now(job) {
  const ran = between(job.attempted_at, job.finished_at);
  switch (job.state) {
    case "completed":
      return html`<li class="done"><div class="head"><strong>Completed</strong> <span>on attempt ${count(job.attempt)}, ${when(job.finished_at)}</span>
        <span class="muted small">${ran !== null && ran >= 0 ? `ran ${millis(ran * 1000)}` : ""}</span></div>
        ${job.worker ? html`<div class="meta">worker <span class="mono">${job.worker}</span></div>` : ""}</li>`;
    case "running":
      return html`<li class="info"><div class="head"><strong>Running</strong> <span>attempt ${count(job.attempt)} since ${when(job.attempted_at)}</span></div>
        <div class="meta">${job.worker ? html`worker <span class="mono">${job.worker}</span> · ` : ""}lease expires ${when(job.lease_expires_at)}</div></li>`;
    case "dead":
      return html`<li class="fatal"><div class="head"><strong class="bad-text">Dead</strong> <span>${(job.dead_reason || "").replaceAll("_", " ")}, ${when(job.finished_at)}</span></div>
        <div class="meta">kept until redriven or purged</div></li>`;
    case "cancelled":
      return html`<li><div class="head"><strong>Cancelled</strong> ${when(job.finished_at)}</div></li>`;
    default: {
      const due = new Date(job.run_at) > Date.now();
      return html`<li class="info"><div class="head"><strong>Ready</strong> <span>${due ? html`due ${when(job.run_at)}` : html`due since ${when(job.run_at)}, waiting for a worker`}</span></div></li>`;
    }
  }
}

async function redriveJob(ctx) {
  const out = root.querySelector('[data-region="action-result"]');
  const ok = await ctx.confirm({
    title: `Redrive job ${id}?`,
    body: html`<p>The job goes back to <strong>ready</strong> now, with fresh attempts and its history kept. Redriving before the cause is fixed only kills it again.</p>`,
    ok: "Redrive",
  });
  if (!ok) return;
  try {
    const r = await ctx.api.post("dead/redrive", { ids: [Number(id)] });
    ctx.patch(out, html`<div class="result-box ok" role="status" data-testid="job-action-result">${r.count ? "Redriven: back to ready." : "Nothing redriven: the job is no longer dead."}</div>`);
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
  }
  ctx.refreshNow();
}

async function cancelJob(ctx) {
  const out = root.querySelector('[data-region="action-result"]');
  const ok = await ctx.confirm({
    title: `Cancel job ${id}?`,
    body: html`<p>A cancelled job never runs again and cannot be redriven. A running attempt's handler finds its lease gone at its next heartbeat and is stopped; its result is discarded.</p>`,
    ok: "Cancel job",
    danger: true,
  });
  if (!ok) return;
  try {
    await ctx.api.post(`jobs/${id}/cancel`, {});
    ctx.patch(out, html`<div class="result-box ok" role="status" data-testid="job-action-result">Cancelled.</div>`);
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
  }
  ctx.refreshNow();
}
