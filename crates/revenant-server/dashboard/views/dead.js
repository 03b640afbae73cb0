// `#/dead`: dead-letter triage. Dead jobs grouped by the fingerprint of the error they
// died of (one row per bug), the jobs of a chosen group, redrive at a rate with a dry
// run first, purge with a confirmation, and the redrive audit.
//
// The order on the page is the runbook's (docs/dead-letters.md): read the error, look
// at the jobs, then redrive at a pace the dependency can take, or purge.

import { html, count, when, duration, plural } from "../format.js";
import { jobsTable, clip } from "./jobs-table.js";

// The API's own pattern for a rate (see the OpenAPI document): checked here too so a
// typo is caught next to the field instead of after a round trip.
const RATE = /^\s*[0-9]+(\.[0-9]+)?\s*(\/\s*(s|sec|m|min|h)\s*)?$/;
const REASONS = ["permanent", "attempts_exhausted", "lease_expired", "decode_error", "unknown_kind"];

let root = null;
let filter = { queue: "", reason: "" };
let selected = "";       // the fingerprint whose jobs are listed
let groups = [];         // the last fingerprint list, for the dialogs

export default {
  nav: "dead",
  title: () => "Dead letters",

  mount(main, params, ctx) {
    root = main;
    filter = { queue: params.queue || "", reason: params.reason || "" };
    selected = params.fingerprint || "";
    main.innerHTML = String(html`
      <div class="page-head"><h1>Dead letters</h1><span class="sub" data-region="summary"></span></div>
      <section class="panel" aria-label="Filters">
        <form class="filters" id="dead-filters">
          <div class="field"><label for="dead-queue">Queue</label>
            <select id="dead-queue" data-testid="dead-queue"><option value="">every queue</option></select></div>
          <div class="field"><label for="dead-reason">Reason</label>
            <select id="dead-reason"><option value="">every reason</option>
              ${REASONS.map((r) => html`<option value="${r}">${r.replaceAll("_", " ")}</option>`)}</select></div>
          <p class="small filters-help">One row per bug: the fingerprint hashes the last error with numbers, ids, e-mail addresses and quoted values taken out. Read the error, fix the cause, then redrive at a rate the dependency can take.</p>
        </form>
      </section>
      <div data-region="action-result" aria-live="polite"></div>
      <section class="panel flush" aria-labelledby="fp-h">
        <header><h2 id="fp-h">By error</h2></header>
        <div data-region="groups"><p class="loading empty">Loading…</p></div>
      </section>
      <section class="panel flush" aria-labelledby="fpjobs-h" data-region-wrap="jobs" hidden>
        <header><h2 id="fpjobs-h" data-region="jobs-title">Jobs</h2><span class="spacer"></span>
          <button type="button" class="ghost small" data-action="unselect">Close</button></header>
        <div data-region="jobs"></div>
      </section>
      <section class="panel flush" aria-labelledby="audit-h">
        <header><h2 id="audit-h">Redrive history</h2></header>
        <div data-region="audit"></div>
      </section>

      <dialog id="redrive-dialog" aria-labelledby="redrive-title" data-testid="redrive-dialog">
        <form id="redrive-form" novalidate>
          <h2 id="redrive-title">Redrive</h2>
          <p class="mono small" id="redrive-what"></p>
          <p class="muted small">Each job goes back to <strong>ready</strong> with fresh attempts and its history kept. With a rate, the i-th job becomes due at start + i / rate, so workers cannot take them faster however many there are.</p>
          <div class="row">
            <div class="field grow-1"><label for="redrive-rate">Rate</label>
              <input id="redrive-rate" name="rate" value="20/s" placeholder="20/s, 600/m, 3600/h" aria-describedby="redrive-rate-help" data-testid="redrive-rate"></div>
            <div class="field grow-2"><label for="redrive-note">Note for the audit (optional)</label>
              <input id="redrive-note" name="note" placeholder="provider back, INC-812" maxlength="1024"></div>
          </div>
          <p class="small" id="redrive-rate-help">Per second, minute or hour: <code>20/s</code>, <code>600/m</code>, <code>3600/h</code>. Empty: no pacing, as fast as the workers take them.</p>
          <div data-region="redrive-preview" aria-live="polite"></div>
          <div class="actions">
            <button type="button" class="ghost" data-action="close-redrive">Cancel</button>
            <button type="button" data-action="preview-redrive" data-testid="redrive-preview">Preview (dry run)</button>
            <button type="submit" class="primary" id="redrive-go" disabled data-testid="redrive-confirm">Redrive</button>
          </div>
        </form>
      </dialog>`);

    const queueSelect = main.querySelector("#dead-queue");
    const reasonSelect = main.querySelector("#dead-reason");
    reasonSelect.value = filter.reason;
    const onFilter = () => {
      filter = { queue: queueSelect.value, reason: reasonSelect.value };
      remember();
      ctx.refreshNow();
    };
    queueSelect.addEventListener("change", onFilter);
    reasonSelect.addEventListener("change", onFilter);

    const onAction = (ev) => {
      const el = ev.target.closest("[data-action]");
      if (!el) return;
      const fp = el.dataset.fp;
      switch (el.dataset.action) {
        case "jobs":
          selected = selected === fp ? "" : fp;
          remember();
          ctx.refreshNow();
          break;
        case "unselect":
          selected = "";
          remember();
          ctx.refreshNow();
          break;
        case "redrive":
          openRedrive(fp);
          break;
        case "purge":
          purge(ctx, fp);
          break;
        case "close-redrive":
          main.querySelector("#redrive-dialog").close();
          break;
        case "preview-redrive":
          previewRedrive(ctx);
          break;
        default:
      }
    };
    // On the parts of this view that hold the buttons, not on `main`: `main` outlives
    // this view, they do not. (On `main`, every visit added a listener, and one click
    // on Purge previewed and asked once per visit.)
    for (const part of [
      main.querySelector('[data-region="groups"]'),
      main.querySelector('[data-region-wrap="jobs"]'),
      main.querySelector("#redrive-dialog"),
    ]) {
      part.addEventListener("click", onAction);
    }
    const form = main.querySelector("#redrive-form");
    // Enter in a field previews first; once a preview is shown, Enter redrives. (A
    // form whose submit button is disabled ignores Enter, so fields handle it.)
    const enter = () => {
      if (form.querySelector("#redrive-go").disabled) previewRedrive(ctx);
      else redrive(ctx);
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      enter();
    });
    for (const input of form.querySelectorAll("input")) {
      input.addEventListener("keydown", (ev) => {
        if (ev.key !== "Enter") return;
        ev.preventDefault();
        enter();
      });
    }
    // A changed rate or note invalidates the preview: the count is the same but the
    // pace is not what was previewed.
    for (const input of form.querySelectorAll("input")) {
      input.addEventListener("input", () => {
        form.querySelector("#redrive-go").disabled = true;
        ctx.patch(main.querySelector('[data-region="redrive-preview"]'), "");
        main.querySelector("#redrive-rate").removeAttribute("aria-invalid");
      });
    }
  },

  async refresh(ctx, current) {
    const { api } = ctx;
    const sel = selection();
    const [queues, fps, jobs, audit] = await Promise.all([
      api.get("queues"),
      api.get(`dead/fingerprints${api.query({ queue: sel.queue, reason: sel.reason, limit: 200 })}`),
      selected ? api.get(`dead${api.query({ fingerprint: selected, queue: sel.queue, reason: sel.reason, limit: 100 })}`) : null,
      api.get(`dead/history${api.query({ limit: 10 })}`),
    ]);
    if (!current()) return;
    groups = fps.fingerprints;
    const region = (r) => root.querySelector(`[data-region="${r}"]`);
    fillQueues(queues.queues);
    const total = groups.reduce((n, g) => n + g.count, 0);
    ctx.patch(region("summary"), total
      ? html`<span class="bad-text">${plural(total, "dead job")}</span> in ${plural(groups.length, "group")}${filter.queue ? html` · queue <strong>${filter.queue}</strong>` : ""}`
      : "");
    ctx.patch(region("groups"), groupsTable(groups));
    const wrap = root.querySelector('[data-region-wrap="jobs"]');
    wrap.hidden = !selected;
    if (selected && jobs) {
      ctx.patch(region("jobs-title"), html`Jobs that died of <span class="mono">${selected}</span>`);
      ctx.patch(region("jobs"), jobsTable(jobs.jobs, { empty: "No dead job carries this fingerprint any more (redriven or purged).", testid: "dead-jobs" }));
    }
    ctx.patch(region("audit"), auditTable(audit.redrives));
  },
};

