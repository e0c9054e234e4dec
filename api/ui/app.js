// The Switchyard dashboard: one ES module, no framework, no build step.
//
// It talks to the public API only (fetch to /v1/...), with the token pasted
// into the login form (an API key or the internal secret), kept in
// sessionStorage and sent as `Authorization: Bearer`. A 401 sends back to
// the login form. Every piece of API data reaches the DOM as text
// (textContent, text nodes, SVG attributes): never as HTML.
//
// Pages (hash routes):
//   #/login                          the login form
//   #/projects                       projects (internal secret) or the key's project
//   #/p/{project}/jobs               jobs, their recent runs and run rate; trigger, pause, resume
//   #/p/{project}/runs[?filters]     runs, filtered by status, job, time, payload (the
//                                    filters are the hash's); bulk cancel, replay
//   #/p/{project}/runs/{run}         a run: attempts (and their waterfall), timeline,
//                                    logs, outputs, checkpoints, state, dispatch
//                                    trace; replay, with an edited payload
//   #/p/{project}/queues             queue statistics with per-minute history
//   #/p/{project}/dead-letters       dead-letter runs, with replay
//   #/p/{project}/workflows          workflows
//   #/p/{project}/workflows/{id}     a workflow's DAG, trigger (with a payload), its runs
//   #/p/{project}/workflow-runs/{id} a workflow run: each step's status on the DAG,
//                                    the steps' waterfall; cancel, pause, resume;
//                                    approve, reject, skip a waiting step (with a
//                                    comment), retry a failed one
//   #/p/{project}/deliveries         webhook deliveries, with retry
//
// The run, workflow-run and list pages follow the API's live streams
// (`live`): they redraw when a change arrives, never on a timer. The other
// pages poll at most once per second, and not while the tab is hidden.
// Lists show PAGE_SIZE items a page, with Newer / Older links.

const TOKEN_KEY = "switchyard.token";
const PROJECT_KEY = "switchyard.project";
const FINISHED = new Set(["completed", "failed", "timed_out", "cancelled", "expired"]);

// ---------------------------------------------------------------- DOM helpers

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  append(e, children);
  return e;
}

const link = (href, text) => el("a", { href }, text);
const status = (s) => el("span", { class: `status ${s}`, "data-status": s }, s);
const json = (v) => el("pre", {}, v === undefined ? "" : JSON.stringify(v, null, 2));
const short = (id) => (id && id.length > 14 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id || "");

// How long ago (or until) `d`, in the largest unit that fits.
function relative(d) {
  const secs = Math.round((Date.now() - d.getTime()) / 1000);
  const abs = Math.abs(secs);
  const span = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : abs < 172800 ? `${Math.round(abs / 3600)}h` : `${Math.round(abs / 86400)}d`;
  return secs >= 0 ? `${span} ago` : `in ${span}`;
}

const pad = (n, w = 2) => String(n).padStart(w, "0");

// A time as the reader's clock shows it, to the second: `14:02:07` today,
// `2025-01-31 14:02:07` on another day. Relative times alone hide what
// matters (twelve rows all "4m ago" say nothing of the gaps between them).
function absolute(d) {
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const today = new Date();
  if (d.toDateString() === today.toDateString()) return clock;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock}`;
}

// A <time>: the absolute time, with the relative one and the exact UTC
// instant in its tooltip.
function time(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  return el("time", { datetime: ts, title: `${relative(d)} (${ts})` }, absolute(d));
}

// A duration in ms, short: `412 ms`, `3.2 s`, `4m 05s`, `2h 10m`.
function span(ms) {
  if (ms == null || Number.isNaN(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
}

// The time since the row before, for a timeline: retry gaps show.
function gapCell(ts, prev) {
  if (!ts || !prev) return el("td", { class: "num gap muted" }, "");
  const d = new Date(ts) - new Date(prev);
  return el("td", { class: "num gap" }, d >= 0 ? `+${span(d)}` : `−${span(-d)}`);
}

function table(headers, rows, empty = "Nothing yet.") {
  if (!rows.length) return el("p", { class: "muted empty" }, empty);
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, headers.map((h) => (h instanceof Node ? el("th", {}, h) : el("th", { class: h.endsWith("#") ? "num" : "" }, h.replace(/#$/, "")))))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c)))))),
  );
}
const num = (n) => el("td", { class: "num" }, n ?? "");

// ---------------------------------------------------------------- API

class AuthRequired extends Error {}

const token = () => sessionStorage.getItem(TOKEN_KEY);

async function api(method, path, body, project) {
  const headers = { Authorization: `Bearer ${token() || ""}`, Accept: "application/json" };
  if (project) headers["X-Project-Id"] = project;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    go("#/login");
    throw new AuthRequired("the API refused the token");
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = new Error((data && (data.detail || data.title)) || `HTTP ${res.status}`);
    err.status = res.status;
    err.retryAfter = Number(res.headers.get("retry-after")) || 0;
    throw err;
  }
  return data;
}

const qs = (params) => {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : "";
};

// ---------------------------------------------------------------- names

// Job and workflow names by id, for this page load: pages show a name where
// the API gives them an id. An id the API cannot name (a deleted job) is
// remembered as null, and shown as the id.
const names = new Map(); // "{project} {kind} {id}" -> name or null
const listed = new Set(); // "{project} {kind}": its first hundred were read
const named = (project, kind, id) => names.get(`${project} ${kind} ${id}`);
const remember = (project, kind, items) => {
  for (const x of items) names.set(`${project} ${kind} ${x.id}`, x.name);
};
const NAMED = { job: "/v1/jobs", workflow: "/v1/workflows" };

// Learns the names of `ids` (kind `job` or `workflow`) not known yet: one
// listing of the project's first hundred, then one read per id still
// missing (at most 20 a call, so a page of odd ids costs little).
async function learnNames(project, kind, ids) {
  const unknown = () => [...new Set(ids.filter((id) => id && named(project, kind, id) === undefined))];
  if (!unknown().length) return;
  const path = NAMED[kind];
  if (!listed.has(`${project} ${kind}`)) {
    listed.add(`${project} ${kind}`);
    remember(project, kind, (await api("GET", `${path}?limit=100`, undefined, project)).data);
  }
  await Promise.all(
    unknown().slice(0, 20).map(async (id) => {
      try {
        remember(project, kind, [await api("GET", `${path}/${encodeURIComponent(id)}`, undefined, project)]);
      } catch (e) {
        if (e instanceof AuthRequired) throw e;
        names.set(`${project} ${kind} ${id}`, null);
      }
    }),
  );
}

// A job by its name, linked to its runs; the id in the tooltip.
function jobRef(project, id) {
  const name = named(project, "job", id);
  const href = `#/p/${encodeURIComponent(project)}/runs?job=${encodeURIComponent(id)}`;
  return el("a", { href, title: id, class: "job-ref" }, name || short(id));
}

// A workflow by its name, linked to its page; the id in the tooltip.
function workflowRef(project, id) {
  const name = named(project, "workflow", id);
  const href = `#/p/${encodeURIComponent(project)}/workflows/${encodeURIComponent(id)}`;
  return el("a", { href, title: id, class: "workflow-ref" }, name || short(id));
}

// Who decided a step. A decision made with the internal secret and no
// X-Actor-Id is recorded as "the internal secret": an operator's.
const actorName = (a) => (a === "the internal secret" ? "operator (internal secret)" : a || "");

// Keyset paging over a list (`limit`, `cursor`, `has_more`, `next_cursor`):
// "Older" follows next_cursor, "Newer" goes back the way it came. The
// page polls the same window until the user moves; `changed` re-polls.
const PAGE_SIZE = 50;
function pager(changed) {
  const back = []; // the cursors of the pages before this one (undefined: the first)
  let cursor;
  let next;
  const newer = el("button", { type: "button", class: "secondary newer", disabled: true }, "← Newer");
  const older = el("button", { type: "button", class: "secondary older", disabled: true }, "Older →");
  const where = el("span", { class: "muted where" }, "");
  const nav = el("div", { class: "pager" }, newer, where, older);
  const sync = () => {
    newer.disabled = back.length === 0;
    older.disabled = !next;
    where.textContent = `page ${back.length + 1}`;
  };
  newer.addEventListener("click", () => {
    cursor = back.pop();
    next = undefined;
    sync();
    changed();
  });
  older.addEventListener("click", () => {
    if (!next) return;
    back.push(cursor);
    cursor = next;
    next = undefined;
    sync();
    changed();
  });
  return {
    nav,
    // The window's query parameters, to merge into a list's.
    params: () => ({ limit: PAGE_SIZE, cursor }),
    // Records what the answer says about the next page.
    seen(list) {
      next = list.has_more ? list.next_cursor : undefined;
      sync();
      return list.data;
    },
  };
}

