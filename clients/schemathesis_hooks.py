"""Schemathesis hooks for scripts/contract (docs/testing.md, "Contract tests").

A project-scoped request names its project in the query, the body or
X-Project-Id, and a request naming two different ones is refused (422): a
rule between parameters, which no schema states. clients/schemathesis.toml
fixes the query parameter and the header to the run's project
(CONTRACT_PROJECT); this hook does the same for a body's `project_id`,
which the coverage phase generates, and the stateful phase fills from
earlier answers (a project it created), without the configured value. A
`project_id` that is not an id at all (a negative case about it) is left
as generated, so it is still refused.
"""

import os
import re

import schemathesis

PROJECT = os.environ["CONTRACT_PROJECT"]
# ids::EXTERNAL_ID, as the document states it.
ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("project_id"), str) and ID.fullmatch(body["project_id"]):
        body["project_id"] = PROJECT