/** The current filter as the API's selection fields. */
function selection() {
  return { queue: filter.queue || undefined, reason: filter.reason || undefined };
}

/** Keeps the filter and selection in the address bar, so a link can be shared. */
function remember() {
  const q = new URLSearchParams();
  if (filter.queue) q.set("queue", filter.queue);
  if (filter.reason) q.set("reason", filter.reason);
  const path = selected ? `#/dead/${encodeURIComponent(selected)}` : "#/dead";
  const s = q.toString();
  history.replaceState(null, "", s ? `${path}?${s}` : path);
}

function fillQueues(queues) {
  const select = root.querySelector("#dead-queue");
  const names = queues.map((q) => q.name);
  if (filter.queue && !names.includes(filter.queue)) names.push(filter.queue);
  const want = ["", ...names].join("\n");
  if (select.__names === want) return;
  select.__names = want;
  select.innerHTML = String(html`<option value="">every queue</option>${names.map((n) => html`<option value="${n}">${n}</option>`)}`);
  select.value = filter.queue;
}

function groupsTable(list) {
  if (!list.length) {
    return html`<p class="calm empty" data-testid="no-dead">No dead jobs${filter.queue ? ` in ${filter.queue}` : ""}${filter.reason ? ` with reason ${filter.reason.replaceAll("_", " ")}` : ""}.</p>`;
  }
  return html`<div class="table-scroll"><table data-testid="fingerprints-table">
    <thead><tr>
      <th scope="col" class="r">Count</th>
      <th scope="col">Error</th>
      <th scope="col">Where</th>
      <th scope="col">First died</th>
      <th scope="col">Last died</th>
      <th scope="col" class="r"><span class="visually-hidden">Actions</span></th>
    </tr></thead>
    <tbody>${list.map((g) => {
      const fp = g.fingerprint;
      const usable = /^[0-9a-fA-F]{12}$/.test(fp);
      return html`<tr class="fp-row${fp === selected ? " selected" : ""}" data-fingerprint="${fp}" data-testid="fingerprint-row">
        <td class="r"><div class="big bad">${count(g.count)}</div></td>
        <td class="wrap">
          <div class="pattern">${clip(g.pattern || g.sample_error, 300)}</div>
          ${g.sample_error && g.sample_error !== g.pattern ? html`<div class="sample">e.g. <a href="#/job/${g.example_id}">job ${g.example_id}</a>: ${clip(g.sample_error, 300)}</div>` : html`<div class="sample">e.g. <a href="#/job/${g.example_id}">job ${g.example_id}</a></div>`}
          <div class="fp" title="fingerprint">${fp || "(no fingerprint)"}</div>
        </td>
        <td>${g.queues.map((q, i) => html`${i ? ", " : ""}<a href="#/queue/${encodeURIComponent(q)}">${q}</a>`)}<div class="small mono">${g.kinds.join(", ")}</div></td>
        <td>${when(g.first_dead_at)}</td>
        <td>${when(g.last_dead_at)}</td>
        <td class="r"><div class="btns">
          ${usable ? html`
          <button type="button" class="small" data-action="jobs" data-fp="${fp}" data-key="jobs-${fp}" aria-pressed="${fp === selected ? "true" : "false"}" data-testid="show-jobs">${fp === selected ? "Hide jobs" : "Jobs"}</button>
          <button type="button" class="small primary" data-action="redrive" data-fp="${fp}" data-key="redrive-${fp}" data-testid="redrive">Redrive…</button>
          <button type="button" class="small danger" data-action="purge" data-fp="${fp}" data-key="purge-${fp}" data-testid="purge">Purge…</button>`
          : html`<span class="small">dead before fingerprints existed: redrive from the job page</span>`}
        </div></td>
      </tr>`;
    })}</tbody>
  </table></div>`;
}