// ---------------------------------------------------------------- live streams

// Splits a text/event-stream into events ({event, id, data}); comment
// lines (heartbeats) are skipped.
function sseEvents(block) {
  let event = "message", id = "", data = "", any = false;
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const i = line.indexOf(":");
    const k = i < 0 ? line : line.slice(0, i);
    const v = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    any = true;
    if (k === "event") event = v;
    else if (k === "id") id = v;
    else if (k === "data") data = data ? `${data}\n${v}` : v;
  }
  return any ? { event, id, data } : null;
}

// Runs `tick` now, then again whenever the live stream at `path` reports a
// change (at most once per `minMs`), until the page changes. The stream is
// read with fetch (EventSource cannot send the token) and opened again
// with Last-Event-ID when it breaks off; a stream's `end` (the run ended)
// leaves the page as it is. While the tab is hidden, changes are noted and
// drawn when it shows again.
function live(tick, path, project, minMs = 250) {
  const indicator = document.getElementById("live");
  let stopped = false, controller = null, lastId = null;
  let running = false, dirty = false, timer = null, lastDraw = 0, ended = false;
  const draw = async () => {
    if (stopped) return;
    if (running || document.hidden) {
      dirty = true;
      return;
    }
    const wait = lastDraw + minMs - Date.now();
    if (wait > 0) {
      dirty = true;
      clearTimeout(timer);
      timer = setTimeout(() => { if (dirty) { dirty = false; draw(); } }, wait);
      return;
    }
    running = true;
    dirty = false;
    lastDraw = Date.now();
    try {
      await tick();
      indicator.textContent = `${ended ? "ended" : "live"} · updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e instanceof AuthRequired) {
        stop();
        return;
      }
      indicator.textContent = `update failed: ${e.message}`;
    } finally {
      running = false;
    }
    if (dirty) draw();
  };
  const follow = async () => {
    let breaks = 0;
    while (!stopped && !ended) {
      controller = new AbortController();
      try {
        const headers = { Authorization: `Bearer ${token() || ""}`, Accept: "text/event-stream" };
        if (project) headers["X-Project-Id"] = project;
        if (lastId) headers["Last-Event-ID"] = lastId;
        const res = await fetch(path, { headers, cache: "no-store", credentials: "omit", signal: controller.signal });
        if (res.status === 401) {
          sessionStorage.removeItem(TOKEN_KEY);
          go("#/login");
          return;
        }
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          breaks = 0;
          buf += value.replace(/\r\n/g, "\n");
          let cut;
          while ((cut = buf.indexOf("\n\n")) >= 0) {
            const e = sseEvents(buf.slice(0, cut));
            buf = buf.slice(cut + 2);
            if (!e) continue;
            if (e.id) lastId = e.id;
            if (e.event === "end") ended = true;
            draw();
          }
          if (ended) return;
        }
      } catch (e) {
        if (stopped) return;
        indicator.textContent = `reconnecting: ${e.message}`;
      }
      breaks += 1;
      await new Promise((r) => setTimeout(r, Math.min(10000, 500 * breaks)));
    }
  };
  const onVisible = () => {
    if (!document.hidden && dirty) draw();
  };
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    controller?.abort();
    document.removeEventListener("visibilitychange", onVisible);
  };
  document.addEventListener("visibilitychange", onVisible);
  draw();
  follow();
  return { stop, now: () => { lastDraw = 0; draw(); } };
}

// ---------------------------------------------------------------- routing and polling

let page = null; // { stop() }

function go(hash) {
  if (location.hash !== hash) location.hash = hash;
  else route();
}

// Runs `tick` now and then every `everyMs` (at least 1 s) while the page is
// current and the tab visible; a 429 waits for its Retry-After.
function poll(tick, everyMs) {
  let timer = null;
  let stopped = false;
  let running = false;
  const live = document.getElementById("live");
  const run = async () => {
    if (stopped || running) return;
    clearTimeout(timer);
    if (document.hidden) return; // resumed by visibilitychange
    running = true;
    let wait = Math.max(1000, typeof everyMs === "function" ? everyMs() : everyMs);
    try {
      await tick();
      live.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e instanceof AuthRequired) {
        stopped = true;
        return;
      }
      if (e.status === 429) wait = Math.max(wait, (e.retryAfter || 5) * 1000);
      live.textContent = `update failed: ${e.message}`;
    } finally {
      running = false;
    }
    if (!stopped) timer = setTimeout(run, wait);
  };
  const onVisible = () => {
    if (!document.hidden) run();
  };
  document.addEventListener("visibilitychange", onVisible);
  run();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisible);
    },
    now: run,
  };
}

function setNav(project, active) {
  const nav = document.getElementById("nav");
  nav.replaceChildren();
  if (!token()) return;
  nav.append(link("#/projects", "Projects"));
  if (project) {
    const p = encodeURIComponent(project);
    for (const [key, label] of [
      ["jobs", "Jobs"],
      ["runs", "Runs"],
      ["queues", "Queues"],
      ["dead-letters", "Dead letters"],
      ["workflows", "Workflows"],
      ["deliveries", "Deliveries"],
    ]) {
      const a = link(`#/p/${p}/${key}`, label);
      if (key === active) a.className = "active";
      nav.append(a);
    }
  }
  document.getElementById("logout").hidden = false;
}

function route() {
  if (page) page.stop();
  page = null;
  document.getElementById("live").textContent = "";
  // A page's path, then its parameters (the runs list's filters).
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query);
  const main = document.getElementById("main");
  main.replaceChildren();
  if (!token() || parts[0] === "login") {
    document.getElementById("logout").hidden = true;
    setNav(null);
    return loginPage(main);
  }
  if (parts[0] === "p" && parts[1]) {
    const project = parts[1];
    sessionStorage.setItem(PROJECT_KEY, project);
    const [kind, id] = [parts[2] || "jobs", parts[3]];
    const section = { "workflow-runs": "workflows" }[kind] || kind;
    setNav(project, section);
    const pages = {
      jobs: jobsPage,
      runs: id ? runPage : runsPage,
      queues: queuesPage,
      "dead-letters": deadLettersPage,
      workflows: id ? workflowPage : workflowsPage,
      "workflow-runs": workflowRunPage,
      deliveries: deliveriesPage,
    };
    const fn = pages[kind];
    if (fn) return fn(main, project, id, params);
  }
  setNav(sessionStorage.getItem(PROJECT_KEY));
  return projectsPage(main);
}

function header(main, title, ...extra) {
  const h = el("h1", {}, title);
  const flash = el("div", { class: "flash", hidden: true, role: "status" });
  const body = el("div", { class: "content" });
  main.append(h, ...extra, flash, body);
  const say = (...msg) => {
    flash.replaceChildren();
    append(flash, msg);
    flash.hidden = false;
  };
  return { body, say };
}

function failed(body, e) {
  if (e instanceof AuthRequired) return;
  body.replaceChildren(el("p", { class: "error" }, `Could not load: ${e.message}`));
}

// ---------------------------------------------------------------- login

