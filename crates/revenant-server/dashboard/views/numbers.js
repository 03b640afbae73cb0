// The four numbers of a queue (DESIGN.md, "Observability: the four numbers"), with the
// level each deserves: red only when a human has something to do.

import { html, count, duration, when } from "../format.js";

function level(severity) {
  return severity === "critical" ? "bad" : severity ? "warn" : "";
}

/**
 * `q` is one entry of `/v1/queues`; `firing` the index from `firingIndex`.
 * Returns the four numbers as { key, label, value, note, level }.
 */
export function fourNumbers(q, firing) {
  const alert = (rule) => firing.get(`${q.name}/${rule}`);
  const noWorkers = q.workers_alive === 0 && q.depth > 0 && !q.paused;
  return [
    {
      key: "depth",
      label: "Depth",
      value: count(q.depth),
      note: q.paused ? "paused: not claimed" : `${count(q.scheduled)} scheduled · ${count(q.retrying)} retrying`,
      level: q.depth === 0 ? "zero" : "",
    },
    {
      key: "oldest",
      label: "Oldest due",
      value: q.oldest_due_age == null ? "–" : duration(q.oldest_due_age / 1000),
      note: q.oldest_due_age == null ? "nothing due" : "waiting past its run time",
      level: level(alert("oldest_due_above")) || (q.oldest_due_age == null ? "zero" : ""),
    },
    {
      key: "dead",
      label: "Dead",
      value: count(q.dead),
      note: html`${count(q.dead_last_hour)} in the last hour`,
      level: q.dead > 0 ? "bad" : "zero",
    },
    {
      key: "workers",
      label: "Workers alive",
      value: count(q.workers_alive),
      note: q.last_completed_at ? html`last completed ${when(q.last_completed_at)}` : "nothing completed yet",
      level: noWorkers || alert("no_workers") ? "bad" : q.workers_alive === 0 ? "zero" : "",
    },
  ];
}
