// The dashboard in a real headless Chromium against a real `revenant serve`:
// find a dead job, redrive it, and watch its page turn `completed`; then close a
// dependency's breaker held open, hold it open again and release the hold; then visit
// the queue and dead-letter views again and again and check that one click still
// sends one request.
//
// scripts/browser-test.sh starts the server and sets:
//   REVENANT_URL      the server's base URL (http://127.0.0.1:PORT)
//   REVENANT_TOKEN    an admin token the server accepts (optional: none when unset)
//   CHROMIUM          the browser binary (default /usr/bin/chromium)
//   SCREENSHOT_DIR    where the screenshots go (default target/browser-test)
//
// This file plays two parts. The browser is the operator at 3am. Node, through the
// JSON API, is the producer and a remote worker (enqueue, claim, fail, complete), the
// way a worker written in any language would use the server.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const BASE = (process.env.REVENANT_URL || "").replace(/\/$/, "");
const TOKEN = process.env.REVENANT_TOKEN || "";
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = path.resolve(process.env.SCREENSHOT_DIR || "target/browser-test");
const QUEUE = "browser-test";
const WORKER = "browser-test-worker";
// The error the job dies of, with a number in it: the fingerprint takes numbers out.
const FATAL = "template crashed on 'A&W' at line 42";
// The dependency whose breaker the second test holds open and closes.
const DEPENDENCY = "email-provider";
// The error of the job the third test purges (another fingerprint than FATAL's).
const PURGED = "receipt printer offline since job 7";

// Every wait in this file has a deadline; the whole run is bounded by these and by
// the script's own timeout.
const STEP_MS = 20000;

let browser;
let page;
let jobId;
const outside = [];   // requests the page made to anything but the server
const problems = [];  // page errors and console errors

async function api(method, route, body) {
  const headers = { Accept: "application/json" };
  if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(`${BASE}${route}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(STEP_MS),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${method} ${route}: HTTP ${res.status} ${text}`);
  return data;
}

/** Claims the next job of the queue as the remote worker, waiting for one to be due. */
async function claim() {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline) {
    const { jobs } = await api("POST", "/v1/claims", { queue: QUEUE, worker: WORKER, lease: "30s", wait: "5s" });
    if (jobs.length) return jobs[0];
  }
  throw new Error(`no job of ${QUEUE} became claimable within ${STEP_MS / 1000}s`);
}

let shotNumber = 0;
async function shot(name) {
  shotNumber += 1;
  const file = path.join(SHOTS, `dashboard-${String(shotNumber).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`screenshot: ${file}`);
  return file;
}

before(async () => {
  assert.ok(BASE, "REVENANT_URL is not set: run this through scripts/browser-test.sh");
  if (!existsSync(CHROMIUM)) {
    // Never a skip: a browser test that silently does not run is a green lie.
    assert.fail(`Chromium not found at ${CHROMIUM}. Install Debian's chromium (apt-get install -y chromium) or set CHROMIUM.`);
  }
  mkdirSync(SHOTS, { recursive: true });

  // Arrange, through the API: a job that fails once (transient), then dies (permanent).
  const enq = await api("POST", "/v1/jobs", {
    queue: QUEUE,
    kind: "send_receipt",
    payload: { order: 1042, restaurant: "A&W", to: "guest@example.com" },
    max_attempts: 5,
    correlation_id: "receipt-1042",
  });
  jobId = enq.jobs[0].id;
  let job = await claim();
  assert.equal(job.id, jobId);
  await api("POST", `/v1/jobs/${jobId}/fail`, {
    lease_token: job.lease_token, class: "transient", message: "HTTP 503 from provider after 2150ms", retry_after: "1s",
  });
  job = await claim();
  assert.equal(job.id, jobId);
  const died = await api("POST", `/v1/jobs/${jobId}/fail`, { lease_token: job.lease_token, class: "permanent", message: FATAL });
  assert.equal(died.state, "dead", "the permanent failure should kill the job");

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: STEP_MS,
    // Running as root in a container needs --no-sandbox; the rest keeps Chromium from
    // calling home on a machine with no network (it retries, and slows every start).
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 }, colorScheme: "dark" });
  page.setDefaultTimeout(STEP_MS);
  page.on("request", (req) => {
    const url = req.url();
    if (!url.startsWith(`${BASE}/`) && !url.startsWith("data:")) outside.push(url);
  });
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() === "error" && !/Failed to load resource/.test(msg.text())) problems.push(`console error: ${msg.text()}`);
  });
});

