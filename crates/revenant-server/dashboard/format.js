// Turning data into text and HTML: escaping, times, durations and counts.
//
// Every view builds HTML with the `html` tag below, which escapes each interpolated
// value unless it is itself the result of `html` (or `raw`). Job payloads and error
// messages come from producers and handlers, so nothing from the API is ever put into
// the page unescaped.

class Safe {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

/** Marks a string as already-safe HTML. Only for strings built by this module. */
export function raw(text) { return new Safe(String(text)); }

export function escape(value) {
  return String(value)
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

function part(value) {
  if (value === null || value === undefined || value === false) return "";
  if (value instanceof Safe) return value.text;
  if (Array.isArray(value)) return value.map(part).join("");
  return escape(value);
}

/** Tagged template: `html\`<td>${name}</td>\`` escapes `name`; arrays are joined. */
export function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += part(values[i]) + strings[i + 1];
  return new Safe(out);
}

/** A count with thousands separators, or "–" for missing. */
export function count(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString("en-US");
}

/**
 * A duration in seconds as the two largest units a human reads at a glance:
 * "0s", "42s", "3m 20s", "2h 5m", "3d 4h".
 */
export function duration(secs) {
  if (secs === null || secs === undefined || Number.isNaN(secs)) return "–";
  let s = Math.max(0, Math.round(secs));
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return h ? `${d}d ${h}h` : `${d}d`;
  if (h) return m ? `${h}h ${m}m` : `${h}h`;
  return s ? `${m}m ${s}s` : `${m}m`;
}

/** A short duration in milliseconds: "850 ms", "2.4 s", then as `duration`. */
export function millis(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
  return duration(ms / 1000);
}

function parse(at) {
  if (at === null || at === undefined || at === "") return null;
  const t = at instanceof Date ? at : new Date(at);
  return Number.isNaN(t.getTime()) ? null : t;
}

/** "3 min ago", "in 20 s", "just now". */
export function relative(at, now = Date.now()) {
  const t = parse(at);
  if (!t) return "–";
  const diff = (now - t.getTime()) / 1000;
  const abs = Math.abs(diff);
  if (abs < 2) return "just now";
  let text;
  if (abs < 60) text = `${Math.round(abs)} s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)} min`;
  else if (abs < 86400) text = `${(abs / 3600).toFixed(abs < 36000 ? 1 : 0).replace(/\.0$/, "")} h`;
  else text = `${Math.round(abs / 86400)} d`;
  return diff >= 0 ? `${text} ago` : `in ${text}`;
}

/** The exact time, in the browser's zone and in UTC, for hover text. */
export function exact(at) {
  const t = parse(at);
  if (!t) return "";
  const local = t.toLocaleString("en-GB", {
    year: "numeric", month: "short", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
  });
  return `${local} (local) · ${t.toISOString()}`;
}

/**
 * A `<time>` element showing the relative time, with the exact time on hover. Its text
 * is filled in by `tickTimes` (right after a region is drawn, then every second), so
 * the HTML of a region changes only when its data does and a refresh that brings
 * nothing new redraws nothing.
 */
export function when(at) {
  const t = parse(at);
  if (!t) return html`<span class="faint">–</span>`;
  return html`<time datetime="${t.toISOString()}" data-at="${t.toISOString()}" title="${exact(t)}"></time>`;
}

/** Re-renders every relative `<time>` under `root`. */
export function tickTimes(root) {
  const now = Date.now();
  for (const el of root.querySelectorAll("time[data-at]")) {
    const text = relative(el.dataset.at, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

/** Seconds between two timestamps, or null when either is missing. */
export function between(from, to) {
  const a = parse(from);
  const b = parse(to);
  if (!a || !b) return null;
  return (b.getTime() - a.getTime()) / 1000;
}

/** "1 job" / "3 jobs". */
export function plural(n, word, many = `${word}s`) {
  return `${count(n)} ${n === 1 ? word : many}`;
}