function loginPage(main) {
  const tokenInput = el("input", { type: "password", name: "token", autocomplete: "off", required: true });
  const projectInput = el("input", { type: "text", name: "project", placeholder: "only for an API key" });
  const err = el("p", { class: "error", role: "alert" });
  const form = el(
    "form",
    { id: "login" },
    el("label", {}, "API key or internal secret", tokenInput),
    el("label", {}, "Project id (optional)", projectInput),
    el("button", { type: "submit" }, "Log in"),
    err,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    sessionStorage.setItem(TOKEN_KEY, tokenInput.value.trim());
    const project = projectInput.value.trim();
    try {
      if (project) {
        await api("GET", `/v1/projects/${encodeURIComponent(project)}`, undefined, project);
        go(`#/p/${encodeURIComponent(project)}/jobs`);
      } else {
        await api("GET", "/v1/projects?limit=1");
        go("#/projects");
      }
    } catch (e) {
      if (e instanceof AuthRequired) {
        err.textContent = "The API refused this token.";
        return;
      }
      if (e.status === 403 && !project) {
        err.textContent = "This token cannot list projects (an API key): enter its project id too.";
        sessionStorage.removeItem(TOKEN_KEY);
        return;
      }
      sessionStorage.removeItem(TOKEN_KEY);
      err.textContent = e.message;
    }
  });
  main.append(
    el(
      "div",
      { class: "login" },
      el("h1", {}, "Log in to Switchyard"),
      el("p", { class: "muted" }, "The token stays in this tab (sessionStorage) and is sent only to this API."),
      form,
    ),
  );
  tokenInput.focus();
}

// ---------------------------------------------------------------- projects

function projectsPage(main) {
  const { body } = header(main, "Projects");
  const open = el("input", { name: "project", placeholder: "project id" });
  const form = el("form", { class: "inline" }, el("label", {}, "Open a project", open), el("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (open.value.trim()) go(`#/p/${encodeURIComponent(open.value.trim())}/jobs`);
  });
  main.append(form);
  const pages = pager(() => page?.now());
  page = poll(async () => {
    try {
      const data = pages.seen(await api("GET", `/v1/projects${qs(pages.params())}`));
      body.replaceChildren(
        table(
          ["Project", "Name", "Created"],
          data.map((p) => [link(`#/p/${encodeURIComponent(p.id)}/jobs`, p.id), p.name, time(p.created_at)]),
          "No projects yet.",
        ),
        pages.nav,
      );
    } catch (e) {
      if (e.status === 403) {
        const mine = sessionStorage.getItem(PROJECT_KEY);
        body.replaceChildren(
          el("p", { class: "muted" }, "This token sees one project only. "),
          mine ? link(`#/p/${encodeURIComponent(mine)}/jobs`, mine) : "",
        );
        return;
      }
      throw e;
    }
  }, 5000);
}

// ---------------------------------------------------------------- jobs

