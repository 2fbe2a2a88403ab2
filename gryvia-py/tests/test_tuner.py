"""The tuner's search from Python: the same suggestion function the ai-operator runs, so a
notebook can run a study offline and get the trials the operator would start."""

import math

import pytest

import gryvia


def study(algorithm="bayesian", seed=7, max_trials=30):
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAutoTuner",
            "metadata": {"name": "sweep", "namespace": "ml"},
            "spec": {"objective": {"metric": "loss", "goal": "minimize"},
                     "algorithm": algorithm, "seed": seed, "maxTrials": max_trials,
                     "parameters": [
                         {"name": "lr", "type": "double", "min": 0.0001, "max": 1.0, "logScale": True},
                         {"name": "layers", "type": "int", "min": 1, "max": 8},
                         {"name": "opt", "type": "categorical", "values": ["adam", "sgd"]}],
                     "trialTemplate": {"image": "registry.local/train:1", "gpus": 1}}}


def loss(p):
    return (math.log10(float(p["lr"])) + 2) ** 2 + (int(p["layers"]) - 4) ** 2 / 10 + (p["opt"] == "sgd") * 0.5


def test_an_offline_bayesian_study_is_reproducible_in_bounds_and_improves():
    history = []
    for _ in range(20):
        p = gryvia.suggest(study(), history)
        assert gryvia.suggest(study(), history) == p  # same seed, same history: same values
        assert 0.0001 <= float(p["lr"]) <= 1.0 and 1 <= int(p["layers"]) <= 8 and p["opt"] in ("adam", "sgd")
        history.append({"parameters": p, "objectiveValue": loss(p)})
    values = [h["objectiveValue"] for h in history]
    # The model's picks (after the random start) beat the random start.
    assert min(values[6:]) < min(values[:6])
    # Another seed gives another study.
    assert gryvia.suggest(study(seed=8), []) != gryvia.suggest(study(), [])


def test_a_grid_ends_and_a_bad_space_names_the_field():
    grid = study("grid", max_trials=100)
    grid["spec"]["parameters"] = [{"name": "bs", "type": "categorical", "values": ["32", "64"]}]
    first = gryvia.suggest(grid, [])
    second = gryvia.suggest(grid, [{"parameters": first, "objectiveValue": 1.0}])
    assert [first, second] == [{"bs": "32"}, {"bs": "64"}]
    assert gryvia.suggest(grid, [{"parameters": first}, {"parameters": second}]) is None
    bad = study("random")
    bad["spec"]["parameters"][0]["min"] = 0.0
    with pytest.raises(gryvia.ValidationError, match=r"spec.parameters\[lr\].min: logScale needs min above 0"):
        gryvia.suggest(bad, [])
    with pytest.raises(gryvia.ValidationError, match="history"):
        gryvia.suggest(study(), {"parameters": {}})
