// Firing alerts as a list: the overview's panel and a queue page's.

import { html, count, duration } from "../format.js";

const RULE_NAMES = {
  dead_above: "dead jobs",
  oldest_due_above: "oldest due job too old",
  no_workers: "no worker alive",
  dead_per_hour_above: "dead per hour",
};

/** `firing` is the API's list of breaches; `alerts` the whole `/v1/alerts` answer. */
export function alertList(alerts, { queue = null } = {}) {
  const firing = (alerts.firing || []).filter((b) => !queue || b.queue === queue);
  if (!alerts.configured) {
    return html`<p class="muted" data-testid="alerts-unconfigured">No alert rules are configured on this server, so nothing is checked. Start <code>revenant serve</code> with an alerts file (the same one <code>revenant work --alerts</code> takes; see docs/alerts.md).</p>`;
  }
  if (!firing.length) {
    return html`<p class="calm" data-testid="alerts-calm">No alert firing${queue ? " for this queue" : ""}.</p>`;
  }
  return html`<ul class="alerts-list" data-testid="alerts-firing">${firing.map((b) => html`<li>
    <span class="badge ${b.severity === "critical" ? "bad" : "warn"}">${b.severity}</span>
    <span class="what">${queue ? "" : html`<a href="#/queue/${encodeURIComponent(b.queue)}"><strong>${b.queue}</strong></a> · `}${RULE_NAMES[b.rule] || b.rule}<br><span class="small">${b.text}</span></span>
    <span class="num">${formatValue(b)}</span>
  </li>`)}</ul>`;
}

function formatValue(b) {
  if (b.rule === "no_workers") return "";
  if (b.rule === "oldest_due_above") return html`${duration(b.value)} <span class="faint">&gt; ${duration(b.threshold)}</span>`;
  return html`${count(b.value)} <span class="faint">&gt; ${count(b.threshold)}</span>`;
}

/** Which (queue, rule) pairs fire, to colour the matching numbers. */
export function firingIndex(alerts) {
  const index = new Map();
  for (const b of alerts.firing || []) index.set(`${b.queue}/${b.rule}`, b.severity);
  return index;
}
