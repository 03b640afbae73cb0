// Depth and dead count over the last hour, drawn as inline SVG.
//
// Depth and dead have unrelated scales (thousands waiting, a handful dead), so they are
// never drawn against one axis: each gets its own band, stacked, on a shared time axis.
// The x domain is always the last `minutes` minutes ending now, so a server that started
// ten minutes ago shows ten minutes of line on the right, not a stretched hour.

import { html, raw, count, exact, relative } from "./format.js";

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function prepare(points, minutes, now) {
  const end = now;
  const start = end - minutes * 60000;
  const pts = (points || [])
    .map((p) => ({ t: new Date(p.at).getTime(), depth: Number(p.depth) || 0, dead: Number(p.dead) || 0, at: p.at }))
    .filter((p) => !Number.isNaN(p.t) && p.t >= start - 60000)
    .sort((a, b) => a.t - b.t);
  return { pts, start, end };
}

function path(pts, x, y) {
  return pts.map((p, i) => `${i ? "L" : "M"}${x(p.t).toFixed(1)},${y(p).toFixed(1)}`).join("");
}

function area(pts, x, y, base) {
  if (!pts.length) return "";
  const first = x(pts[0].t).toFixed(1);
  const last = x(pts[pts.length - 1].t).toFixed(1);
  return `${path(pts, x, y)}L${last},${base}L${first},${base}Z`;
}

/**
 * A small two-band sparkline for the queues table: depth above, dead below.
 * `label` is read by screen readers instead of the drawing.
 */
export function sparkline(points, { width = 220, height = 46, minutes = 60, now = Date.now() } = {}) {
  const { pts, start, end } = prepare(points, minutes, now);
  const depthH = Math.round(height * 0.6);
  const gap = 4;
  const deadTop = depthH + gap;
  const deadH = height - deadTop;
  const x = (t) => ((Math.max(t, start) - start) / (end - start)) * (width - 2) + 1;
  const dMax = niceMax(Math.max(...pts.map((p) => p.depth), 0));
  const kMax = niceMax(Math.max(...pts.map((p) => p.dead), 0));
  const yD = (p) => depthH - 1 - (p.depth / dMax) * (depthH - 3);
  const yK = (p) => deadTop + deadH - 1 - (p.dead / kMax) * (deadH - 2);
  const last = pts[pts.length - 1];
  const deadAny = pts.some((p) => p.dead > 0);
  const label = last
    ? `Last ${minutes} minutes: depth now ${count(last.depth)} (peak ${count(Math.max(...pts.map((p) => p.depth)))}), dead now ${count(last.dead)}`
    : "No history yet";
  return html`<svg class="chart spark" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${label}">
    <title>${label}</title>
    <line class="grid" x1="0" x2="${width}" y1="${depthH - 0.5}" y2="${depthH - 0.5}"/>
    <line class="grid" x1="0" x2="${width}" y1="${height - 0.5}" y2="${height - 0.5}"/>
    ${pts.length ? raw(`<path class="depth-area" d="${area(pts, x, yD, depthH - 1)}"/><path class="depth-line" d="${path(pts, x, yD)}"/>`) : ""}
    ${pts.length ? raw(`<path class="dead-line${deadAny ? "" : " zero"}" d="${path(pts, x, yK)}"/>`) : ""}
  </svg>`;
}

/**
 * The queue page's chart: two bands with axes and labels, and a hover read-out wired
 * by `bindChart`. Drawn in a 1000-unit-wide viewBox that scales to its container.
 */
