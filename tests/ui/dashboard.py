#!/usr/bin/env python3
"""Drives the dashboard at /ui in a real browser (Playwright, Chromium).

scripts/ui-test starts a private system and runs this against it:

  dashboard.py --base-url URL --secret SECRET --echo URL --hook URL --shots DIR

It sets up data through the API (a project, a failing job whose run ends in
the dead-letter queue, a workflow of four steps, a webhook subscription to
a closed port so that a delivery fails), then in the browser: logs in with
the internal secret, opens the project, creates a job with the form,
triggers it and waits for its run to show `completed`, and visits every
page, asserting each renders the data and saving a screenshot of it;
checks absolute times, names for ids and the waterfalls; replays a run
with an edited payload; filters the runs list (status, job, time, payload)
and cancels and replays picked runs in bulk; triggers a workflow with a
payload; approves a waiting approval step from its run's page with a
comment, watches a run's page
follow its run from queued to completed through the live stream (no
polling, no reload), and pages through a project with more jobs than one
page holds. Any
page error or console error (a Content-Security-Policy violation among
them), any failed request, and API data that reached the DOM as HTML fail
the test. Last, an API key logs in with its project id, and a token the
API refuses brings the login form back.
"""
import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request
import uuid

from playwright.sync_api import expect, sync_playwright

TIMEOUT_MS = 30_000
# A time as the page shows it: the reader's clock to the second, with the
# date when not today.
ABSOLUTE = re.compile(r"^(\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}$")


def call(base, secret, method, path, body=None, project=None):
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    if project:
        headers["X-Project-Id"] = project
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        sys.exit(f"ui-test: {method} {path} -> {e.code}: {e.read()[:400]!r}")


