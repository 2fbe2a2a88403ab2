"""Gryvia objects from Python: validation with the field named, defaults, attribute access,
round trips, equality."""

import pathlib

import pytest

import gryvia

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "gryvia-types" / "tests" / "data" / "guide"


def job(**spec):
    body = {"image": "registry.local/train:1"}
    body.update(spec)
    return {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaAIJob",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": body,
    }


def test_every_kind_is_known():
    kinds = gryvia.kinds()
    assert len(kinds) == 31
    assert "GryviaAIJob" in kinds and "GryviaReservation" in kinds


def test_a_valid_job_gets_its_defaults_and_attribute_access():
    j = gryvia.Resource(job(gpus=4))
    assert j.kind == "GryviaAIJob"
    assert j.name == "train" and j.namespace == "team-a"
    assert j.spec.gpus == 4
    assert j.spec.retry_limit == 3, "the default of retryLimit"
    assert j.spec.retryLimit == 3
    assert j.spec.replicas == 1
    assert j.to_dict()["spec"]["priority"] == 50


def test_an_invalid_job_raises_a_validation_error_naming_the_field():
    with pytest.raises(gryvia.ValidationError) as e:
        gryvia.Resource(job(gpus=100))
    assert "spec.gpus" in str(e.value)
    with pytest.raises(gryvia.GryviaError):
        gryvia.validate(job(priority=101))


def test_cel_rules_are_enforced_like_the_api_server():
    with pytest.raises(gryvia.ValidationError) as e:
        gryvia.Resource(job(gpus=0, gpuType="NVIDIA-H100-80GB-HBM3"))
    assert "spec.gpuType requires spec.gpus > 0" in str(e.value)


def test_unknown_fields_and_kinds_are_rejected():
    with pytest.raises(gryvia.ValidationError):
        gryvia.Resource(job(gpuz=1))
    bad = job()
    bad["kind"] = "GryviaNothing"
    with pytest.raises(gryvia.ValidationError):
        gryvia.Resource(bad)


def test_yaml_round_trip_and_equality():
    j = gryvia.Resource(job(gpus=2, env=[{"name": "A", "value": "1"}]))
    again = gryvia.Resource.from_yaml(j.to_yaml())
    assert again == j
    assert gryvia.Resource.from_dict(j.to_dict()) == j
    assert j != gryvia.Resource(job(gpus=3))
    assert j.spec.env[0].name == "A"
    assert j.spec.env[0] == {"name": "A", "value": "1"}


def test_a_missing_attribute_says_which_field():
    j = gryvia.Resource(job())
    with pytest.raises(AttributeError) as e:
        _ = j.spec.gpu_type
    assert "spec.gpuType is not set" in str(e.value)


def test_nested_views_read_the_objects_fields_and_name_where_they_are():
    j = gryvia.Resource(job(gpus=2, env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]))
    spec = j.spec
    assert spec.env[1].value == "2" and spec.env[1]["name"] == "B"
    assert "env" in spec and "gpuType" not in spec
    assert spec.env[1].to_dict() == {"name": "B", "value": "2"}
    assert repr(spec.env[1]) == 'Object(spec.env[1]: {"name":"B","value":"2"})'
    with pytest.raises(AttributeError) as e:
        _ = spec.env[1].value_from
    assert "spec.env[1].valueFrom is not set" in str(e.value)
    with pytest.raises(AttributeError):
        _ = spec.__no_such_dunder__
    assert type(spec).__name__ == "Object" and callable(spec.to_dict)
    # A view stands for its data wherever the SDK takes a dict.
    again = gryvia.GryviaAIJob({"metadata": {"name": "again", "namespace": "team-a"}, "spec": spec})
    assert again.spec == spec and again.spec.env[0].name == "A"


def test_the_guide_examples_load():
    for name in ["tenant", "healthcheck", "template", "budget", "reservation"]:
        objs = gryvia.load_all((GUIDE / f"{name}.yaml").read_text())
        assert len(objs) == 1, name
        assert objs[0].kind.startswith("Gryvia")


def test_the_exception_hierarchy():
    assert issubclass(gryvia.ValidationError, gryvia.GryviaError)
    assert issubclass(gryvia.NotFoundError, gryvia.ApiError)
    assert issubclass(gryvia.ConflictError, gryvia.ApiError)
    assert issubclass(gryvia.ApiError, gryvia.GryviaError)
