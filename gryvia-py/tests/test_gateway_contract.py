"""The gateway's API contract, checked by schemathesis against its own /openapi.json with a
valid token: property-based requests to every operation (positive and negative data, the
stateful phase), and no 5xx, no response that breaks the documented schema, status code or
content type, and every schema-violating request rejected."""

import re
import shutil
import subprocess
import sys

import pytest

CHECKS = ",".join([
    "not_a_server_error",
    "response_schema_conformance",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
])


def _st():
    st = shutil.which("st") or shutil.which("schemathesis")
    if st is None:
        pytest.importorskip("schemathesis")
        st = [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()"]
        return st
    return [st]


@pytest.mark.parametrize("user", ["admin@example.com", "alice@example.com"])
def test_no_server_error_and_every_answer_as_documented(gateway, user, tmp_path):
    # schemathesis keeps a cache in its working directory: a temporary one, not the repository.
    token = gateway.dex.token(user)
    run = subprocess.run(
        _st() + ["run", gateway.url + "/openapi.json", "-H", f"Authorization: Bearer {token}",
                 "--checks", CHECKS, "--max-examples", "10", "--no-color"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = run.stdout + run.stderr
    summary = re.search(r"(\d+) generated, (\d+) passed", out)
    print(out[-3000:])
    assert run.returncode == 0, out[-6000:]
    assert summary and summary.group(1) == summary.group(2), out[-3000:]
    assert int(summary.group(1)) > 1000, "schemathesis generated too few cases"
