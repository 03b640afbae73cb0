// `#/jobs`: jobs filtered by queue, state and kind, newest first, a page at a time.

import { html } from "../format.js";
import { jobsTable } from "./jobs-table.js";

const STATES = ["ready", "running", "completed", "dead", "cancelled"];
const PAGE = 50;

let root = null;
let filter = { queue: "", state: "", kind: "" };
let before = null;     // the page cursor (`next_before` of the previous page)
let pages = [];        // cursors of the pages before this one, for "Newer"

export default {
  nav: "jobs",
  title: () => "Jobs",

  mount(main, params, ctx) {
    root = main;
    filter = { queue: params.queue || "", state: params.state || "", kind: params.kind || "" };
    before = null;
    pages = [];
    main.innerHTML = String(html`
      <div class="page-head"><h1>Jobs</h1><span class="sub">newest first</span></div>
      <section class="panel" aria-label="Filters">
        <form class="filters" id="jobs-filters">
          <div class="field"><label for="jobs-queue">Queue</label><select id="jobs-queue"><option value="">every queue</option></select></div>
          <div class="field"><label for="jobs-state">State</label><select id="jobs-state"><option value="">every state</option>
            ${STATES.map((s) => html`<option value="${s}">${s}</option>`)}</select></div>
          <div class="field"><label for="jobs-kind">Kind</label><input id="jobs-kind" placeholder="any kind" value="${filter.kind}" autocomplete="off"></div>
          <button type="submit">Apply</button>
        </form>
      </section>
      <div data-region="error"></div>
      <section class="panel flush" aria-label="Jobs">
        <div data-region="jobs"><p class="loading empty">Loading…</p></div>
        <div class="actions pager" data-region="pager"></div>
      </section>`);
    main.querySelector("#jobs-state").value = filter.state;
    const apply = () => {
      filter = {
        queue: main.querySelector("#jobs-queue").value,
        state: main.querySelector("#jobs-state").value,
        kind: main.querySelector("#jobs-kind").value.trim(),
      };
      before = null;
      pages = [];
      const q = new URLSearchParams(Object.entries(filter).filter(([, v]) => v)).toString();
      history.replaceState(null, "", q ? `#/jobs?${q}` : "#/jobs");
      ctx.refreshNow();
    };
    main.querySelector("#jobs-filters").addEventListener("submit", (ev) => { ev.preventDefault(); apply(); });
    main.querySelector("#jobs-queue").addEventListener("change", apply);
    main.querySelector("#jobs-state").addEventListener("change", apply);
    // On the pager, not on `main`: `main` outlives this view, the pager does not.
    main.querySelector('[data-region="pager"]').addEventListener("click", (ev) => {
      const el = ev.target.closest("[data-page]");
      if (!el) return;
      if (el.dataset.page === "older") { pages.push(before); before = Number(el.dataset.cursor); }
      else { before = pages.pop() ?? null; }
      ctx.refreshNow();
    });
  },

  async refresh(ctx, current) {
    const { api } = ctx;
    const [queues, list] = await Promise.all([
      api.get("queues"),
      api.get(`jobs${api.query({ ...filter, limit: PAGE, before })}`).catch((err) => ({ error: err })),
    ]);
    if (!current()) return;
    const select = root.querySelector("#jobs-queue");
    const names = queues.queues.map((q) => q.name);
    if (filter.queue && !names.includes(filter.queue)) names.push(filter.queue);
    if (select.__names !== names.join("\n")) {
      select.__names = names.join("\n");
      select.innerHTML = String(html`<option value="">every queue</option>${names.map((n) => html`<option value="${n}">${n}</option>`)}`);
      select.value = filter.queue;
    }
    // A bad filter (a kind with a space) is the user's to fix, not a failed refresh.
    if (list.error) {
      if (list.error.status !== 400) throw list.error;
      ctx.patch(root.querySelector('[data-region="error"]'), ctx.errorBox(list.error));
      ctx.patch(root.querySelector('[data-region="jobs"]'), "");
      return;
    }
    ctx.patch(root.querySelector('[data-region="error"]'), "");
    ctx.patch(root.querySelector('[data-region="jobs"]'), jobsTable(list.jobs, { empty: "No job matches." }));
    ctx.patch(root.querySelector('[data-region="pager"]'), html`
      ${pages.length || before ? html`<button type="button" class="ghost" data-page="newer" data-key="newer">← Newer</button>` : ""}
      ${list.next_before ? html`<button type="button" class="ghost" data-page="older" data-cursor="${list.next_before}" data-key="older">Older →</button>` : ""}`);
  },
};