function auditTable(records) {
  if (!records.length) return html`<p class="empty">No redrive yet.</p>`;
  return html`<div class="table-scroll"><table>
    <thead><tr><th scope="col">When</th><th scope="col" class="r">Jobs</th><th scope="col">Rate</th><th scope="col">Ids</th><th scope="col">Who</th><th scope="col">Filter</th><th scope="col">Note</th></tr></thead>
    <tbody>${records.map((r) => html`<tr>
      <td>${when(r.at)}</td>
      <td class="r">${count(r.count)}</td>
      <td>${r.spacing_ms > 0 ? rateText(1000 / r.spacing_ms) : html`<span class="faint">unpaced</span>`}</td>
      <td class="mono small">${r.count ? (r.first_job_id === r.last_job_id ? html`<a href="#/job/${r.first_job_id}">${r.first_job_id}</a>` : html`<a href="#/job/${r.first_job_id}">${r.first_job_id}</a>..<a href="#/job/${r.last_job_id}">${r.last_job_id}</a>`) : "–"}</td>
      <td>${r.actor || html`<span class="faint">–</span>`}</td>
      <td class="mono small wrap">${Object.entries(r.filter || {}).filter(([k, v]) => k !== "statuses" && v !== null && v !== undefined && v !== false && !(Array.isArray(v) && !v.length)).map(([k, v]) => `${k}=${Array.isArray(v) ? v.join(",") : v}`).join(" ")}</td>
      <td class="wrap">${r.note || ""}</td>
    </tr>`)}</tbody>
  </table></div>`;
}

