// The dashboard's shell: hash routing, the refresh loop and its status, the token
// dialog, confirmations, and how API errors are shown.
//
// Each view is a module with `mount(main, params, ctx)`, which draws its skeleton and
// controls once, and `refresh(ctx)`, which fetches and redraws its data regions. The
// loop calls `refresh` every REFRESH_MS; a region whose HTML did not change is left
// alone, so a refresh never steals focus or closes what the user is doing.
//
// There is no unmount: the next view's `mount` replaces `main`'s content, and what
// it drew goes with it. So `mount` wires its listeners to elements it drew, never to
// `main` itself, which outlives every view: a listener there would stay, and another
// be added on each visit, so one click would act once per visit.

import * as api from "./api.js";
import { html, raw, escape, tickTimes } from "./format.js";
import overview from "./views/overview.js";
import queue from "./views/queue.js";
import dead from "./views/dead.js";
import job from "./views/job.js";
import jobs from "./views/jobs.js";
import workers from "./views/workers.js";
import dependencies from "./views/dependencies.js";
import schedules from "./views/schedules.js";

const REFRESH_MS = 5000;

const routes = [
  [/^\/?$/, overview, () => ({})],
  [/^\/queue\/([^/]+)$/, queue, (m) => ({ name: decodeURIComponent(m[1]) })],
  [/^\/dead(?:\/([^/]+))?$/, dead, (m) => ({ fingerprint: m[1] ? decodeURIComponent(m[1]) : "" })],
  [/^\/job\/(\d+)$/, job, (m) => ({ id: m[1] })],
  [/^\/jobs$/, jobs, () => ({})],
  [/^\/workers$/, workers, () => ({})],
  [/^\/dependencies$/, dependencies, () => ({})],
  [/^\/schedules$/, schedules, () => ({})],
];

const $ = (sel) => document.querySelector(sel);
const main = $("#main");
const statusEl = $("#status");
const statusText = $("#status-text");
const banner = $("#banner");
const tooltip = $("#tooltip");

let current = null;       // { view, params, generation }
let generation = 0;       // bumps on every navigation; stale refreshes are dropped
let lastOk = 0;           // when the API last answered
let lastError = null;     // the last refresh's ApiError, if it failed
let inFlight = false;
let timer = null;

/** Replaces `el`'s content when it changed, keeping focus on the same `data-key`. */
function patch(el, content) {
  if (!el) return;
  const text = String(content);
  if (el.__html === text) return;
  const active = document.activeElement;
  const key = active && el.contains(active) ? active.dataset.key : null;
  el.innerHTML = text;
  el.__html = text;
  tickTimes(el);
  if (key) {
    const again = el.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

/** An API error as a box with its code and message (and what to do about auth). */
function errorBox(err) {
  if (!(err instanceof api.ApiError)) {
    return html`<div class="error-box" role="alert" data-testid="error"><code>client_error</code> ${String(err && err.message ? err.message : err)}</div>`;
  }
  return html`<div class="error-box" role="alert" data-testid="error"><code>${err.code}</code> ${err.message}${authHint(err)}</div>`;
}

function authHint(err) {
  if (err.status === 401) {
    return html`<br><span class="muted">This server needs a token. <button type="button" class="small" data-open-token>Enter token</button></span>`;
  }
  if (err.status === 403) {
    // Every call the dashboard makes needs `admin` (the OpenAPI document's
    // x-revenant-scope), unless the server names another scope in its message.
    const scope = err.scope || "admin";
    return html`<br><span class="muted">Your token is valid but lacks the scope this needs${scope ? html`: <code>${scope}</code>` : ""}. Ask for a token with ${scope ? html`the <code>${scope}</code> scope` : "that scope"}. <button type="button" class="small" data-open-token>Change token</button></span>`;
  }
  return "";
}

/**
 * Asks before a destructive action. `body` is HTML (from `html`). Resolves true only
 * when the user pressed the confirm button.
 */
function confirm({ title, body, ok, danger = false }) {
  const dialog = $("#confirm-dialog");
  $("#confirm-title").textContent = title;
  $("#confirm-body").innerHTML = String(body || "");
  tickTimes($("#confirm-body"));
  const okButton = $("#confirm-ok");
  okButton.textContent = ok;
  okButton.className = danger ? "danger solid" : "primary";
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    // Destructive actions start on Cancel, so Enter alone never deletes anything.
    (danger ? dialog.querySelector('[value="cancel"]') : okButton).focus();
  });
}

const ctx = {
  api,
  patch,
  errorBox,
  confirm,
  tooltip,
  refreshNow: () => refresh(true),
  navigate: (hash) => { location.hash = hash; },
};

function setNav(view) {
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    if (a.dataset.nav === view.nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, search] = hash.split("?");
  const query = Object.fromEntries(new URLSearchParams(search || ""));
  for (const [re, view, params] of routes) {
    const m = re.exec(path);
    if (m) return { view, params: { ...query, ...params(m) } };
  }
  return null;
}