after(async () => {
  if (browser) await browser.close();
});

test("an operator finds a dead job, redrives it, and sees it complete", async () => {
  // The overview: the test queue with one dead job.
  await page.goto(`${BASE}/`);
  if (TOKEN) {
    // A fresh tab has no token: the page says so, and takes one.
    await page.getByTestId("banner").getByText("needs a token").waitFor();
    await shot("token-needed");
    await page.getByTestId("token-button").click();
    await page.getByTestId("token-input").fill(TOKEN);
    await page.getByTestId("token-save").click();
  }
  const row = page.locator(`[data-testid="queues-table"] tr[data-queue="${QUEUE}"]`);
  await row.waitFor();
  await assertText(row.getByTestId("dead").locator(".big"), /^1$/, "the overview shows the queue's one dead job");
  await shot("overview");

  // Dead letters: one group, the job's error with its number taken out.
  await page.getByRole("link", { name: "Dead letters" }).click();
  const { fingerprint } = await api("GET", `/v1/jobs/${jobId}`);
  assert.match(fingerprint || "", /^[0-9a-f]{12}$/, "a dead job carries the fingerprint of its error");
  const group = page.locator(`[data-testid="fingerprint-row"][data-fingerprint="${fingerprint}"]`);
  await group.waitFor();
  await assertText(group, /template crashed on .*A&W/, "the group shows a sample of the error");
  await shot("dead-letters");

  // Its jobs: ours is there.
  await group.getByTestId("show-jobs").click();
  await page.locator(`[data-testid="dead-jobs"] tr[data-job-id="${jobId}"]`).waitFor();

  // Redrive at a rate, dry run first.
  await group.getByTestId("redrive").click();
  const dialog = page.getByTestId("redrive-dialog");
  await dialog.waitFor();
  await dialog.getByTestId("redrive-rate").fill("20/s");
  await dialog.getByTestId("redrive-preview").click();
  await assertText(dialog.getByTestId("redrive-count"), /^1$/, "the dry run counts the one dead job");
  await shot("redrive-preview");
  await dialog.getByTestId("redrive-confirm").click();
  const result = page.getByTestId("redrive-result");
  await assertText(result, /Redrove 1 job/, "the redrive reports one job");
  await shot("redriven");

  // The job's page: back to ready, its history kept.
  await result.getByRole("link", { name: `job ${jobId}` }).click();
  await page.waitForURL(new RegExp(`#/job/${jobId}$`));
  await assertText(page.locator(".page-head").getByTestId("job-state"), /^ready$/, "a redriven job is ready");
  assert.equal(await page.getByTestId("attempt").count(), 2, "both failed attempts are in the history");

  // A worker takes it and succeeds (Node, through the API)...
  const job = await claim();
  assert.equal(job.id, jobId, "the worker claims the redriven job");
  await api("POST", `/v1/jobs/${jobId}/complete`, { lease_token: job.lease_token });

  // ...and the page, refreshing by itself, shows it completed.
  await assertText(page.locator(".page-head").getByTestId("job-state"), /^completed$/, "the job page turns completed without a reload");
  await page.getByTestId("timeline").getByText("Completed").waitFor();
  await assertText(page.getByTestId("refresh-status"), /updated \d+ s ago/, "the page says when it last refreshed");
  await shot("job-completed");

  assert.deepEqual(outside, [], "the dashboard fetched something from outside the server");
  assert.deepEqual(problems, [], "the page logged errors");
});