/** How long a paced redrive takes to become due: the i-th job is due at start + i/rate. */
function spread(n, perSec) {
  const secs = (n - 1) / perSec;
  if (n <= 1) return "due at once";
  if (secs < 1) return "all due within a second";
  return `spread over about ${duration(secs)}`;
}

function rateText(perSec) {
  if (perSec >= 1) return `${+perSec.toFixed(2)}/s`;
  if (perSec * 60 >= 1) return `${+(perSec * 60).toFixed(2)}/m`;
  return `${+(perSec * 3600).toFixed(2)}/h`;
}

function describe(fp) {
  const g = groups.find((x) => x.fingerprint === fp);
  const where = filter.queue ? ` in ${filter.queue}` : "";
  return g ? `${fp}${where}: ${clip(g.pattern || g.sample_error, 200)}` : `${fp}${where}`;
}

// ---- redrive ----

let redriveFp = "";

function openRedrive(fp) {
  redriveFp = fp;
  const dialog = root.querySelector("#redrive-dialog");
  root.querySelector("#redrive-title").textContent = "Redrive dead jobs";
  root.querySelector("#redrive-what").textContent = describe(fp);
  root.querySelector("#redrive-go").disabled = true;
  root.querySelector("#redrive-go").textContent = "Redrive";
  root.querySelector('[data-region="redrive-preview"]').innerHTML = "";
  root.querySelector('[data-region="redrive-preview"]').__html = "";
  dialog.showModal();
  root.querySelector("#redrive-rate").focus();
  root.querySelector("#redrive-rate").select();
}

function redriveBody(dryRun) {
  const rateInput = root.querySelector("#redrive-rate");
  const rate = rateInput.value.trim();
  if (rate && !RATE.test(rate)) {
    rateInput.setAttribute("aria-invalid", "true");
    return { error: "The rate reads like 20/s, 600/m, 3600/h, or a number per second." };
  }
  const note = root.querySelector("#redrive-note").value.trim();
  const body = { fingerprint: redriveFp, ...selection(), dry_run: dryRun };
  if (rate) body.rate = rate;
  if (note && !dryRun) body.note = note;
  return { body };
}

