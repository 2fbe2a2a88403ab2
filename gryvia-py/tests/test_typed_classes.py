"""One class per Gryvia kind: at run time (the objects the SDK returns are of their kind's
class) and for type checkers (gryvia/objects.pyi, generated from the CRD schemas, current and
checked by mypy --strict)."""

import json
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

import gryvia

HERE = pathlib.Path(__file__).resolve().parent
SAMPLES = HERE / "typing_samples"


def test_the_generated_classes_are_what_the_crd_schemas_give():
    run = subprocess.run(
        [sys.executable, str(HERE.parent / "gen_kinds.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


def test_every_kind_has_a_class_that_is_a_resource():
    assert sorted(gryvia.objects.KINDS) == gryvia.kinds()
    for kind in gryvia.kinds():
        cls = getattr(gryvia, kind)
        assert issubclass(cls, gryvia.Resource), kind
        assert cls.__name__ == kind
        assert kind in gryvia.__all__


def test_a_kinds_class_fills_its_api_version_and_kind_and_validates():
    job = gryvia.GryviaAIJob({"metadata": {"name": "t", "namespace": "ml"}, "spec": {"image": "i"}})
    assert isinstance(job, gryvia.GryviaAIJob) and isinstance(job, gryvia.Resource)
    assert job.to_dict()["apiVersion"] == "gryvia.io/v1alpha1"
    assert job.kind == "GryviaAIJob"
    assert job.spec.retry_limit == 3  # the typed default
    with pytest.raises(gryvia.ValidationError, match=r"kind: is \"GryviaTenant\", expected \"GryviaAIJob\""):
        gryvia.GryviaAIJob({"kind": "GryviaTenant", "metadata": {"name": "t"}, "spec": {}})
    with pytest.raises(gryvia.ValidationError, match=r"spec\.replicas"):
        gryvia.GryviaAIJob({"metadata": {"name": "t"}, "spec": {"image": "i", "replicas": 0}})


def test_objects_built_or_decoded_are_of_their_kinds_class():
    body = {
        "kind": "GryviaTenantList",
        "items": [
            {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": "a"},
             "spec": {"displayName": "A"}},
        ],
    }
    (tenant,) = gryvia.decode_list(json.dumps(body))
    assert type(tenant) is gryvia.GryviaTenant
    assert type(gryvia.Resource.from_dict(body["items"][0])) is gryvia.GryviaTenant
    (loaded,) = gryvia.load_all("apiVersion: gryvia.io/v1alpha1\nkind: GryviaTenant\nmetadata: {name: b}\nspec: {displayName: B}\n")
    assert type(loaded) is gryvia.GryviaTenant
    # Nested objects are Objects at run time; their typed names exist for imports and isinstance.
    assert isinstance(loaded.spec, gryvia.objects.GryviaTenantSpec)


def mypy(sample: pathlib.Path) -> subprocess.CompletedProcess:
    """mypy --strict on one sample, against the installed package (not this tree's sources)."""
    with tempfile.TemporaryDirectory() as cache:
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", cache,
             "--python-version", "3.11", str(sample)],
            capture_output=True,
            text=True,
            cwd=cache,
        )


def test_mypy_strict_accepts_typed_use_of_every_path():
    run = mypy(SAMPLES / "typed_ok.py")
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_strict_catches_what_the_types_rule_out():
    sample = SAMPLES / "typed_wrong.py"
    expected = {
        n: m.group(1)
        for n, line in enumerate(sample.read_text().splitlines(), start=1)
        if (m := re.search(r"# E: (.*)$", line))
    }
    run = mypy(sample)
    reported = {}
    for line in run.stdout.splitlines():
        m = re.match(r".*typed_wrong\.py:(\d+): error: (.*)", line)
        assert m, f"an error outside the sample: {line}"
        reported[int(m.group(1))] = m.group(2)
    assert sorted(reported) == sorted(expected), run.stdout
    for n, what in expected.items():
        assert what in reported[n], (n, reported[n])