function navigate() {
  generation++;
  tooltip.hidden = true;
  const found = route();
  main.__html = undefined;
  if (!found) {
    main.innerHTML = String(html`<div class="panel"><h1>Not found</h1><p class="muted">No page at <code>${location.hash}</code>. <a href="#/">Back to the overview</a>.</p></div>`);
    current = null;
    document.title = "revenant";
    return;
  }
  current = { ...found, generation };
  setNav(found.view);
  document.title = `${found.view.title(found.params)} · revenant`;
  found.view.mount(main, found.params, ctx);
  refresh(true);
}

async function refresh(force = false) {
  if (!current || (inFlight && !force)) return;
  if (paused && !force) return;
  const mine = current;
  inFlight = true;
  try {
    await mine.view.refresh(ctx, () => mine.generation === generation);
    if (mine.generation !== generation) return;
    lastOk = Date.now();
    lastError = null;
    showBanner(null);
  } catch (err) {
    if (mine.generation !== generation) return;
    lastError = err;
    if (!(err instanceof api.ApiError)) console.error(err);
    showBanner(err);
  } finally {
    inFlight = false;
    updateStatus();
  }
}

function showBanner(err) {
  main.classList.toggle("stale", Boolean(err && err.unreachable && lastOk));
  if (!err) {
    banner.hidden = true;
    banner.innerHTML = "";
    return;
  }
  banner.hidden = false;
  banner.classList.toggle("bad", err.auth === true);
  if (err instanceof api.ApiError && err.unreachable) {
    banner.innerHTML = String(html`<strong>The API is not answering</strong> (${err.message}). ${lastOk ? "What you see is from the last good refresh, dimmed; the top bar says how old it is." : ""} Retrying every ${REFRESH_MS / 1000} s.`);
  } else if (err instanceof api.ApiError && err.status === 401) {
    const scope = err.scope || "admin";
    banner.innerHTML = String(html`<strong>This server needs a token.</strong> The dashboard needs one with the <code>${scope}</code> scope.
      <button type="button" class="primary small" data-open-token data-testid="banner-token">Enter token</button>
      <div class="small">The server said: <code>${err.code}</code> ${err.message}</div>`);
  } else {
    banner.innerHTML = String(html`<strong>The last refresh failed.</strong>${errorBox(err)}`);
  }
}

let paused = false;

function updateStatus() {
  statusEl.classList.remove("stale", "down");
  if (paused) {
    statusEl.classList.add("stale");
    statusText.textContent = "auto-refresh paused (click the dot to resume)";
    return;
  }
  if (lastError && lastError.unreachable) {
    statusEl.classList.add("down");
    statusText.textContent = lastOk
      ? `paused: API unreachable · data ${Math.round((Date.now() - lastOk) / 1000)} s old`
      : "paused: API unreachable";
    return;
  }
  if (lastError && lastError.auth) {
    statusEl.classList.add("stale");
    statusText.textContent = lastError.status === 401 ? "needs a token" : "token lacks a scope";
    return;
  }
  if (!lastOk) {
    statusText.textContent = lastError ? "refresh failed" : "connecting…";
    if (lastError) statusEl.classList.add("stale");
    return;
  }
  const age = Math.round((Date.now() - lastOk) / 1000);
  if (lastError || age > (REFRESH_MS / 1000) * 3) statusEl.classList.add("stale");
  statusText.textContent = `updated ${age} s ago`;
}

function openTokenDialog() {
  const dialog = $("#token-dialog");
  const input = $("#token-input");
  input.value = api.token();
  dialog.showModal();
  input.focus();
}

function wireShell() {
  $("#token-button").addEventListener("click", openTokenDialog);
  $("#token-cancel").addEventListener("click", () => $("#token-dialog").close());
  $("#token-clear").addEventListener("click", () => {
    api.setToken("");
    $("#token-dialog").close();
    refresh(true);
  });
  $("#token-form").addEventListener("submit", () => {
    api.setToken($("#token-input").value.trim());
    refresh(true);
  });
  document.addEventListener("click", (ev) => {
    if (ev.target.closest("[data-open-token]")) openTokenDialog();
  });
  statusEl.addEventListener("click", () => {
    paused = !paused;
    updateStatus();
    if (!paused) refresh(true);
  });
  statusEl.title = "Click to pause or resume auto-refresh";
  $("#jump").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("#jump-id").value.trim();
    if (/^\d+$/.test(id)) {
      location.hash = `#/job/${id}`;
      $("#jump-id").value = "";
    } else {
      $("#jump-id").setAttribute("aria-invalid", "true");
    }
  });
  $("#jump-id").addEventListener("input", (ev) => ev.target.removeAttribute("aria-invalid"));
  // The skip link must not touch the hash: that is the router's.
  document.querySelector(".skip").addEventListener("click", (ev) => {
    ev.preventDefault();
    main.focus();
  });
  window.addEventListener("hashchange", () => {
    navigate();
    // Like a page load for keyboard and screen-reader users: start at the content.
    main.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh(true);
  });
}

function start() {
  wireShell();
  navigate();
  timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
  setInterval(() => {
    updateStatus();
    tickTimes(document.body);
  }, 1000);
}

// Exposed for the browser test and for poking at from the console.
window.revenant = { refresh: () => refresh(true), escape, raw, get timer() { return timer; } };

start();