async function previewRedrive(ctx) {
  const out = root.querySelector('[data-region="redrive-preview"]');
  const go = root.querySelector("#redrive-go");
  const { body, error } = redriveBody(true);
  if (error) {
    ctx.patch(out, html`<div class="error-box" role="alert"><code>invalid_field</code> ${error}</div>`);
    return;
  }
  try {
    const r = await ctx.api.post("dead/redrive", body);
    if (r.count === 0) {
      ctx.patch(out, html`<div class="result-box" data-testid="redrive-preview-result">Nothing to redrive: no dead job matches any more.</div>`);
      go.disabled = true;
      return;
    }
    const n = `${count(r.count)}${r.at_least ? "+" : ""}`;
    const pace = r.rate_per_sec ? html` at ${rateText(r.rate_per_sec)}, ${spread(r.count, r.rate_per_sec)}` : html`, unpaced: as fast as the workers take them`;
    ctx.patch(out, html`<div class="result-box" data-testid="redrive-preview-result">Would redrive <strong data-testid="redrive-count">${n}</strong> dead ${r.count === 1 ? "job" : "jobs"}${pace}.${r.ids && r.ids.length ? html` <span class="small">Ids: ${r.ids.slice(0, 12).join(", ")}${r.ids.length > 12 ? "…" : ""}</span>` : ""}</div>`);
    go.textContent = `Redrive ${n} ${r.count === 1 ? "job" : "jobs"}`;
    go.disabled = false;
    go.focus();
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
    go.disabled = true;
  }
}

async function redrive(ctx) {
  const dialog = root.querySelector("#redrive-dialog");
  const out = root.querySelector('[data-region="redrive-preview"]');
  const go = root.querySelector("#redrive-go");
  if (go.disabled) return;
  const { body, error } = redriveBody(false);
  if (error) {
    ctx.patch(out, html`<div class="error-box" role="alert"><code>invalid_field</code> ${error}</div>`);
    return;
  }
  go.disabled = true;
  try {
    const r = await ctx.api.post("dead/redrive", body);
    dialog.close();
    const pace = r.rate_per_sec ? ` at ${rateText(r.rate_per_sec)}, ${spread(r.count, r.rate_per_sec)}` : "";
    ctx.patch(root.querySelector('[data-region="action-result"]'), html`<div class="result-box ok" role="status" data-testid="redrive-result">
      Redrove <strong>${plural(r.count, "job")}</strong> back to ready with fresh attempts${pace}.
      ${r.ids.length ? html`Follow ${r.ids.length === 1 ? "it" : "them"}: ${r.ids.slice(0, 10).map((id, i) => html`${i ? ", " : ""}<a href="#/job/${id}" data-testid="redriven-job">job ${id}</a>`)}${r.ids.length > 10 ? "…" : ""}.` : ""}
      Watch the queue's depth drain and its failed count stay flat; if jobs die again, the cause is not fixed.</div>`);
    if (selected === redriveFp) selected = "";
    remember();
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
    go.disabled = false;
  }
  ctx.refreshNow();
}

// ---- purge ----

async function purge(ctx, fp) {
  const out = root.querySelector('[data-region="action-result"]');
  const body = { fingerprint: fp, ...selection() };
  let preview;
  try {
    preview = await ctx.api.post("dead/purge", { ...body, dry_run: true });
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
    return;
  }
  if (preview.count === 0) {
    ctx.patch(out, html`<div class="result-box" role="status">Nothing to purge: no dead job carries ${fp} any more.</div>`);
    ctx.refreshNow();
    return;
  }
  const n = `${count(preview.count)}${preview.at_least ? "+" : ""}`;
  const ok = await ctx.confirm({
    title: `Delete ${n} dead ${preview.count === 1 ? "job" : "jobs"} for good?`,
    body: html`<p class="mono small">${describe(fp)}</p>
      <p>Purged jobs are deleted with their payloads and error history. This cannot be undone.</p>
      <p class="muted small">Keep a copy first: <code>revenant dead export --fingerprint ${fp} --output dead.jsonl</code></p>`,
    ok: `Purge ${n} ${preview.count === 1 ? "job" : "jobs"}`,
    danger: true,
  });
  if (!ok) return;
  try {
    const r = await ctx.api.post("dead/purge", { ...body, dry_run: false });
    ctx.patch(out, html`<div class="result-box ok" role="status" data-testid="purge-result">Purged <strong>${plural(r.count, "dead job")}</strong>.</div>`);
    if (selected === fp) selected = "";
    remember();
  } catch (err) {
    ctx.patch(out, ctx.errorBox(err));
  }
  ctx.refreshNow();
}