// Runs per minute over the last `minutes`, from the runs' created_at.
function sparkline(runs, minutes = 30) {
  const now = Date.now();
  const counts = new Array(minutes).fill(0);
  for (const r of runs) {
    const age = Math.floor((now - new Date(r.created_at).getTime()) / 60000);
    if (age >= 0 && age < minutes) counts[minutes - 1 - age] += 1;
  }
  const w = 120;
  const h = 24;
  const max = Math.max(1, ...counts);
  const pts = counts.map((c, i) => `${((i / (minutes - 1)) * w).toFixed(1)},${(h - 2 - (c / max) * (h - 4)).toFixed(1)}`);
  const total = counts.reduce((a, b) => a + b, 0);
  return svg(
    "svg",
    { class: "spark", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": `${total} runs in ${minutes} min` },
    svg("title", {}, `${total} runs in the last ${minutes} minutes (max ${max}/min)`),
    svg("line", { class: "base", x1: 0, y1: h - 2, x2: w, y2: h - 2 }),
    svg("polyline", { points: pts.join(" ") }),
  );
}

// A job's flow-control settings in a line: caps, fair queueing, rate
// limits, dedup, debounce, singleton, batching and cancel-on events (keys are the
// JMESPath they are read with).
function flowControl(j) {
  const parts = [];
  if (j.max_concurrency) parts.push(`at most ${j.max_concurrency} at once`);
  if (j.max_concurrency_per_key) parts.push(`at most ${j.max_concurrency_per_key} per key`);
  if (j.fairness === "round_robin") parts.push("keys in turn");
  if (j.rate_limit_max) parts.push(`${j.rate_limit_max} per ${j.rate_limit_window_secs} s`);
  for (const k of j.rate_limit_keys || []) parts.push(`${k.name}: ${k.max} per ${k.window_secs} s`);
  if (j.dedup_window_secs) parts.push(`dedup ${j.dedup_window_secs} s`);
  const by = (key) => (key ? ` by ${key}` : "");
  const d = j.debounce;
  if (d) parts.push(`debounce ${d.period_secs} s${d.max_wait_secs ? ` (at most ${d.max_wait_secs} s)` : ""}${by(d.key)}`);
  if (j.singleton) parts.push(`singleton${by(j.singleton.key)}, ${j.singleton.mode}`);
  const b = j.batch;
  if (b) parts.push(`batches of ${b.max_size} or ${b.timeout_secs} s${by(b.key)}`);
  for (const c of j.cancel_on || []) parts.push(`cancelled by ${c.event_key}${c.timeout_secs ? ` within ${c.timeout_secs} s` : ""}`);
  return parts.length ? el("span", { class: "flow" }, parts.join(" · ")) : el("span", { class: "muted" }, "none");
}

function jobsPage(main, project) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, `Jobs of ${project}`);
  const payload = el("textarea", { name: "payload", rows: 1, cols: 40 }, "{}");
  const name = el("input", { name: "name", placeholder: "name", required: true });
  const url = el("input", { name: "endpoint_url", placeholder: "https://…", required: true, size: 36 });
  const create = el(
    "form",
    { class: "inline", id: "create-job" },
    el("label", {}, "New job", name),
    el("label", {}, "Endpoint URL", url),
    el("button", { type: "submit" }, "Create job"),
  );
  create.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const job = await api("POST", "/v1/jobs", { name: name.value.trim(), endpoint_url: url.value.trim() }, project);
      say("Created job ", el("code", {}, job.slug));
      name.value = "";
      url.value = "";
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Create failed: ${e.message}`));
    }
  });
  main.insertBefore(el("div", {}, create, el("label", {}, "Payload of triggered runs (JSON)", payload)), body);

  const trigger = async (job) => {
    let body;
    try {
      body = { payload: JSON.parse(payload.value || "null") };
    } catch {
      say(el("span", { class: "error" }, "The payload is not JSON."));
      return;
    }
    try {
      const run = await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/trigger`, body, project);
      if (run.trigger_id) {
        const made = run.run_id ? [": the batch is full, run ", link(`#/p/${p}/runs/${encodeURIComponent(run.run_id)}`, run.run_id)] : [" (its run is made when the batch closes)"];
        say("Added to batch ", el("code", {}, run.batch_id), ` at position ${run.position}`, ...made);
        page?.now();
        return;
      }
      const runLink = link(`#/p/${p}/runs/${encodeURIComponent(run.id)}`, run.id);
      if (run.debounced) say("Debounced into ", runLink, ": it takes this payload and waits longer ", status(run.status));
      else if (run.skipped) say("Skipped: ", runLink, " of this key is unfinished ", status(run.status));
      else say("Triggered ", runLink, " of ", job.name, " ", status(run.status));
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Trigger failed: ${e.message}`));
    }
  };

  const setPaused = async (job, paused) => {
    const verb = paused ? "pause" : "resume";
    try {
      await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/${verb}`, undefined, project);
      say(paused ? "Paused " : "Resumed ", job.name, paused ? ": its runs wait until it is resumed." : ".");
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `${paused ? "Pause" : "Resume"} failed: ${e.message}`));
    }
  };

  const pages = pager(() => page?.now());
  page = live(async () => {
    try {
      const [jobs, runs] = await Promise.all([
        api("GET", `/v1/jobs${qs(pages.params())}`, undefined, project),
        api("GET", "/v1/runs?limit=100", undefined, project),
      ]);
      pages.seen(jobs);
      remember(project, "job", jobs.data);
      await learnNames(project, "job", runs.data.slice(0, 25).map((r) => r.job_id));
      const byJob = new Map();
      for (const r of runs.data) {
        if (!byJob.has(r.job_id)) byJob.set(r.job_id, []);
        byJob.get(r.job_id).push(r);
      }
      body.replaceChildren(
        table(
          ["Job", "Endpoint", "State", "Flow control", "Recent runs", "Runs/min (30 min)", ""],
          jobs.data.map((j) => {
            const mine = byJob.get(j.id) || [];
            return [
              el("span", {}, el("strong", {}, jobRef(project, j.id)), el("br"), el("code", { class: "muted" }, j.slug)),
              el("code", {}, j.endpoint_url),
              !j.enabled ? "disabled" : j.paused ? "paused" : "enabled",
              flowControl(j),
              el(
                "span",
                { class: "chips" },
                mine.slice(0, 8).map((r) => el("a", { href: `#/p/${p}/runs/${encodeURIComponent(r.id)}`, title: r.id }, status(r.status))),
              ),
              sparkline(mine),
              el(
                "span",
                { class: "actions" },
                el("button", { type: "button", class: "trigger", "data-job": j.slug, onclick: () => trigger(j) }, "Trigger"),
                el("button", { type: "button", class: `secondary ${j.paused ? "resume" : "pause"}`, "data-job": j.slug, onclick: () => setPaused(j, !j.paused) }, j.paused ? "Resume" : "Pause"),
              ),
            ];
          }),
          "No jobs yet: create one above, or with POST /v1/jobs.",
        ),
        pages.nav,
        el("h2", {}, "Recent runs ", el("a", { href: `#/p/${p}/runs`, class: "all-runs" }, "(all runs, with filters →)")),
        table(
          ["Run", "Job", "Status", "Attempt#", "Created", "Finished"],
          runs.data.slice(0, 25).map((r) => [
            link(`#/p/${p}/runs/${encodeURIComponent(r.id)}`, short(r.id)),
            jobRef(project, r.job_id),
            status(r.status),
            num(r.attempt),
            time(r.created_at),
            time(r.finished_at),
          ]),
          "No runs yet.",
        ),
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, "/v1/stream?kinds=run", project, 1000);
}

// ---------------------------------------------------------------- runs

const RUN_STATUSES = ["pending", "queued", "running", "retrying", "completed", "failed", "timed_out", "cancelled", "expired"];

// The runs list's filters, as its hash carries them (a filtered view is a
// link): status, job (an id), after and before (RFC 3339: created at or
// after, before), payload (a JSON document the payload contains).
const RUN_FILTERS = ["status", "job", "after", "before", "payload"];

// A datetime-local input's value (the reader's clock, to the second) for
// an RFC 3339 time.
function localInput(ts) {
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return "";
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// The filter form's values as hash parameters, or the first problem with
// them (said in the page: nothing is sent).
function runFilters(form) {
  const out = new URLSearchParams();
  const v = (name) => form.elements[name].value.trim();
  if (v("status")) out.set("status", v("status"));
  if (v("job")) out.set("job", v("job"));
  for (const k of ["after", "before"]) {
    if (!v(k)) continue;
    const d = new Date(v(k)); // a datetime-local value is the reader's clock
    if (Number.isNaN(d.getTime())) return { error: `"${k === "after" ? "Created after" : "Created before"}" is not a time.` };
    out.set(k, d.toISOString());
  }
  if (v("payload")) {
    try {
      JSON.parse(v("payload"));
    } catch (e) {
      return { error: `"Payload contains" is not JSON: ${e.message}` };
    }
    out.set("payload", v("payload"));
  }
  return { params: out };
}

// What a bulk cancel or replay did, item by item.
function bulkSummary(project, verb, results) {
  const ok = verb === "cancel" ? "cancelled" : "replayed";
  const done = results.filter((r) => r.status === ok);
  const not = results.filter((r) => r.status !== ok);
  const runLink = (id) => link(`#/p/${encodeURIComponent(project)}/runs/${encodeURIComponent(id)}`, short(id));
  return [
    `${verb === "cancel" ? "Cancelled" : "Replayed"} ${done.length} of ${results.length}`,
    verb === "replay" && done.length ? [" as ", done.map((r, i) => [i ? ", " : "", runLink(r.new_run_id)])] : "",
    not.length ? `; ${not.length} not:` : ".",
    not.length ? el("ul", { class: "failures" }, not.map((r) => el("li", {}, el("code", {}, short(r.run_id)), ` ${r.status}: ${r.error || ""}`))) : "",
  ];
}

function runsPage(main, project, _id, params) {
  const p = encodeURIComponent(project);
  const f = Object.fromEntries(RUN_FILTERS.map((k) => [k, params.get(k) || ""]));
  const { body, say } = header(main, `Runs of ${project}`);
  const jobSelect = el("select", { name: "job" }, el("option", { value: "" }, "any job"));
  const form = el(
    "form",
    { class: "inline filters", id: "run-filters" },
    el("label", {}, "Status", el("select", { name: "status" }, el("option", { value: "" }, "any status"), RUN_STATUSES.map((st) => el("option", { value: st, selected: st === f.status }, st)))),
    el("label", {}, "Job", jobSelect),
    el("label", {}, "Created after", el("input", { type: "datetime-local", name: "after", step: 1, value: f.after && localInput(f.after) })),
    el("label", {}, "Created before", el("input", { type: "datetime-local", name: "before", step: 1, value: f.before && localInput(f.before) })),
    el("label", {}, "Payload contains (JSON)", el("input", { name: "payload", size: 26, placeholder: '{"user": "42"}', value: f.payload })),
    el("button", { type: "submit" }, "Filter"),
    el("a", { href: `#/p/${p}/runs`, class: "clear" }, "Clear"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const { params: next, error } = runFilters(form);
    if (error) return say(el("span", { class: "error" }, error));
    const q = next.toString();
    go(`#/p/${p}/runs${q ? `?${q}` : ""}`);
  });
  // The job choices: the project's first hundred jobs, and the one the
  // hash names if it is not among them.
  api("GET", "/v1/jobs?limit=100", undefined, project)
    .then(async (jobs) => {
      remember(project, "job", jobs.data);
      await learnNames(project, "job", [f.job]);
      const ids = jobs.data.map((j) => j.id);
      if (f.job && !ids.includes(f.job)) ids.push(f.job);
      for (const id of ids) jobSelect.append(el("option", { value: id, selected: id === f.job }, named(project, "job", id) || id));
    })
    .catch((e) => {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Could not list jobs: ${e.message}`));
    });

  // The selection outlives redraws; bulk actions act on it.
  const selected = new Set();
  const count = el("span", { class: "muted selected-count" }, "");
  const cancelSelected = el("button", { type: "button", class: "secondary", id: "cancel-selected", disabled: true }, "Cancel selected");
  const replaySelected = el("button", { type: "button", class: "secondary", id: "replay-selected", disabled: true }, "Replay selected");
  const sync = () => {
    count.textContent = selected.size ? `${selected.size} selected` : "";
    cancelSelected.disabled = replaySelected.disabled = selected.size === 0;
  };
  const bulk = async (verb) => {
    const ids = [...selected];
    if (!ids.length) return;
    try {
      const out = await api("POST", `/v1/runs/bulk-${verb}`, { run_ids: ids }, project);
      say(...bulkSummary(project, verb, out.results));
      selected.clear();
      sync();
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Bulk ${verb} failed: ${e.message}`));
    }
  };
  cancelSelected.addEventListener("click", () => bulk("cancel"));
  replaySelected.addEventListener("click", () => bulk("replay"));
  main.insertBefore(el("div", {}, form, el("p", { class: "actions bulk" }, cancelSelected, replaySelected, count)), main.querySelector(".flash"));

  const pages = pager(() => page?.now());
  page = live(async () => {
    try {
      const query = { status: f.status, job_id: f.job, created_after: f.after, created_before: f.before, payload_contains: f.payload, ...pages.params() };
      const runs = await api("GET", `/v1/runs${qs(query)}`, undefined, project);
      const rows = pages.seen(runs);
      await learnNames(project, "job", rows.map((r) => r.job_id));
      const pick = (r) => {
        const box = el("input", { type: "checkbox", class: "pick", "data-run": r.id, "aria-label": `select ${r.id}`, checked: selected.has(r.id) });
        box.addEventListener("change", () => {
          if (box.checked) selected.add(r.id);
          else selected.delete(r.id);
          sync();
        });
        return box;
      };
      const all = el("input", { type: "checkbox", class: "pick-all", "aria-label": "select every run of this page", checked: rows.length > 0 && rows.every((r) => selected.has(r.id)) });
      all.addEventListener("change", () => {
        for (const r of rows) {
          if (all.checked) selected.add(r.id);
          else selected.delete(r.id);
        }
        body.querySelectorAll("input.pick").forEach((b) => (b.checked = all.checked));
        sync();
      });
      const took = (r) => (r.started_at && r.finished_at ? span(new Date(r.finished_at) - new Date(r.started_at)) : "");
      body.replaceChildren(
        table(
          [all, "Run", "Job", "Status", "Attempt#", "Created", "Started", "Finished", "Took#"],
          rows.map((r) => [
            pick(r),
            link(`#/p/${p}/runs/${encodeURIComponent(r.id)}`, short(r.id)),
            jobRef(project, r.job_id),
            status(r.status),
            num(r.attempt),
            time(r.created_at),
            time(r.started_at),
            time(r.finished_at),
            num(took(r)),
          ]),
          RUN_FILTERS.some((k) => f[k]) ? "No run matches these filters." : "No runs yet.",
        ),
        pages.nav,
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, "/v1/stream?kinds=run", project, 1000);
}

// ---------------------------------------------------------------- waterfalls

const ms = (ts) => new Date(ts).getTime();

// Bars on one time axis from t0 to t1 (ms), a row each: a label, segments
// ({from, to, class, title}) and a note. The bars are placed through the
// CSSOM (element.style), which the page's policy allows where a style
// attribute would not be.
function waterfall(rows, t0, t1, label) {
  const total = Math.max(1, t1 - t0);
  const pct = (t) => `${(((t - t0) / total) * 100).toFixed(3)}%`;
  const segment = (sg) => {
    const bar = el("span", { class: `wf-seg ${sg.class}`, title: sg.title || "" });
    bar.style.left = pct(sg.from);
    bar.style.width = pct(t0 + Math.max(0, sg.to - sg.from));
    return bar;
  };
  return el(
    "div",
    { class: "waterfall", role: "img", "aria-label": label },
    el("div", { class: "wf-axis muted" }, el("span", {}, absolute(new Date(t0))), el("span", {}, span(total)), el("span", {}, absolute(new Date(t1)))),
    rows.map((row) =>
      el(
        "div",
        { class: "wf-row", "data-row": row.key },
        el("span", { class: "wf-label", title: row.title || row.label }, row.label),
        el("span", { class: "wf-track" }, row.segments.map(segment)),
        el("span", { class: "wf-note muted" }, row.note || ""),
      ),
    ),
  );
}

// A run's attempts on its time line: before each, the wait (queued, or a
// retry's backoff), then the attempt coloured by what it ended in. An
// attempt under way reaches to now, as does the wait for the next one.
function attemptsWaterfall(r, events) {
  const rows = [];
  let prev = ms(r.created_at);
  const wait = (to) => ({ from: prev, to, class: "wait", title: `waited ${span(to - prev)}` });
  for (const a of events.filter((e) => e.type === "attempt")) {
    const end = ms(a.at);
    const start = a.started_at ? ms(a.started_at) : end - (a.duration_ms || 0);
    const outcome = a.outcome || "ended";
    rows.push({
      key: `attempt-${a.attempt}`,
      label: `attempt ${a.attempt}`,
      note: `${outcome} · ${span(end - start)}${start > prev ? ` after ${span(start - prev)}` : ""}`,
      segments: [wait(start), { from: start, to: end, class: `bar ${outcome}`, title: `${outcome}: ${absolute(new Date(start))} → ${absolute(new Date(end))} (${span(end - start)})` }],
    });
    prev = end;
  }
  const now = Date.now();
  if (r.status === "running") {
    const began = events.filter((e) => e.type === "transition" && e.to_status === "running").pop();
    const start = Math.max(prev, began ? ms(began.at) : ms(r.started_at || r.created_at));
    rows.push({ key: `attempt-${r.attempt}`, label: `attempt ${r.attempt}`, note: `running · ${span(now - start)}`, segments: [wait(start), { from: start, to: now, class: "bar running", title: "running" }] });
  } else if (!FINISHED.has(r.status)) {
    rows.push({ key: "next", label: rows.length ? "next attempt" : "attempt 1", note: r.status, segments: [wait(now)] });
  }
  if (!rows.length) return el("p", { class: "muted empty" }, "No attempt yet.");
  const end = Math.max(...rows.flatMap((row) => row.segments.map((sg) => sg.to)), r.finished_at ? ms(r.finished_at) : 0);
  return waterfall(rows, ms(r.created_at), end, "attempts waterfall");
}

// A workflow run's steps on its time line, in the order they started; a
// step under way reaches to now, one not started has no bar.
function stepsWaterfall(run, nodes) {
  const now = Date.now();
  const rows = nodes
    .map((n) => {
      if (!n.started_at) return { key: n.step_ref, label: n.step_ref, note: n.status, segments: [], at: Infinity };
      const [start, end] = [ms(n.started_at), n.finished_at ? ms(n.finished_at) : now];
      const title = `${n.step_ref} ${n.status}: ${absolute(new Date(start))} → ${n.finished_at ? absolute(new Date(end)) : "now"} (${span(end - start)})`;
      return { key: n.step_ref, label: n.step_ref, note: `${n.status} · ${span(end - start)}`, segments: [{ from: start, to: end, class: `bar ${n.status}`, title }], at: start };
    })
    .sort((a, b) => a.at - b.at);
  const ends = rows.flatMap((row) => row.segments.map((sg) => sg.to));
  if (!FINISHED.has(run.status)) ends.push(now);
  if (run.finished_at) ends.push(ms(run.finished_at));
  const t0 = ms(run.created_at);
  return waterfall(rows, t0, Math.max(t0 + 1, ...ends), "steps waterfall");
}

// ---------------------------------------------------------------- a run

const TRACE = [
  ["queue_wait_ms", "queue wait"],
  ["dequeue_ms", "dequeue"],
  ["connect_ms", "connect"],
  ["ttfb_ms", "time to first byte"],
  ["transfer_ms", "transfer"],
  ["dispatch_ms", "dispatch"],
];

function traceView(trace) {
  if (!trace) return el("p", { class: "muted empty" }, "No dispatch trace yet (the run has not been dispatched).");
  const total = Math.max(1, trace.total_ms || TRACE.reduce((a, [k]) => a + (trace[k] || 0), 0));
  const w = 600;
  let x = 0;
  const segs = [];
  TRACE.slice(0, 5).forEach(([k, label], i) => {
    const v = trace[k] || 0;
    const sw = (v / total) * w;
    if (sw > 0) segs.push(svg("rect", { class: `seg${i}`, x: x.toFixed(1), y: 0, width: Math.max(1, sw).toFixed(1), height: 18 }, svg("title", {}, `${label}: ${v} ms`)));
    x += sw;
  });
  return el(
    "div",
    {},
    svg("svg", { class: "bars", width: w, height: 18, viewBox: `0 0 ${w} 18`, role: "img", "aria-label": "dispatch trace" }, segs),
    el("div", { class: "legend" }, TRACE.slice(0, 5).map(([, label], i) => el("span", {}, svg("svg", { width: 10, height: 10, class: "bars" }, svg("rect", { class: `seg${i}`, width: 10, height: 10 })), ` ${label}`))),
    table(["Phase", "ms#"], [...TRACE, ["total_ms", "total"]].map(([k, label]) => [label, num(trace[k])])),
  );
}

function runPage(main, project, runId) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, `Run ${runId}`);
  let finished = false;
  let lastRun = null;
  const act = async (what, payload) => {
    try {
      const out = await api("POST", `/v1/runs/${encodeURIComponent(runId)}/${what}`, payload, project);
      if (what === "replay") say("Replayed as ", link(`#/p/${p}/runs/${encodeURIComponent(out.id)}`, out.id));
      else say(`Run ${what}led.`);
      page?.now();
      return true;
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `${what} failed: ${e.message}`));
      return false;
    }
  };
  // Replay with an edited payload: an editor outside the redrawn body (a
  // redraw keeps what is typed), filled with the run's payload when opened.
  // What is not JSON is said here and never sent.
  const edited = el("textarea", { id: "replay-payload", name: "payload", rows: 8, cols: 60, spellcheck: "false" });
  const editor = el(
    "form",
    { id: "replay-editor", class: "card editor", hidden: true },
    el("label", {}, "Payload of the new run (JSON; checked against the job's payload schema)", edited),
    el("p", { class: "actions" },
      el("button", { type: "submit", id: "replay-submit" }, "Replay with this payload"), " ",
      el("button", { type: "button", class: "secondary", onclick: () => (editor.hidden = true) }, "Close")),
  );
  const openEditor = () => {
    edited.value = JSON.stringify(lastRun?.payload ?? {}, null, 2);
    editor.hidden = false;
    edited.focus();
  };
  editor.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let payload;
    try {
      payload = JSON.parse(edited.value);
    } catch (e) {
      say(el("span", { class: "error" }, `The payload is not JSON: ${e.message}. Nothing was sent.`));
      return;
    }
    if (payload === null) {
      say(el("span", { class: "error" }, "A replay's payload cannot be null: Replay keeps the run's own. Nothing was sent."));
      return;
    }
    if (await act("replay", { payload })) editor.hidden = true;
  });
  main.insertBefore(editor, main.querySelector(".flash"));
  page = live(
    async () => {
      let b;
      try {
        b = await api("GET", `/v1/runs/${encodeURIComponent(runId)}/debug-bundle`, undefined, project);
      } catch (e) {
        failed(body, e);
        throw e;
      }
      const r = b.run;
      lastRun = r;
      finished = FINISHED.has(r.status);
      await learnNames(project, "job", [r.job_id]);
      const attempts = b.events.filter((e) => e.type === "attempt");
      const summary = el(
        "dl",
        { class: "kv" },
        el("dt", {}, "Status"), el("dd", { id: "run-status" }, status(r.status)),
        el("dt", {}, "Job"), el("dd", { id: "run-job" }, jobRef(project, r.job_id), ` v${r.job_version} `, el("code", { class: "muted" }, r.job_id)),
        el("dt", {}, "Attempt"), el("dd", {}, String(r.attempt)),
        el("dt", {}, "Triggered by"), el("dd", {}, r.triggered_by),
        el("dt", {}, "Created"), el("dd", {}, time(r.created_at)),
        el("dt", {}, "Started"), el("dd", {}, time(r.started_at)),
        el("dt", {}, "Finished"), el("dd", {}, time(r.finished_at)),
        el("dt", {}, "Trace"), el("dd", {}, el("code", { id: "trace-id" }, r.trace_id || "")),
        r.progress != null ? [el("dt", {}, "Progress"), el("dd", {}, `${Math.round(r.progress * 100)}% ${r.progress_message || ""}`)] : null,
        r.error ? [el("dt", {}, "Error"), el("dd", { class: "error" }, `${r.error_class || ""} ${r.error}`)] : null,
        r.continuation_of ? [el("dt", {}, "Replay of"), el("dd", {}, link(`#/p/${p}/runs/${encodeURIComponent(r.continuation_of)}`, r.continuation_of))] : null,
      );
      body.replaceChildren(
        el(
          "div",
          { class: "row" },
          el("div", { class: "card" }, summary, el("p", {},
            !finished ? el("button", { type: "button", class: "secondary", onclick: () => act("cancel") }, "Cancel") : null, " ",
            el("button", { type: "button", class: "secondary", id: "replay", onclick: () => act("replay") }, "Replay"), " ",
            el("button", { type: "button", class: "secondary", id: "replay-edit", onclick: openEditor }, "Replay with edits"))),
          el("div", { class: "card" }, el("h2", {}, "Payload"), json(r.payload)),
          el("div", { class: "card" }, el("h2", {}, "Result"), json(r.result)),
        ),
        el("h2", {}, "Dispatch trace"),
        traceView(r.execution_trace),
        el("h2", {}, `Attempts (${attempts.length})`),
        attemptsWaterfall(r, b.events),
        table(
          ["Attempt#", "Outcome", "HTTP#", "Duration ms#", "Endpoint", "Error", "Started", "Ended"],
          attempts.map((a) => [num(a.attempt), a.outcome || "", num(a.status_code), num(a.duration_ms), el("code", {}, a.endpoint_url || ""), a.error || "", time(a.started_at), time(a.at)]),
          "No attempt has finished yet.",
        ),
        el("h2", {}, "Timeline"),
        table(
          ["At", "Since previous#", "Type", "Attempt#", "Change", "Reason"],
          b.events.map((e, i) => [
            time(e.at),
            gapCell(e.at, b.events[i - 1]?.at),
            e.type,
            num(e.attempt),
            e.type === "transition" ? [e.from_status ? status(e.from_status) : "", " → ", status(e.to_status)] : e.outcome || "",
            e.reason || e.error || "",
          ]),
          "No events yet.",
        ),
        el("h2", {}, `Logs (${b.logs.length})`),
        b.logs.length
          ? el("pre", { id: "logs" }, b.logs.map((l) => `${l.timestamp} #${l.attempt} ${String(l.level).toUpperCase()} ${l.message}${l.fields && Object.keys(l.fields).length ? " " + JSON.stringify(l.fields) : ""}\n`).join(""))
          : el("p", { class: "muted empty" }, "No log lines."),
        el("h2", {}, "Outputs"),
        table(["Name", "Attempt#", "Data", "At"], b.outputs.map((o) => [o.name, num(o.attempt), json(o.data), time(o.created_at)]), "No outputs."),
        el("h2", {}, "Checkpoints"),
        table(["Label", "Attempt#", "Data", "At"], b.checkpoints.map((c) => [c.label || "", num(c.attempt), json(c.data), time(c.created_at)]), "No checkpoints."),
        el("h2", {}, "State"),
        Object.keys(b.state || {}).length ? json(b.state) : el("p", { class: "muted empty" }, "The state store is empty."),
        el("h2", {}, "Usage"),
        json(b.usage_totals),
      );
    },
    `/v1/runs/${encodeURIComponent(runId)}/stream`,
    project,
  );
}

