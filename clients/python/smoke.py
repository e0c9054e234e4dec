#!/usr/bin/env python3
"""Smoke test of the Python client generated from /openapi.json.

scripts/contract generates the client (openapi-python-client) into
target/contract/python and runs this against a running system: it creates a
project, a job pointing at the echo target's /ok endpoint, triggers it and
polls the run until it is completed. Exits non-zero otherwise.

  smoke.py --base-url http://127.0.0.1:8080 --token SECRET --target http://127.0.0.1:9000
"""
import argparse
import sys
import time
import uuid

from switchyard_client import AuthenticatedClient
from switchyard_client.api.jobs import create_job, trigger_job
from switchyard_client.api.projects import create_project
from switchyard_client.api.runs import get_run
from switchyard_client.models import CreateJob, CreateProject, Job, JobRun, Project, TriggerRequest


def expect(response, status, model):
    if response.status_code != status or not isinstance(response.parsed, model):
        sys.exit(f"python smoke: expected {status} {model.__name__}, got {response.status_code}: "
                 f"{response.content[:500]!r}")
    return response.parsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--target", required=True, help="the echo target's base URL")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()

    client = AuthenticatedClient(base_url=a.base_url, token=a.token, raise_on_unexpected_status=False)
    project_id = f"py-smoke-{uuid.uuid4().hex[:8]}"
    project = expect(create_project.sync_detailed(client=client, body=CreateProject(id=project_id, name="Python smoke")),
                     201, Project)
    job = expect(create_job.sync_detailed(
        client=client, x_project_id=project.id,
        body=CreateJob(project_id=project.id, name="python smoke", endpoint_url=f"{a.target}/ok")), 201, Job)
    job_id = job.id
    run = expect(trigger_job.sync_detailed(job_id, client=client, x_project_id=project.id,
                                           body=TriggerRequest(payload={"from": "python"})), 201, JobRun)
    deadline = time.monotonic() + a.timeout
    while True:
        run = expect(get_run.sync_detailed(run.id, client=client, x_project_id=project.id), 200, JobRun)
        status = str(getattr(run.status, "value", run.status))
        if status == "completed":
            print(f"python smoke: run {run.id} of job {job_id} completed (attempt {run.attempt})")
            return
        if status in ("failed", "timed_out", "cancelled", "expired") or time.monotonic() > deadline:
            sys.exit(f"python smoke: run {run.id} is {status}")
        time.sleep(0.2)


if __name__ == "__main__":
    main()