def wait_for(what, fn, secs=30):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(0.3)
    sys.exit(f"ui-test: timed out waiting for {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--echo", required=True, help="the echo target's base URL")
    ap.add_argument("--hook", required=True, help="a URL nothing listens on")
    ap.add_argument("--shots", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    base = a.base_url.rstrip("/")
    api = lambda *args, **kw: call(base, a.secret, *args, **kw)  # noqa: E731

    # --- data, through the API
    project = f"ui-{uuid.uuid4().hex[:8]}"
    api("POST", "/v1/projects", {"id": project, "name": "Dashboard test"})
    hostile = "<img src=x onerror=alert(1)> fail"
    failing = api("POST", "/v1/jobs", {"name": hostile, "endpoint_url": f"{a.echo}/fail", "max_attempts": 1},
                  project=project)
    step_job = api("POST", "/v1/jobs", {"name": "step", "endpoint_url": f"{a.echo}/ok"}, project=project)
    api("POST", "/v1/jobs", {"name": "digest", "endpoint_url": f"{a.echo}/ok",
                             "debounce": {"key": "user", "period_secs": 60}, "fairness": "round_robin",
                             "cancel_on": [{"event_key": "user.deleted"}]}, project=project)
    api("POST", "/v1/jobs", {"name": "rows", "endpoint_url": f"{a.echo}/ok",
                             "batch": {"max_size": 2, "timeout_secs": 600}}, project=project)
    api("POST", "/v1/webhooks/subscriptions",
        {"webhook_url": a.hook, "event_types": ["run.completed", "run.failed"], "secret": "ui-test-hook-secret"},
        project=project)
    dead = api("POST", f"/v1/jobs/{failing['id']}/trigger", {"payload": {"n": 1}}, project=project)
    steps = [
        {"step_ref": "extract", "job_id": step_job["id"]},
        {"step_ref": "transform", "job_id": step_job["id"], "depends_on": ["extract"]},
        {"step_ref": "validate", "job_id": step_job["id"], "depends_on": ["extract"]},
        {"step_ref": "load", "job_id": step_job["id"], "depends_on": ["transform", "validate"]},
    ]
    key = api("POST", "/v1/api-keys", {"name": "dashboard", "scopes": ["jobs:read", "runs:read", "jobs:trigger"]},
              project=project)
    wf = api("POST", "/v1/workflows", {"name": "etl", "steps": steps}, project=project)
    gated = api("POST", "/v1/workflows", {"name": "gated", "steps": [
        {"step_ref": "gate", "approval_approvers": ["ops"]},
        {"step_ref": "ship", "job_id": step_job["id"], "depends_on": ["gate"]},
    ]}, project=project)
    # A second project with more jobs than one page of a list holds.
    many = f"ui-many-{uuid.uuid4().hex[:8]}"
    api("POST", "/v1/projects", {"id": many, "name": "Paging test"})
    for i in range(55):
        api("POST", "/v1/jobs", {"name": f"job {i:02d}", "endpoint_url": f"{a.echo}/ok"}, project=many)
    wait_for("the failing run to end", lambda: api("GET", f"/v1/runs/{dead['id']}", project=project)["status"] == "failed")

    problems = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=a.chromium, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.request.method} {r.url}"))
        expect.set_options(timeout=TIMEOUT_MS)

        def shot(name):
            page.wait_for_timeout(300)
            page.screenshot(path=f"{a.shots}/{name}.png", full_page=True)
            print(f"ui-test: {name} ok", flush=True)

        # Login: the form, then the projects list.
        page.goto(f"{base}/ui/")
        expect(page.locator("form#login")).to_be_visible()
        page.fill("input[name=token]", a.secret)
        shot("login")
        page.click("form#login button[type=submit]")
        expect(page.get_by_role("link", name=project)).to_be_visible()
        shot("projects")

        # Jobs: create one with the form, trigger it, see the run complete.
        page.get_by_role("link", name=project).click()
        expect(page.locator("h1")).to_have_text(f"Jobs of {project}")
        page.fill("#create-job input[name=name]", "echo ok")
        page.fill("#create-job input[name=endpoint_url]", f"{a.echo}/ok")
        page.click("#create-job button[type=submit]")
        trigger = page.locator("button.trigger[data-job='echo-ok']")
        expect(trigger).to_be_visible()
        # API data is text: the hostile job name shows as typed, and is no element.
        expect(page.get_by_text(hostile).first).to_be_visible()
        if page.locator("main img").count():
            problems.append("a job name reached the DOM as HTML")
        page.fill("textarea[name=payload]", '{"from": "ui-test"}')
        trigger.click()
        run_link = page.locator(".flash a").first
        expect(run_link).to_be_visible()
        run_id = run_link.inner_text()
        run_link.click()
        expect(page.locator("#run-status [data-status=completed]")).to_be_visible()
        expect(page.locator("#trace-id")).to_have_text(re.compile(r"^[0-9a-f]{32}$"))
        expect(page.get_by_text("ui-test").first).to_be_visible()
        expect(page.locator("svg.bars rect").first).to_be_attached()
        expect(page.get_by_role("heading", name="Attempts (1)")).to_be_visible()
        # The job by its name (its id beside it), times to the second on
        # the reader's clock, the gap since the row before on the timeline,
        # and the attempt on the waterfall.
        expect(page.locator("#run-job a.job-ref")).to_have_text("echo ok")
        expect(page.locator("#run-job")).to_contain_text("job_")
        expect(page.locator("main time").first).to_have_text(ABSOLUTE)
        expect(page.locator("td.gap").nth(1)).to_have_text(re.compile(r"^\+\d"))
        expect(page.locator(".waterfall .wf-row[data-row=attempt-1] .wf-seg.bar.completed")).to_have_count(1)
        shot("run")

        # Replay with edits: the editor opens with the run's payload; what
        # is not JSON is said in the page and not sent; the new run has the
        # edited payload.
        page.click("#replay-edit")
        editor = page.locator("#replay-payload")
        expect(editor).to_have_value(re.compile(r'"from": "ui-test"'))
        editor.fill('{"from": "edited in the page"}')
        shot("replay-editor")
        replays = []
        page.on("request", lambda r: r.url.endswith("/replay") and replays.append(r.url))
        editor.fill("{nope")
        page.click("#replay-submit")
        expect(page.locator(".flash")).to_contain_text("The payload is not JSON")
        if replays:
            problems.append("a replay payload that is not JSON was sent")
        editor.fill('{"from": "edited in the page"}')
        page.click("#replay-submit")
        expect(page.locator(".flash")).to_contain_text("Replayed as")
        edited_id = page.locator(".flash a").first.inner_text()
        replayed = api("GET", f"/v1/runs/{edited_id}", project=project)
        if replayed["payload"] != {"from": "edited in the page"} or replayed["continuation_of"] != run_id:
            problems.append(f"the replay with edits made {replayed}")
        expect(page.locator("#replay-editor")).to_be_hidden()
        page.locator(".flash a").first.click()
        expect(page.locator("#run-status [data-status=completed]")).to_be_visible()
        expect(page.get_by_text("edited in the page").first).to_be_visible()
        page.goto(f"{base}/ui/#/p/{project}/jobs")
        expect(page.locator(f"a[href$='/runs/{run_id}'] [data-status=completed]").first).to_be_visible()
        expect(page.locator("svg.spark polyline").first).to_be_attached()
        shot("jobs")
        # Pause holds the job's runs; resume lets them go.
        page.click("button.pause[data-job='echo-ok']")
        expect(page.locator(".flash")).to_contain_text("Paused echo ok")
        # Flow control shows on the job's row, and a trigger says what it did.
        digest = page.locator("main tbody tr", has=page.locator("button.trigger[data-job='digest']"))
        expect(digest.locator(".flow")).to_have_text("keys in turn · debounce 60 s by user · cancelled by user.deleted")
        page.fill("textarea[name=payload]", '{"user": "u1"}')
        page.click("button.trigger[data-job='digest']")
        expect(page.locator(".flash")).to_contain_text("Triggered")
        page.click("button.trigger[data-job='digest']")
        expect(page.locator(".flash")).to_contain_text("Debounced into")
        # A batching job's trigger says which batch it joined, and the run
        # the trigger that filled it made.
        page.click("button.trigger[data-job='rows']")
        expect(page.locator(".flash")).to_contain_text("at position 0")
        page.click("button.trigger[data-job='rows']")
        expect(page.locator(".flash")).to_contain_text("the batch is full, run")
        row = page.locator("main tbody tr", has=page.locator("button.trigger[data-job='echo-ok']"))
        expect(row.get_by_text("paused", exact=True)).to_be_visible()
        page.click("button.resume[data-job='echo-ok']")
        expect(row.get_by_text("enabled", exact=True)).to_be_visible()

        # The runs list: filters narrow it and live in the hash (a link).
        echo_ok = next(j for j in api("GET", "/v1/jobs?limit=100", project=project)["data"] if j["slug"] == "echo-ok")
        page.goto(f"{base}/ui/#/p/{project}/runs")
        rows = page.locator("main .content tbody tr")
        expect(rows.first).to_be_visible()
        everything = len(api("GET", "/v1/runs?limit=100", project=project)["data"])
        expect(rows).to_have_count(everything)
        expect(page.locator("main .content a.job-ref", has_text="echo ok").first).to_be_visible()
        page.select_option("#run-filters select[name=status]", "failed")
        page.click("#run-filters button[type=submit]")
        expect(page).to_have_url(re.compile(r"#/p/[^/]+/runs\?status=failed$"))
        failed_runs = api("GET", "/v1/runs?status=failed", project=project)["data"]
        expect(rows).to_have_count(len(failed_runs))
        expect(rows.locator("[data-status=failed]")).to_have_count(len(failed_runs))
        # Job and payload: the one edited replay.
        page.select_option("#run-filters select[name=status]", "")
        page.select_option("#run-filters select[name=job]", label="echo ok")
        page.fill("#run-filters input[name=payload]", '{"from": "edited in the page"}')
        page.click("#run-filters button[type=submit]")
        expect(page).to_have_url(re.compile(r"\?job=job_[^&]+&payload="))
        expect(rows).to_have_count(1)
        expect(rows.locator(f"a[href$='/runs/{edited_id}']")).to_be_visible()
        shot("runs-filtered")
        # The hash is the view: opened again, it filters the same way.
        page.reload()
        expect(rows).to_have_count(1)
        expect(page.locator("#run-filters select[name=job]")).to_have_value(echo_ok["id"])
        # A time range: nothing was created after 2999.
        page.fill("#run-filters input[name=after]", "2999-01-01T00:00:00")
        page.click("#run-filters button[type=submit]")
        expect(page).to_have_url(re.compile(r"after=2999-"))
        expect(page.get_by_text("No run matches these filters.")).to_be_visible()
        # A payload that is not JSON is said in the page, and not sent.
        before = page.url
        page.fill("#run-filters input[name=payload]", "{nope")
        page.click("#run-filters button[type=submit]")
        expect(page.locator(".flash")).to_contain_text("is not JSON")
        if page.url != before:
            problems.append("a filter that is not JSON changed the view")
        page.click("#run-filters a.clear")
        expect(rows.first).to_be_visible()

        # Queue statistics: one row per job, with a history chart.
        page.get_by_role("link", name="Queues").click()
        expect(page.locator("main table tbody tr")).to_have_count(5)
        expect(page.get_by_text("echo-ok")).to_be_visible()
        shot("queues")

        # Dead letters: the failing run, replayed from the page.
        page.get_by_role("link", name="Dead letters").click()
        row = page.locator("main tbody tr", has=page.locator(f"a[href$='/runs/{dead['id']}']"))
        expect(row).to_be_visible()
        expect(row.locator("[data-status=failed]")).to_be_visible()
        expect(row.get_by_text(hostile)).to_be_visible()
        shot("dead-letters")
        row.locator("button.replay").click()
        expect(page.locator(".flash")).to_contain_text("Replayed")

        # Workflows: the list, the DAG, a run triggered from the page.
        page.get_by_role("link", name="Workflows").click()
        expect(page.get_by_role("link", name="etl")).to_be_visible()
        shot("workflows")
        page.get_by_role("link", name="etl").click()
        expect(page.locator("svg.dag g.node")).to_have_count(4)
        expect(page.locator("svg.dag path.edge")).to_have_count(4)
        shot("workflow")
        # Triggered with a payload: what is not JSON is not sent.
        page.fill("#workflow-payload", "{")
        page.click("#trigger-workflow")
        expect(page.locator(".flash")).to_contain_text("The payload is not JSON")
        page.fill("#workflow-payload", '{"region": "eu"}')
        page.click("#trigger-workflow")
        wf_link = page.locator(".flash a").first
        expect(wf_link).to_be_visible()
        wf_run = api("GET", f"/v1/workflow-runs/{wf_link.inner_text()}", project=project)
        if wf_run["payload"] != {"region": "eu"}:
            problems.append(f"the workflow run's payload is {wf_run['payload']!r}")
        wf_link.click()
        expect(page.locator("#workflow-run-status [data-status=completed]")).to_be_visible()
        expect(page.locator("svg.dag g.node[data-status=completed]")).to_have_count(4)
        expect(page.locator("#workflow-run-workflow a.workflow-ref")).to_have_text("etl")
        expect(page.get_by_text('"region": "eu"').first).to_be_visible()
        # The steps' waterfall: a bar each, load after extract.
        expect(page.locator(".waterfall .wf-seg.bar.completed")).to_have_count(4)
        expect(page.locator(".waterfall .wf-row").first).to_have_attribute("data-row", "extract")
        expect(page.locator(".waterfall .wf-row").last).to_have_attribute("data-row", "load")
        shot("workflow-run")

        # A waiting approval step, approved from the run's page.
        gated_run = api("POST", f"/v1/workflows/{gated['id']}/trigger", {}, project=project)
        page.goto(f"{base}/ui/#/p/{project}/workflow-runs/{gated_run['id']}")
        approve = page.locator("button.approve[data-step=gate]")
        expect(approve).to_be_visible()
        expect(page.locator("button.reject[data-step=gate]")).to_be_visible()
        page.fill("input.comment[data-step=gate]", "ship it")
        shot("workflow-run-approval")
        approve.click()
        expect(page.locator(".flash")).to_contain_text("Approve gate")
        expect(page.locator("#workflow-run-status [data-status=completed]")).to_be_visible()
        expect(page.locator("#cancel-workflow-run")).to_be_disabled()
        # The message follows the run: it does not stay "running" once the
        # run completed. The step says who decided, and why.
        expect(page.locator(".flash .acted-status [data-status=completed]")).to_be_visible()
        expect(page.locator(".flash [data-status=running]")).to_have_count(0)
        gate_decision = page.locator(".decision[data-step=gate]")
        expect(gate_decision.locator(".decided-by")).to_have_text("operator (internal secret)")
        expect(gate_decision.locator(".decision-comment")).to_have_text("ship it")
        gate_step = next(st for st in api("GET", f"/v1/workflow-runs/{gated_run['id']}", project=project)["steps"]
                         if st["step_ref"] == "gate")
        if gate_step.get("decision_comment") != "ship it":
            problems.append(f"the approval's comment was not recorded: {gate_step}")
        shot("workflow-run-approved")

        # Live: a run's page follows the run through its stream. The run waits
        # queued (its job is paused) and the page reads nothing meanwhile (it
        # does not poll); the job resumed, the page shows the run completed
        # without a reload.
        held = api("POST", "/v1/jobs", {"name": "held", "endpoint_url": f"{a.echo}/ok"}, project=project)
        api("POST", f"/v1/jobs/{held['id']}/pause", None, project=project)
        held_run = api("POST", f"/v1/jobs/{held['id']}/trigger", {}, project=project)
        page.goto(f"{base}/ui/#/p/{project}/runs/{held_run['id']}")
        expect(page.locator("#run-status [data-status=queued]")).to_be_visible()
        expect(page.locator("#live")).to_contain_text("live")
        # The stream's opening events redraw once; after that, quiet.
        page.wait_for_timeout(1000)
        reads, loads = [], []
        page.on("request", lambda r: "/debug-bundle" in r.url and reads.append(r.url))
        page.on("load", lambda p: loads.append(p.url))
        page.wait_for_timeout(2500)
        if reads:
            problems.append(f"the run page read the run {len(reads)} times while it did not change (it polls)")
        api("POST", f"/v1/jobs/{held['id']}/resume", None, project=project)
        expect(page.locator("#run-status [data-status=completed]")).to_be_visible()
        expect(page.locator("#live")).to_contain_text("ended")
        if loads:
            problems.append(f"the run page reloaded: {loads}")
        shot("run-live")

        # Bulk cancel and replay from the runs list: three runs wait (their
        # job is paused); two are picked and cancelled, the third is not.
        bulk_job = api("POST", "/v1/jobs", {"name": "bulk", "endpoint_url": f"{a.echo}/ok"}, project=project)
        api("POST", f"/v1/jobs/{bulk_job['id']}/pause", None, project=project)
        waiting = [api("POST", f"/v1/jobs/{bulk_job['id']}/trigger", {"payload": {"i": i}}, project=project)["id"]
                   for i in range(3)]
        page.goto(f"{base}/ui/#/p/{project}/runs?job={bulk_job['id']}")
        rows = page.locator("main .content tbody tr")
        expect(rows).to_have_count(3)
        expect(page.locator("#cancel-selected")).to_be_disabled()
        for rid in waiting[:2]:
            page.check(f"input.pick[data-run='{rid}']")
        expect(page.locator(".selected-count")).to_have_text("2 selected")
        page.click("#cancel-selected")
        expect(page.locator(".flash")).to_contain_text("Cancelled 2 of 2.")
        for rid in waiting[:2]:
            expect(page.locator("main .content tr", has=page.locator(f"input[data-run='{rid}']"))
                   .locator("[data-status=cancelled]")).to_be_visible()
        expect(page.locator("main .content tr", has=page.locator(f"input[data-run='{waiting[2]}']"))
               .locator("[data-status=queued]")).to_be_visible()
        statuses = [api("GET", f"/v1/runs/{rid}", project=project)["status"] for rid in waiting]
        if statuses != ["cancelled", "cancelled", "queued"]:
            problems.append(f"bulk cancel left the runs {statuses}")
        # Every run of the page picked: a finished run cannot be cancelled
        # again, and the summary says so item by item.
        page.check("input.pick-all")
        page.click("#cancel-selected")
        expect(page.locator(".flash")).to_contain_text("Cancelled 1 of 3; 2 not:")
        expect(page.locator(".flash ul.failures li")).to_have_count(2)
        shot("runs-bulk")
        page.check(f"input.pick[data-run='{waiting[0]}']")
        page.click("#replay-selected")
        expect(page.locator(".flash")).to_contain_text("Replayed 1 of 1 as")
        expect(rows).to_have_count(4)

        # Webhook deliveries: the hook's port is closed, so they fail; retry one.
        page.get_by_role("link", name="Deliveries").click()
        expect(page.locator("main tbody tr").first).to_be_visible()
        retry = page.locator("button.retry").first
        expect(retry).to_be_visible(timeout=60_000)
        shot("deliveries")
        retry.click()
        expect(page.locator(".flash")).to_contain_text("Retrying delivery")

        # The icon: an SVG of this origin, which the policy allows.
        expect(page.locator("link[rel=icon]")).to_have_attribute("href", "/ui/favicon.svg")
        icon = page.request.get(f"{base}/ui/favicon.svg")
        if icon.status != 200 or icon.headers.get("content-type") != "image/svg+xml":
            problems.append(f"the icon: HTTP {icon.status} {icon.headers.get('content-type')}")

        # Lists page: 50 jobs, then the 5 older ones, and back.
        page.goto(f"{base}/ui/#/p/{many}/jobs")
        rows = page.locator("main table").first.locator("tbody tr")
        expect(rows).to_have_count(50)
        expect(page.get_by_text("job 54")).to_be_visible()
        expect(page.locator(".pager button.newer")).to_be_disabled()
        page.click(".pager button.older")
        expect(rows).to_have_count(5)
        expect(page.get_by_text("job 00")).to_be_visible()
        expect(page.locator(".pager .where")).to_have_text("page 2")
        expect(page.locator(".pager button.older")).to_be_disabled()
        shot("jobs-page-2")
        page.click(".pager button.newer")
        expect(rows).to_have_count(50)

        # An API key logs in with its project id (it cannot list projects).
        page.click("#logout")
        expect(page.locator("form#login")).to_be_visible()
        page.fill("input[name=token]", key["key"])
        page.fill("input[name=project]", project)
        page.click("form#login button[type=submit]")
        expect(page.locator("button.trigger[data-job='echo-ok']")).to_be_visible()

        # A token the API refuses sends back to the login form.
        page.evaluate("sessionStorage.setItem('switchyard.token', 'not-a-valid-token')")
        page.goto(f"{base}/ui/#/projects")
        page.reload()
        expect(page.locator("form#login")).to_be_visible()

        # The API reference at /docs: the document /openapi.json serves
        # (OpenAPI 3.1), its prose folded by section so the operations
        # start on the first screen.
        page.goto(f"{base}/docs/")
        expect(page.locator(".info .title")).to_contain_text("OAS 3.1")
        expect(page.locator(".info details summary").first).to_have_text("Authentication")
        first_tag = page.locator(".opblock-tag").first
        expect(first_tag).to_be_visible()
        top = first_tag.bounding_box()["y"]
        if top > 1000:
            problems.append(f"/docs: the first operation starts {top:.0f} px down")
        page.screenshot(path=f"{a.shots}/docs.png")
        print("ui-test: docs ok", flush=True)
        browser.close()

    # The refused token's 401 (and the console line it logs) is expected.
    problems = [p for p in problems if "401" not in p]
    if problems:
        sys.exit("ui-test: FAILED\n  " + "\n  ".join(problems))
    print(f"ui-test: every page rendered (project {project}, workflow {wf['id']})")


if __name__ == "__main__":
    main()