// ---------------------------------------------------------------- queues

function historyChart(history) {
  const w = 240;
  const h = 40;
  if (!history || !history.length) return el("span", { class: "muted" }, "no history");
  const max = Math.max(1, ...history.map((m) => Math.max(m.ended, m.queued + m.pending)));
  const bw = w / history.length;
  const bars = history.flatMap((m, i) => {
    const x = i * bw;
    const ch = (m.completed / max) * (h - 2);
    const fh = (m.failed / max) * (h - 2);
    return [
      svg("rect", { class: "completed", x: x.toFixed(1), y: (h - ch).toFixed(1), width: Math.max(1, bw - 1).toFixed(1), height: ch.toFixed(1) }, svg("title", {}, `${m.minute}: ${m.completed} completed`)),
      svg("rect", { class: "failed", x: x.toFixed(1), y: (h - ch - fh).toFixed(1), width: Math.max(1, bw - 1).toFixed(1), height: fh.toFixed(1) }, svg("title", {}, `${m.minute}: ${m.failed} failed`)),
    ];
  });
  const line = history.map((m, i) => `${(i * bw + bw / 2).toFixed(1)},${(h - ((m.queued + m.pending) / max) * (h - 2)).toFixed(1)}`).join(" ");
  return svg("svg", { class: "hist", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": "per-minute history" }, bars, svg("polyline", { class: "queued", points: line }));
}

function queuesPage(main, project) {
  const { body } = header(
    main,
    `Queues of ${project}`,
    el("p", { class: "legend muted" }, "History per minute: bars are runs ended (green completed, red failed); the line is runs waiting (queued + pending)."),
  );
  page = poll(async () => {
    try {
      const s = await api("GET", "/v1/stats/queues", undefined, project);
      body.replaceChildren(
        el("p", { class: "muted" }, "Generated ", time(s.generated_at), s.history_through ? [", history through ", time(s.history_through)] : "", "."),
        table(
          ["Job", "Ready#", "Scheduled#", "Throttled#", "Parked#", "Leased#", "Pending#", "Queued#", "Running#", "Retrying#", "Oldest queued s#", "History"],
          s.jobs.map((j) => [
            el("span", {}, j.name, el("br"), el("code", { class: "muted" }, j.slug)),
            num(j.ready), num(j.scheduled), num(j.throttled), num(j.parked), num(j.leased),
            num(j.pending), num(j.queued), num(j.running), num(j.retrying), num(j.oldest_queued_age_secs),
            historyChart(j.history),
          ]),
          "No jobs.",
        ),
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, 2000);
}

// ---------------------------------------------------------------- dead letters

function deadLettersPage(main, project) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, `Dead letters of ${project}`, el("p", { class: "muted" }, "Failed and timed-out runs whose attempts are exhausted and that were not replayed."));
  const replay = async (r) => {
    try {
      const out = await api("POST", `/v1/runs/${encodeURIComponent(r.id)}/replay`, undefined, project);
      say("Replayed ", el("code", {}, short(r.id)), " as ", link(`#/p/${p}/runs/${encodeURIComponent(out.id)}`, out.id), " ", status(out.status));
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Replay failed: ${e.message}`));
    }
  };
  const pages = pager(() => page?.now());
  page = live(async () => {
    try {
      const d = await api("GET", `/v1/runs/dead-letters${qs(pages.params())}`, undefined, project);
      await learnNames(project, "job", d.data.map((r) => r.job_id));
      body.replaceChildren(
        table(
          ["Run", "Job", "Status", "Attempt#", "Error", "Finished", ""],
          pages.seen(d).map((r) => [
            link(`#/p/${p}/runs/${encodeURIComponent(r.id)}`, short(r.id)),
            jobRef(project, r.job_id),
            status(r.status),
            num(r.attempt),
            [r.error_class ? el("code", {}, r.error_class) : "", " ", r.error || ""],
            time(r.finished_at),
            el("button", { type: "button", class: "replay", onclick: () => replay(r) }, "Replay"),
          ]),
          "The dead-letter queue is empty.",
        ),
        pages.nav,
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, "/v1/stream?kinds=run", project, 1000);
}

// ---------------------------------------------------------------- workflows

// A layered drawing of a DAG: a node's column is its longest path from a
// root; edges go from a dependency to the step that waits for it.
function dag(nodes, statusOf) {
  const byRef = new Map(nodes.map((n) => [n.step_ref, n]));
  const level = new Map();
  const depth = (ref, seen = new Set()) => {
    if (level.has(ref)) return level.get(ref);
    if (seen.has(ref)) return 0;
    seen.add(ref);
    const deps = (byRef.get(ref)?.depends_on || []).filter((d) => byRef.has(d));
    const l = deps.length ? 1 + Math.max(...deps.map((d) => depth(d, seen))) : 0;
    level.set(ref, l);
    return l;
  };
  nodes.forEach((n) => depth(n.step_ref));
  const cols = [];
  for (const n of nodes) (cols[level.get(n.step_ref)] ||= []).push(n);
  const [nw, nh, gx, gy] = [140, 34, 60, 18];
  const pos = new Map();
  cols.forEach((col, c) => col.forEach((n, r) => pos.set(n.step_ref, { x: 10 + c * (nw + gx), y: 10 + r * (nh + gy) })));
  const width = 20 + cols.length * (nw + gx) - gx;
  const height = 20 + Math.max(1, ...cols.map((c) => c.length)) * (nh + gy) - gy;
  const edges = [];
  for (const n of nodes) {
    for (const d of n.depends_on || []) {
      const a = pos.get(d);
      const b = pos.get(n.step_ref);
      if (!a || !b) continue;
      const [x1, y1, x2, y2] = [a.x + nw, a.y + nh / 2, b.x, b.y + nh / 2];
      const mx = (x1 + x2) / 2;
      edges.push(svg("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 6},${y2}`, "marker-end": "url(#arrow)" }));
    }
  }
  const boxes = nodes.map((n) => {
    const { x, y } = pos.get(n.step_ref);
    const st = statusOf ? statusOf(n) : null;
    const label = n.step_ref.length > 18 ? `${n.step_ref.slice(0, 17)}…` : n.step_ref;
    return svg(
      "g",
      { class: `node ${st || ""}`, "data-step": n.step_ref, "data-status": st || "" },
      svg("title", {}, `${n.step_ref} (${n.step_type || "job"})${st ? `: ${st}` : ""}`),
      svg("rect", { x, y, width: nw, height: nh, rx: 5 }),
      svg("text", { x: x + 8, y: y + 14 }, label),
      svg("text", { x: x + 8, y: y + 28, class: "sub" }, st || n.step_type || "job"),
    );
  });
  return svg(
    "svg",
    { class: "dag", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "workflow DAG" },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 4, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" }, svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa3af" }))),
    edges,
    boxes,
  );
}