test("an operator closes a breaker held open, holds it again and releases it", async () => {
  // No dependency yet: the view says how one appears.
  await page.getByRole("link", { name: "Dependencies" }).click();
  await page.waitForURL(/#\/dependencies$/);
  await page.getByTestId("dependencies-empty").waitFor();
  await shot("dependencies-empty");

  // Planned maintenance, through the API (as `revenant breaker open` would): the
  // provider's breaker is held open before its first job.
  const held = await api("POST", `/v1/dependencies/${encodeURIComponent(DEPENDENCY)}/open`);
  assert.equal(held.breaker, "open");
  assert.equal(held.held_open, true);
  await page.evaluate(() => window.revenant.refresh()); // rather than wait up to 5 s
  const row = page.locator(`[data-testid="dependency-row"][data-dependency="${DEPENDENCY}"]`);
  await row.waitFor();
  await assertText(row.getByTestId("breaker-state"), /^open$/, "the held breaker shows open");
  await row.getByTestId("held-open").waitFor();
  await assertText(row.getByTestId("in-flight"), /^0$/, "no attempt of it in flight");
  assert.equal(await row.getByTestId("breaker-open").isDisabled(), true, "Open is disabled while held");
  await shot("dependency-held-open");

  // Close: it asks first, then the row turns closed and the hold is gone.
  await row.getByTestId("breaker-close").click();
  const confirm = page.getByTestId("confirm-dialog");
  await confirm.waitFor();
  await assertText(confirm, new RegExp(`Close ${DEPENDENCY}\\?`), "the confirmation names the dependency");
  await confirm.getByTestId("confirm-ok").click();
  await assertText(page.getByTestId("breaker-result"), /closed/, "the page says the breaker closed");
  await assertText(row.getByTestId("breaker-state"), /^closed$/, "the closed breaker shows closed");
  assert.equal(await row.getByTestId("held-open").count(), 0, "no hold after Close");
  let state = await api("GET", `/v1/dependencies/${encodeURIComponent(DEPENDENCY)}`);
  assert.equal(state.breaker, "closed");
  assert.equal(state.held_open, false);
  await shot("dependency-closed");

  // Open from the page (a confirmation that starts on Cancel), then Auto: still open,
  // no longer held, a probe due at once.
  await row.getByTestId("breaker-open").click();
  await confirm.waitFor();
  await confirm.getByTestId("confirm-ok").click();
  await assertText(row.getByTestId("breaker-state"), /^open$/, "Open holds the breaker open");
  await row.getByTestId("held-open").waitFor();
  await row.getByTestId("breaker-auto").click();
  await assertText(page.getByTestId("breaker-result"), /works by itself again/, "the page says the hold is released");
  await waitForCount(row.getByTestId("held-open"), 0, "Auto releases the hold");
  state = await api("GET", `/v1/dependencies/${encodeURIComponent(DEPENDENCY)}`);
  assert.equal(state.held_open, false);
  await shot("dependency-auto");

  assert.deepEqual(outside, [], "the dashboard fetched something from outside the server");
  assert.deepEqual(problems, [], "the page logged errors");
});

test("views visited again and again still act once per click", async () => {
  // A second dead job, for the dead-letter view to purge.
  const enq = await api("POST", "/v1/jobs", { queue: QUEUE, kind: "print_receipt", payload: { order: 1043 }, max_attempts: 1 });
  const deadId = enq.jobs[0].id;
  const job = await claim();
  assert.equal(job.id, deadId);
  const died = await api("POST", `/v1/jobs/${deadId}/fail`, { lease_token: job.lease_token, class: "permanent", message: PURGED });
  assert.equal(died.state, "dead");
  const { fingerprint } = await api("GET", `/v1/jobs/${deadId}`);
  assert.match(fingerprint || "", /^[0-9a-f]{12}$/);

  // Every POST the page sends from here on, by path, with its body.
  const posts = [];
  const onRequest = (req) => {
    if (req.method() === "POST") posts.push({ path: new URL(req.url()).pathname, body: req.postDataJSON() });
  };
  page.on("request", onRequest);
  const sent = (p) => posts.filter((x) => x.path === p);
  // Lets a click's piled-up handlers (the bug this test is about) send theirs.
  const settle = () => new Promise((r) => setTimeout(r, 1000));

  // Views told apart by what only each draws, so a wait never matches the page left.
  const q = encodeURIComponent(QUEUE);
  const views = {
    queue: [`#/queue/${q}`, page.locator('[data-testid="queue-name"]', { hasText: QUEUE })],
    overview: ["#/", page.locator(`[data-testid="queues-table"] tr[data-queue="${QUEUE}"]`)],
    dead: ["#/dead", page.locator(`[data-testid="fingerprint-row"][data-fingerprint="${fingerprint}"]`)],
    jobs: ["#/jobs", page.locator("#jobs-filters")],
  };
  const visit = async (name) => {
    const [hash, drawn] = views[name];
    await page.evaluate((h) => { location.hash = h; }, hash);
    await drawn.waitFor();
  };

  try {
    // The queue view, mounted four times with other views in between.
    for (const other of ["overview", "dead", "jobs"]) {
      await visit("queue");
      await visit(other);
    }
    await visit("queue");
    await page.getByTestId("pause").click();
    const confirm = page.getByTestId("confirm-dialog");
    await confirm.waitFor();
    await confirm.getByTestId("confirm-ok").click();
    await page.getByTestId("paused-badge").waitFor();
    await settle();
    assert.equal(sent(`/v1/queues/${q}/pause`).length, 1, "one click on Pause (confirmed) sends one pause request");
    assert.equal(await confirm.isVisible(), false, "no confirmation is left open");
    const paused = (await api("GET", "/v1/queues")).queues.find((x) => x.name === QUEUE);
    assert.equal(paused.paused, true, "the queue is paused");
    await shot("queue-paused");

    // Resume asks nothing: one click, one request, and the queue claims again.
    await page.getByTestId("resume").click();
    await waitForCount(page.getByTestId("paused-badge"), 0, "Resume clears the paused badge");
    await settle();
    assert.equal(sent(`/v1/queues/${q}/resume`).length, 1, "one click on Resume sends one resume request");
    assert.equal(sent(`/v1/queues/${q}/pause`).length, 1, "Resume sends no pause request");
    const resumed = (await api("GET", "/v1/queues")).queues.find((x) => x.name === QUEUE);
    assert.equal(resumed.paused, false, "the queue is resumed");

    // The dead-letter view, mounted four times in all (once above): Purge previews
    // once, asks once, and purges once.
    for (const other of ["queue", "overview"]) {
      await visit("dead");
      await visit(other);
    }
    await visit("dead");
    const group = views.dead[1];
    await group.getByTestId("purge").click();
    await confirm.waitFor();
    await assertText(confirm, /Delete 1 dead job for good\?/, "the confirmation counts the one dead job");
    await confirm.getByTestId("confirm-ok").click();
    await assertText(page.getByTestId("purge-result"), /Purged 1 dead job/, "the page says the job was purged");
    await settle();
    const purges = sent("/v1/dead/purge");
    assert.deepEqual(purges.map((x) => x.body.dry_run), [true, false], "one click on Purge sends one dry run, then (confirmed) one purge");
    assert.ok(purges.every((x) => x.body.fingerprint === fingerprint), "both name the group's fingerprint");
    await assert.rejects(api("GET", `/v1/jobs/${deadId}`), /HTTP 404/, "the purged job is gone");
    await waitForCount(group, 0, "the purged group leaves the list");
    await shot("dead-purged");
  } finally {
    page.off("request", onRequest);
  }

  assert.deepEqual(posts.map((x) => x.path).sort(), [`/v1/dead/purge`, `/v1/dead/purge`, `/v1/queues/${q}/pause`, `/v1/queues/${q}/resume`],
    "the page sent no other POST");
  assert.deepEqual(outside, [], "the dashboard fetched something from outside the server");
  assert.deepEqual(problems, [], "the page logged errors");
});

/** Waits until the locator matches `n` elements, then asserts it. */
async function waitForCount(locator, n, why) {
  const deadline = Date.now() + STEP_MS;
  while (Date.now() < deadline && (await locator.count()) !== n) {
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.equal(await locator.count(), n, why);
}

/** Waits until the locator's text matches, then asserts it (with `why` on failure). */
async function assertText(locator, re, why) {
  const deadline = Date.now() + STEP_MS;
  let text = "";
  while (Date.now() < deadline) {
    text = (await locator.first().textContent({ timeout: STEP_MS }).catch(() => "")) || "";
    if (re.test(text.trim())) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  await shot("failure").catch(() => {});
  assert.match(text.trim(), re, why);
}
