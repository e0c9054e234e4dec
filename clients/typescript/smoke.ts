// Smoke test of the TypeScript client generated from /openapi.json.
//
// scripts/contract generates the types (openapi-typescript) into schema.d.ts
// here (not committed), type-checks this file against them (tsc --noEmit) and
// runs it with tsx against a running system: it creates a project, a job
// pointing at the echo target's /ok endpoint, triggers it and polls the run
// until it is completed. Exits non-zero otherwise.
//
//   npx tsx smoke.ts <base-url> <token> <echo-target-url>
import createClient from "openapi-fetch";
import type { paths } from "./schema.d.ts";

const [baseUrl, token, target] = process.argv.slice(2);
if (!baseUrl || !token || !target) {
  console.error("usage: smoke.ts <base-url> <token> <echo-target-url>");
  process.exit(2);
}

function fail(what: string, response: Response, error: unknown): never {
  console.error(`typescript smoke: ${what}: ${response.status} ${JSON.stringify(error)}`);
  process.exit(1);
}

const client = createClient<paths>({
  baseUrl,
  headers: { Authorization: `Bearer ${token}` },
});

const projectId = `ts-smoke-${Math.random().toString(16).slice(2, 10)}`;
const project = await client.POST("/v1/projects", {
  body: { id: projectId, name: "TypeScript smoke" },
});
if (project.response.status !== 201 || !project.data) fail("create project", project.response, project.error);

const job = await client.POST("/v1/jobs", {
  params: { header: { "X-Project-Id": projectId } },
  body: { project_id: projectId, name: "typescript smoke", endpoint_url: `${target}/ok` },
});
if (job.response.status !== 201 || !job.data) fail("create job", job.response, job.error);

const trigger = await client.POST("/v1/jobs/{job_id}/trigger", {
  params: { path: { job_id: job.data.id }, header: { "X-Project-Id": projectId } },
  body: { payload: { from: "typescript" } },
});
// A plain job answers with its run; a batching job (202) with its batch.
if (trigger.response.status !== 201 || !trigger.data || !("id" in trigger.data)) {
  fail("trigger", trigger.response, trigger.error);
}

const runId = trigger.data.id;
const deadline = Date.now() + 60_000;
for (;;) {
  const run = await client.GET("/v1/runs/{run_id}", {
    params: { path: { run_id: runId }, header: { "X-Project-Id": projectId } },
  });
  if (run.response.status !== 200 || !run.data) fail("get run", run.response, run.error);
  const status = run.data.status;
  if (status === "completed") {
    console.log(`typescript smoke: run ${runId} of job ${job.data.id} completed (attempt ${run.data.attempt})`);
    break;
  }
  if (["failed", "timed_out", "cancelled", "expired"].includes(status) || Date.now() > deadline) {
    console.error(`typescript smoke: run ${runId} is ${status}`);
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, 200));
}