function workflowsPage(main, project) {
  const p = encodeURIComponent(project);
  const { body } = header(main, `Workflows of ${project}`);
  const pages = pager(() => page?.now());
  page = poll(async () => {
    try {
      const [wfs, runs] = await Promise.all([
        api("GET", `/v1/workflows${qs(pages.params())}`, undefined, project),
        api("GET", "/v1/workflow-runs?limit=25", undefined, project),
      ]);
      remember(project, "workflow", wfs.data);
      await learnNames(project, "workflow", runs.data.map((r) => r.workflow_id));
      body.replaceChildren(
        table(
          ["Workflow", "Version#", "Steps#", "Enabled", "Updated"],
          pages.seen(wfs).map((w) => [link(`#/p/${p}/workflows/${encodeURIComponent(w.id)}`, w.name), num(w.version), num(w.steps.length), w.enabled ? "yes" : "no", time(w.updated_at)]),
          "No workflows yet.",
        ),
        pages.nav,
        el("h2", {}, "Recent workflow runs"),
        table(
          ["Run", "Workflow", "Status", "Created", "Finished"],
          runs.data.map((r) => [link(`#/p/${p}/workflow-runs/${encodeURIComponent(r.id)}`, short(r.id)), workflowRef(project, r.workflow_id), status(r.status), time(r.created_at), time(r.finished_at)]),
          "No workflow runs yet.",
        ),
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, 5000);
}

function workflowPage(main, project, id) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, "Workflow");
  // Left empty, the run has no payload (as before the box existed).
  const payload = el("textarea", { id: "workflow-payload", name: "payload", rows: 3, cols: 50, spellcheck: "false", placeholder: '{"region": "eu"}' });
  const trigger = async () => {
    // The run's input, checked as JSON here: what is not JSON is not sent.
    let input;
    try {
      input = JSON.parse(payload.value.trim() || "null");
    } catch (e) {
      say(el("span", { class: "error" }, `The payload is not JSON: ${e.message}. Nothing was sent.`));
      return;
    }
    try {
      const run = await api("POST", `/v1/workflows/${encodeURIComponent(id)}/trigger`, input === null ? {} : { payload: input }, project);
      say("Triggered ", link(`#/p/${p}/workflow-runs/${encodeURIComponent(run.id)}`, run.id), " ", status(run.status));
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Trigger failed: ${e.message}`));
    }
  };
  main.insertBefore(
    el("div", { class: "trigger-box" }, el("label", {}, "Payload of the run (JSON)", payload), el("p", {}, el("button", { type: "button", id: "trigger-workflow", onclick: trigger }, "Trigger workflow"))),
    main.querySelector(".flash"),
  );
  page = live(async () => {
    try {
      const [w, runs] = await Promise.all([
        api("GET", `/v1/workflows/${encodeURIComponent(id)}`, undefined, project),
        api("GET", `/v1/workflow-runs${qs({ workflow_id: id, limit: 25 })}`, undefined, project),
      ]);
      main.querySelector("h1").textContent = `Workflow ${w.name} (v${w.version})`;
      body.replaceChildren(
        el("p", { class: "muted" }, w.description || ""),
        dag(w.steps),
        el("h2", {}, "Steps"),
        table(["Step", "Type", "Depends on", "On failure"], w.steps.map((s) => [el("code", {}, s.step_ref), s.step_type || "job", (s.depends_on || []).join(", "), s.on_failure])),
        el("h2", {}, "Runs"),
        table(
          ["Run", "Status", "Version#", "Created", "Finished"],
          runs.data.map((r) => [link(`#/p/${p}/workflow-runs/${encodeURIComponent(r.id)}`, short(r.id)), status(r.status), num(r.version), time(r.created_at), time(r.finished_at)]),
          "No runs yet.",
        ),
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, `/v1/stream${qs({ kinds: "workflow_run", workflow_id: id })}`, project, 1000);
}

// A step's decision: what, by whom, when, and the comment given with it.
function decision(s) {
  if (!s.decision) return "";
  return el(
    "span",
    { class: "decision", "data-step": s.step_ref },
    `${s.decision} by `,
    el("span", { class: "decided-by", title: s.decided_by || "" }, actorName(s.decided_by)),
    s.decided_at ? [" at ", time(s.decided_at)] : "",
    s.decision_comment ? el("q", { class: "decision-comment" }, s.decision_comment) : "",
  );
}

function workflowRunPage(main, project, id) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, `Workflow run ${id}`);
  const run = `/v1/workflow-runs/${encodeURIComponent(id)}`;
  let ended = false;
  // The run's status in the message of the last action: each redraw sets
  // it, so the message follows the run (an approval's answer says
  // `running`; the run goes on to complete) instead of keeping the answer's.
  let actedStatus = null;
  // A run-level action (cancel, pause, resume) or a step's (approve,
  // reject, skip, retry); the API says whether it applies (409 otherwise).
  const act = async (path, what, body) => {
    try {
      const r = await api("POST", `${run}${path}`, body, project);
      actedStatus = el("span", { class: "acted-status" }, status(r?.status || ""));
      say(what, " done; the run is ", actedStatus);
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `${what} failed: ${e.message}`));
    }
  };
  // A comment box per waiting step, kept across redraws (so is its text).
  const comments = new Map();
  const commentBox = (n) => {
    if (!comments.has(n.step_ref)) {
      comments.set(n.step_ref, el("input", { class: "comment", name: "comment", "data-step": n.step_ref, placeholder: "comment (optional)", maxlength: 2000, size: 22 }));
    }
    return comments.get(n.step_ref);
  };
  const decide = (n, verb, label) =>
    el(
      "button",
      {
        type: "button",
        class: `secondary ${verb}`,
        "data-step": n.step_ref,
        onclick: () => {
          const comment = comments.get(n.step_ref)?.value.trim();
          act(`/steps/${encodeURIComponent(n.step_ref)}/${verb}`, `${label} ${n.step_ref}`, comment ? { comment } : {});
        },
      },
      label,
    );
  const stepActions = (n) => {
    const gate = n.step_type === "approval" || n.step_type === "cost_gate";
    if (n.status === "waiting") return [commentBox(n), " ", ...(gate ? [decide(n, "approve", "Approve"), " ", decide(n, "reject", "Reject"), " "] : []), decide(n, "skip", "Skip")];
    if (["failed", "timed_out", "cancelled"].includes(n.status)) return decide(n, "retry", "Retry");
    return "";
  };
  const controls = el(
    "p",
    { class: "actions" },
    el("button", { type: "button", class: "secondary", id: "pause-workflow-run", onclick: () => act("/pause", "Pause") }, "Pause"),
    " ",
    el("button", { type: "button", class: "secondary", id: "resume-workflow-run", onclick: () => act("/resume", "Resume") }, "Resume"),
    " ",
    el("button", { type: "button", class: "secondary", id: "cancel-workflow-run", onclick: () => act("/cancel", "Cancel") }, "Cancel run"),
  );
  main.insertBefore(controls, body);
  page = live(
    async () => {
      try {
        const [r, g] = await Promise.all([
          api("GET", `/v1/workflow-runs/${encodeURIComponent(id)}`, undefined, project),
          api("GET", `/v1/workflow-runs/${encodeURIComponent(id)}/graph`, undefined, project),
        ]);
        ended = ["completed", "failed", "cancelled", "timed_out"].includes(r.status);
        actedStatus?.replaceChildren(status(r.status));
        await learnNames(project, "workflow", [r.workflow_id]);
        document.getElementById("pause-workflow-run").disabled = ended || r.status === "paused";
        document.getElementById("resume-workflow-run").disabled = r.status !== "paused";
        document.getElementById("cancel-workflow-run").disabled = ended;
        const steps = new Map((r.steps || []).map((s) => [s.step_ref, s]));
        body.replaceChildren(
          el(
            "dl",
            { class: "kv card" },
            el("dt", {}, "Status"), el("dd", { id: "workflow-run-status" }, status(r.status)),
            el("dt", {}, "Workflow"), el("dd", { id: "workflow-run-workflow" }, workflowRef(project, r.workflow_id), ` v${r.version} `, el("code", { class: "muted" }, r.workflow_id)),
            el("dt", {}, "Created"), el("dd", {}, time(r.created_at)),
            el("dt", {}, "Finished"), el("dd", {}, time(r.finished_at)),
            el("dt", {}, "Trace"), el("dd", {}, el("code", {}, r.trace_id || "")),
            r.error ? [el("dt", {}, "Error"), el("dd", { class: "error" }, r.error)] : null,
          ),
          el("h2", {}, "Steps"),
          dag(g.nodes, (n) => n.status),
          g.critical_path?.step_refs?.length ? el("p", { class: "muted" }, `Critical path: ${g.critical_path.step_refs.join(" → ")} (~${Math.round(g.critical_path.estimated_duration_secs)} s)`) : null,
          el("h2", {}, "Waterfall"),
          stepsWaterfall(r, g.nodes),
          el("h2", {}, "Step runs"),
          table(
            ["Step", "Type", "Status", "Attempt#", "Job run", "Started", "Finished", "Decision", "Error", ""],
            g.nodes.map((n) => {
              const s = steps.get(n.step_ref) || {};
              return [
                el("code", {}, n.step_ref),
                n.step_type,
                status(n.status),
                num(n.attempt),
                n.job_run_id ? link(`#/p/${p}/runs/${encodeURIComponent(n.job_run_id)}`, short(n.job_run_id)) : "",
                time(n.started_at),
                time(n.finished_at),
                decision(s),
                s.error || "",
                stepActions(n),
              ];
            }),
          ),
          el("h2", {}, "Payload"),
          json(r.payload),
          el("h2", {}, "Output"),
          json(r.output),
        );
      } catch (e) {
        failed(body, e);
        throw e;
      }
    },
    `/v1/workflow-runs/${encodeURIComponent(id)}/stream`,
    project,
  );
}

