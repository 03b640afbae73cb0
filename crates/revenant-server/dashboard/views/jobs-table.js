// The jobs table (queue page, dead letters, jobs page) and a job's state badge.

import { html, when, count } from "../format.js";

/**
 * A job's state as a badge, with what the state alone does not say: why a dead job
 * died, and whether a ready job is retrying (waiting out a backoff) or scheduled.
 * `data-testid="job-state"` holds the API's state word only.
 */
export function stateBadge(job) {
  let detail = "";
  if (job.state === "dead" && job.dead_reason) detail = job.dead_reason.replaceAll("_", " ");
  if (job.state === "ready" && new Date(job.run_at) > Date.now()) {
    detail = job.attempt > 0 ? "retrying" : "scheduled";
  }
  return html`<span class="badge state ${job.state}"><span data-testid="job-state">${job.state}</span>${detail ? ` · ${detail}` : ""}</span>`;
}

/** When the job last changed in a way a reader cares about. */
function lastMove(job) {
  if (job.finished_at) return job.finished_at;
  if (job.state === "running" && job.attempted_at) return job.attempted_at;
  return job.run_at;
}

/**
 * Jobs as a table with links to their pages. `options.columns` drops columns a page
 * already implies (the queue on a queue page).
 */
export function jobsTable(jobs, { empty = "No jobs.", hideQueue = false, testid = "jobs-table" } = {}) {
  if (!jobs.length) return html`<p class="empty">${empty}</p>`;
  return html`<div class="table-scroll"><table data-testid="${testid}">
    <thead><tr>
      <th scope="col" class="r">Id</th>
      ${hideQueue ? "" : html`<th scope="col">Queue</th>`}
      <th scope="col">Kind</th>
      <th scope="col">State</th>
      <th scope="col" class="r">Attempts</th>
      <th scope="col">When</th>
      <th scope="col">Last error</th>
    </tr></thead>
    <tbody>${jobs.map((j) => html`<tr data-job-id="${j.id}">
      <td class="r"><a href="#/job/${j.id}" data-key="job-${j.id}" data-testid="job-link">${j.id}</a></td>
      ${hideQueue ? "" : html`<td><a href="#/queue/${encodeURIComponent(j.queue)}">${j.queue}</a></td>`}
      <td class="mono">${j.kind}</td>
      <td>${stateBadge(j)}</td>
      <td class="r">${count(j.attempt)}/${count(j.max_attempts)}</td>
      <td>${when(lastMove(j))}</td>
      <td class="wrap">${j.last_error ? html`<span class="mono small">${clip(j.last_error.message, 160)}</span>` : html`<span class="faint">–</span>`}</td>
    </tr>`)}</tbody>
  </table></div>`;
}

/** Cuts long text for a table cell; the job page shows it whole. */
export function clip(text, max) {
  const s = String(text ?? "");
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