export function chart(points, { minutes = 60, now = Date.now() } = {}) {
  const { pts, start, end } = prepare(points, minutes, now);
  const W = 1000;
  const left = 52;
  const right = 12;
  const top = 18;
  const depthH = 150;
  const gap = 34;
  const deadTop = top + depthH + gap;
  const deadH = 70;
  const H = deadTop + deadH + 26;
  const plotW = W - left - right;
  const x = (t) => left + ((Math.max(t, start) - start) / (end - start)) * plotW;
  const dMax = niceMax(Math.max(...pts.map((p) => p.depth), 0));
  const kMax = niceMax(Math.max(...pts.map((p) => p.dead), 0));
  const yD = (p) => top + depthH - (p.depth / dMax) * depthH;
  const yK = (p) => deadTop + deadH - (p.dead / kMax) * deadH;
  const deadAny = pts.some((p) => p.dead > 0);

  const parts = [];
  // Horizontal grid and y labels: 0, half, max for each band.
  for (const [band, max, y0, h] of [["depth", dMax, top, depthH], ["dead", kMax, deadTop, deadH]]) {
    // A half line only where half the scale is a whole number of jobs.
    for (const f of band === "depth" && max % 2 === 0 ? [0, 0.5, 1] : [0, 1]) {
      const y = y0 + h - f * h;
      parts.push(`<line class="grid" x1="${left}" x2="${W - right}" y1="${y}" y2="${y}"/>`);
      parts.push(`<text class="axis" x="${left - 8}" y="${y + 4}" text-anchor="end">${count(max * f)}</text>`);
    }
  }
  parts.push(`<text class="panel-label" x="${left}" y="${top - 6}">Depth (ready and due)</text>`);
  parts.push(`<text class="panel-label" x="${left}" y="${deadTop - 6}">Dead</text>`);
  // Time axis: every 15 minutes back from now.
  for (let m = 0; m <= minutes; m += 15) {
    const t = end - m * 60000;
    const xx = x(t);
    parts.push(`<line class="grid" x1="${xx}" x2="${xx}" y1="${top}" y2="${deadTop + deadH}" stroke-opacity="0.45"/>`);
    parts.push(`<text class="axis" x="${xx}" y="${H - 6}" text-anchor="${m === 0 ? "end" : m === minutes ? "start" : "middle"}">${m === 0 ? "now" : `−${m} min`}</text>`);
  }
  if (pts.length) {
    parts.push(`<path class="depth-area" d="${area(pts, x, yD, top + depthH)}"/>`);
    parts.push(`<path class="depth-line" d="${path(pts, x, yD)}"/>`);
    if (deadAny) parts.push(`<path class="dead-area" d="${area(pts, x, yK, deadTop + deadH)}"/>`);
    parts.push(`<path class="dead-line${deadAny ? "" : " zero"}" d="${path(pts, x, yK)}"/>`);
  } else {
    parts.push(`<text class="axis" x="${left + plotW / 2}" y="${top + depthH / 2}" text-anchor="middle">No history yet: the server samples once a minute</text>`);
  }
  parts.push(`<g class="hover" visibility="hidden"><line class="guide" y1="${top}" y2="${deadTop + deadH}"/><circle class="hover-dot depth" r="4"/><circle class="hover-dot dead" r="4"/></g>`);
  parts.push(`<rect class="hit" x="${left}" y="${top}" width="${plotW}" height="${deadTop + deadH - top}" fill="transparent"/>`);

  const last = pts[pts.length - 1];
  const label = last
    ? `Depth and dead over the last ${minutes} minutes. Depth now ${count(last.depth)}, peak ${count(Math.max(...pts.map((p) => p.depth)))}. Dead now ${count(last.dead)}, peak ${count(Math.max(...pts.map((p) => p.dead)))}.`
    : `Depth and dead over the last ${minutes} minutes: no samples yet.`;
  const geometry = JSON.stringify({ start, end, left, plotW, top, depthH, deadTop, deadH, dMax, kMax });
  return html`<svg class="chart big-chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${label}" data-geometry="${geometry}" data-testid="queue-chart">
    <title>${label}</title>
    ${raw(parts.join(""))}
  </svg>`;
}

/** Wires the hover read-out of a chart drawn by `chart` with the same points. */
export function bindChart(svg, points, tooltip) {
  if (!svg || !(svg instanceof SVGSVGElement)) return;
  const g = JSON.parse(svg.dataset.geometry);
  const pts = (points || [])
    .map((p) => ({ t: new Date(p.at).getTime(), depth: Number(p.depth) || 0, dead: Number(p.dead) || 0, at: p.at }))
    .filter((p) => !Number.isNaN(p.t) && p.t >= g.start - 60000)
    .sort((a, b) => a.t - b.t);
  const hover = svg.querySelector("g.hover");
  const guide = hover.querySelector(".guide");
  const dotD = hover.querySelector(".hover-dot.depth");
  const dotK = hover.querySelector(".hover-dot.dead");
  const hit = svg.querySelector("rect.hit");
  const toX = (t) => g.left + ((Math.max(t, g.start) - g.start) / (g.end - g.start)) * g.plotW;
  const hide = () => { hover.setAttribute("visibility", "hidden"); tooltip.hidden = true; };
  hit.addEventListener("mouseleave", hide);
  hit.addEventListener("mousemove", (ev) => {
    if (!pts.length) return;
    const m = svg.getScreenCTM();
    if (!m) return;
    const pt = new DOMPoint(ev.clientX, ev.clientY).matrixTransform(m.inverse());
    const t = g.start + ((pt.x - g.left) / g.plotW) * (g.end - g.start);
    let best = pts[0];
    for (const p of pts) if (Math.abs(p.t - t) < Math.abs(best.t - t)) best = p;
    const xx = toX(best.t);
    guide.setAttribute("x1", xx);
    guide.setAttribute("x2", xx);
    dotD.setAttribute("cx", xx);
    dotD.setAttribute("cy", g.top + g.depthH - (best.depth / g.dMax) * g.depthH);
    dotK.setAttribute("cx", xx);
    dotK.setAttribute("cy", g.deadTop + g.deadH - (best.dead / g.kMax) * g.deadH);
    hover.setAttribute("visibility", "visible");
    tooltip.innerHTML = String(html`<strong>${relative(best.at)}</strong> <span class="muted">${exact(best.at).split(" (")[0]}</span><br>depth <strong>${count(best.depth)}</strong> · dead <strong>${count(best.dead)}</strong>`);
    tooltip.hidden = false;
    tooltip.style.left = `${Math.min(ev.clientX + 14, window.innerWidth - tooltip.offsetWidth - 8)}px`;
    tooltip.style.top = `${ev.clientY + 14}px`;
  });
}