// ---------------------------------------------------------------- deliveries

function deliveriesPage(main, project) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, `Webhook deliveries of ${project}`);
  const retry = async (d) => {
    try {
      const out = await api("POST", `/v1/webhook-deliveries/${encodeURIComponent(d.id)}/retry`, undefined, project);
      say("Retrying delivery ", el("code", {}, short(d.id)), " ", status(out?.status || "pending"));
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Retry failed: ${e.message}`));
    }
  };
  const pages = pager(() => page?.now());
  page = poll(async () => {
    try {
      const d = await api("GET", `/v1/webhook-deliveries${qs(pages.params())}`, undefined, project);
      body.replaceChildren(
        table(
          ["Delivery", "Kind", "Event", "URL", "Status", "Attempts#", "Last answer", "Next retry", "Run", ""],
          pages.seen(d).map((x) => [
            el("code", { title: x.id }, short(x.id)),
            x.kind,
            x.event_type,
            el("code", {}, x.url),
            status(x.status),
            num(`${x.attempts}/${x.max_attempts}`),
            [x.last_status_code ? `HTTP ${x.last_status_code} ` : "", x.last_error || ""],
            time(x.next_retry_at),
            x.run_id ? link(`#/p/${p}/runs/${encodeURIComponent(x.run_id)}`, short(x.run_id)) : "",
            x.status === "failed" ? el("button", { type: "button", class: "retry", onclick: () => retry(x) }, "Retry") : "",
          ]),
          "No deliveries.",
        ),
        pages.nav,
      );
    } catch (e) {
      failed(body, e);
      throw e;
    }
  }, 3000);
}

// ---------------------------------------------------------------- start

document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(PROJECT_KEY);
  go("#/login");
});
window.addEventListener("hashchange", route);
route();
