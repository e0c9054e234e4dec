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
//   #/p/{project}/runs/{run}         a run: attempts, timeline, logs, outputs,
//                                    checkpoints, state, dispatch trace
//   #/p/{project}/queues             queue statistics with per-minute history
//   #/p/{project}/dead-letters       dead-letter runs, with replay
//   #/p/{project}/workflows          workflows
//   #/p/{project}/workflows/{id}     a workflow's DAG, trigger, its runs
//   #/p/{project}/workflow-runs/{id} a workflow run: each step's status on the DAG;
//                                    cancel, pause, resume; approve, reject,
//                                    skip a waiting step, retry a failed one
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

function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  const secs = Math.round((Date.now() - d.getTime()) / 1000);
  const abs = Math.abs(secs);
  const span = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : abs < 172800 ? `${Math.round(abs / 3600)}h` : null;
  if (!span) return d.toISOString().slice(0, 19).replace("T", " ");
  return secs >= 0 ? `${span} ago` : `in ${span}`;
}
const time = (ts) => el("time", { datetime: ts || "", title: ts || "" }, when(ts));

function table(headers, rows, empty = "Nothing yet.") {
  if (!rows.length) return el("p", { class: "muted empty" }, empty);
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.endsWith("#") ? "num" : "" }, h.replace(/#$/, ""))))),
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
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
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
    const section = { runs: "jobs", "workflow-runs": "workflows" }[kind] || kind;
    setNav(project, section);
    const pages = {
      jobs: jobsPage,
      runs: runPage,
      queues: queuesPage,
      "dead-letters": deadLettersPage,
      workflows: id ? workflowPage : workflowsPage,
      "workflow-runs": workflowRunPage,
      deliveries: deliveriesPage,
    };
    const fn = pages[kind];
    if (fn) return fn(main, project, id);
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
      const byJob = new Map();
      for (const r of runs.data) {
        if (!byJob.has(r.job_id)) byJob.set(r.job_id, []);
        byJob.get(r.job_id).push(r);
      }
      const jobName = new Map(jobs.data.map((j) => [j.id, j.name]));
      body.replaceChildren(
        table(
          ["Job", "Endpoint", "State", "Flow control", "Recent runs", "Runs/min (30 min)", ""],
          jobs.data.map((j) => {
            const mine = byJob.get(j.id) || [];
            return [
              el("span", {}, el("strong", {}, j.name), el("br"), el("code", { class: "muted" }, j.slug)),
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
        el("h2", {}, "Recent runs"),
        table(
          ["Run", "Job", "Status", "Attempt#", "Created", "Finished"],
          runs.data.slice(0, 25).map((r) => [
            link(`#/p/${p}/runs/${encodeURIComponent(r.id)}`, short(r.id)),
            jobName.get(r.job_id) || short(r.job_id),
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
  let lastStatus = null;
  const act = async (what) => {
    try {
      const out = await api("POST", `/v1/runs/${encodeURIComponent(runId)}/${what}`, undefined, project);
      if (what === "replay") say("Replayed as ", link(`#/p/${p}/runs/${encodeURIComponent(out.id)}`, out.id));
      else say(`Run ${what}led.`);
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `${what} failed: ${e.message}`));
    }
  };
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
      finished = FINISHED.has(r.status);
      if (lastStatus !== r.status) lastStatus = r.status;
      const attempts = b.events.filter((e) => e.type === "attempt");
      const summary = el(
        "dl",
        { class: "kv" },
        el("dt", {}, "Status"), el("dd", { id: "run-status" }, status(r.status)),
        el("dt", {}, "Job"), el("dd", {}, el("code", {}, r.job_id), ` v${r.job_version}`),
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
            el("button", { type: "button", class: "secondary", onclick: () => act("replay") }, "Replay"))),
          el("div", { class: "card" }, el("h2", {}, "Payload"), json(r.payload)),
          el("div", { class: "card" }, el("h2", {}, "Result"), json(r.result)),
        ),
        el("h2", {}, "Dispatch trace"),
        traceView(r.execution_trace),
        el("h2", {}, `Attempts (${attempts.length})`),
        table(
          ["Attempt#", "Outcome", "HTTP#", "Duration ms#", "Endpoint", "Error", "At"],
          attempts.map((a) => [num(a.attempt), a.outcome || "", num(a.status_code), num(a.duration_ms), el("code", {}, a.endpoint_url || ""), a.error || "", time(a.at)]),
          "No attempt has finished yet.",
        ),
        el("h2", {}, "Timeline"),
        table(
          ["At", "Type", "Attempt#", "Change", "Reason"],
          b.events.map((e) => [
            time(e.at),
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
        el("p", { class: "muted" }, `Generated ${s.generated_at}${s.history_through ? `, history through ${s.history_through}` : ""}.`),
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
      const [d, jobs] = await Promise.all([
        api("GET", `/v1/runs/dead-letters${qs(pages.params())}`, undefined, project),
        api("GET", "/v1/jobs?limit=100", undefined, project),
      ]);
      const jobName = new Map(jobs.data.map((j) => [j.id, j.name]));
      body.replaceChildren(
        table(
          ["Run", "Job", "Status", "Attempt#", "Error", "Finished", ""],
          pages.seen(d).map((r) => [
            link(`#/p/${p}/runs/${encodeURIComponent(r.id)}`, short(r.id)),
            jobName.get(r.job_id) || el("code", {}, short(r.job_id)),
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
      const names = new Map(wfs.data.map((w) => [w.id, w.name]));
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
          runs.data.map((r) => [link(`#/p/${p}/workflow-runs/${encodeURIComponent(r.id)}`, short(r.id)), names.get(r.workflow_id) || short(r.workflow_id), status(r.status), time(r.created_at), time(r.finished_at)]),
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
  const trigger = async () => {
    try {
      const run = await api("POST", `/v1/workflows/${encodeURIComponent(id)}/trigger`, {}, project);
      say("Triggered ", link(`#/p/${p}/workflow-runs/${encodeURIComponent(run.id)}`, run.id), " ", status(run.status));
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `Trigger failed: ${e.message}`));
    }
  };
  main.insertBefore(el("p", {}, el("button", { type: "button", id: "trigger-workflow", onclick: trigger }, "Trigger workflow")), body);
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

function workflowRunPage(main, project, id) {
  const p = encodeURIComponent(project);
  const { body, say } = header(main, `Workflow run ${id}`);
  const run = `/v1/workflow-runs/${encodeURIComponent(id)}`;
  let ended = false;
  // A run-level action (cancel, pause, resume) or a step's (approve,
  // reject, skip, retry); the API says whether it applies (409 otherwise).
  const act = async (path, what, body) => {
    try {
      const r = await api("POST", `${run}${path}`, body, project);
      say(what, " ", status(r?.status || ""));
      page?.now();
    } catch (e) {
      if (!(e instanceof AuthRequired)) say(el("span", { class: "error" }, `${what} failed: ${e.message}`));
    }
  };
  const decide = (n, verb, label) =>
    el(
      "button",
      { type: "button", class: `secondary ${verb}`, "data-step": n.step_ref, onclick: () => act(`/steps/${encodeURIComponent(n.step_ref)}/${verb}`, `${label} ${n.step_ref}:`, {}) },
      label,
    );
  const stepActions = (n) => {
    const gate = n.step_type === "approval" || n.step_type === "cost_gate";
    if (n.status === "waiting") return [...(gate ? [decide(n, "approve", "Approve"), " ", decide(n, "reject", "Reject"), " "] : []), decide(n, "skip", "Skip")];
    if (["failed", "timed_out", "cancelled"].includes(n.status)) return decide(n, "retry", "Retry");
    return "";
  };
  const controls = el(
    "p",
    { class: "actions" },
    el("button", { type: "button", class: "secondary", id: "pause-workflow-run", onclick: () => act("/pause", "Paused:") }, "Pause"),
    " ",
    el("button", { type: "button", class: "secondary", id: "resume-workflow-run", onclick: () => act("/resume", "Resumed:") }, "Resume"),
    " ",
    el("button", { type: "button", class: "secondary", id: "cancel-workflow-run", onclick: () => act("/cancel", "Cancelled:") }, "Cancel run"),
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
        document.getElementById("pause-workflow-run").disabled = ended || r.status === "paused";
        document.getElementById("resume-workflow-run").disabled = r.status !== "paused";
        document.getElementById("cancel-workflow-run").disabled = ended;
        const steps = new Map((r.steps || []).map((s) => [s.step_ref, s]));
        body.replaceChildren(
          el(
            "dl",
            { class: "kv card" },
            el("dt", {}, "Status"), el("dd", { id: "workflow-run-status" }, status(r.status)),
            el("dt", {}, "Workflow"), el("dd", {}, link(`#/p/${p}/workflows/${encodeURIComponent(r.workflow_id)}`, r.workflow_id), ` v${r.version}`),
            el("dt", {}, "Created"), el("dd", {}, time(r.created_at)),
            el("dt", {}, "Finished"), el("dd", {}, time(r.finished_at)),
            el("dt", {}, "Trace"), el("dd", {}, el("code", {}, r.trace_id || "")),
            r.error ? [el("dt", {}, "Error"), el("dd", { class: "error" }, r.error)] : null,
          ),
          el("h2", {}, "Steps"),
          dag(g.nodes, (n) => n.status),
          g.critical_path?.step_refs?.length ? el("p", { class: "muted" }, `Critical path: ${g.critical_path.step_refs.join(" → ")} (~${Math.round(g.critical_path.estimated_duration_secs)} s)`) : null,
          table(
            ["Step", "Type", "Status", "Attempt#", "Job run", "Started", "Finished", "Error", ""],
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
