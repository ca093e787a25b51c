"""One ordered ``ModelRef(epoch, version)`` names a model everywhere (issue 44, item 1): weights,
evaluations, the evaluator's recent models and the matching of a worker's result to the weights it
judged. A learner resumed from an older checkpoint (the broker lost the retained weights) opens a
new epoch whose versions are lower than the old one's; plain objects here, the real run is in
tests/test_e2e_model_ref.py."""

from __future__ import annotations

import json

import numpy as np

from mqttrl.nodes.evaluator import RECENT_MODELS, _Latest
from mqttrl.transport.topics import Topics
from mqttrl.wire import ModelRef, decode_weights, encode_weights
from mqttrl.wire.evaluation import Evaluation

TENSORS = {"w": np.zeros(2, np.float32)}


RESULT = {"episodes": 3, "mean": 5.0, "std": 0.0, "min": 5.0, "max": 5.0, "eval_s": 0.1}


def judged(version: int, epoch: int = 0) -> Evaluation:
    """A worker's evaluation of model ``version`` of ``epoch`` (0: a worker that names no epoch)."""
    return Evaluation.of_returns(ModelRef(epoch, version), [5.0, 5.0, 5.0], 0.1)


def weights(version: int, epoch: int) -> bytes:
    return encode_weights(version, "dqn", "r", TENSORS, epoch=epoch)


def test_refs_order_by_epoch_then_version():
    assert ModelRef(2, 3) > ModelRef(1, 50) > ModelRef(1, 49)
    assert max([ModelRef(1, 50), ModelRef(2, 3), ModelRef(2, 1)]) == ModelRef(2, 3)
    assert ModelRef.of((2, 3)) == ModelRef.of(ModelRef(2, 3)) == ModelRef(2, 3) and ModelRef.of(7) == ModelRef(0, 7)
    w = decode_weights(weights(3, epoch=2))
    assert w.ref == ModelRef(2, 3) and w.order == (2, 3)
    assert w.newer_than(ModelRef(1, 50)) and w.newer_than((1, 50)) and not w.newer_than(ModelRef(2, 3))
    assert not decode_weights(weights(60, epoch=1)).newer_than(w)


def test_an_evaluation_names_its_models_epoch_and_an_older_one_reads_as_epoch_0():
    ev = Evaluation.of_returns(ModelRef(1_700_000_000_000, 3), [1.0, 2.0], 0.5)
    assert ev.model == ModelRef(1_700_000_000_000, 3)
    data = ev.to_json()
    assert data["model_version"] == 3 and data["model_epoch"] == 1_700_000_000_000  # old readers read model_version
    assert Evaluation.decode(ev.encode()) == ev
    old = Evaluation.decode(json.dumps({"model_version": 3, **RESULT}).encode())  # a sender older than the field
    assert old.model == ModelRef(0, 3) and "model_epoch" not in old.to_json()


def test_the_evaluators_recent_models_keep_the_newest_by_ref():
    """A resumed learner's new epoch (lower versions) is newer: the old epoch's models are evicted
    first, not the new epoch's (by version alone, min() evicted the new epoch's at once)."""
    topics = Topics("r")
    seen = _Latest(topics, 3, listen=True)
    for v in range(100, 100 + RECENT_MODELS):  # the old epoch: high versions
        seen.dispatch(topics.weights, weights(v, epoch=1))
    for v in range(1, 4):  # the resumed learner's
        seen.dispatch(topics.weights, weights(v, epoch=2))
    assert len(seen.recent) == RECENT_MODELS
    assert {ModelRef(2, 1), ModelRef(2, 2), ModelRef(2, 3)} <= set(seen.recent)
    assert min(seen.recent) == ModelRef(1, 103)  # the old epoch's oldest went
    assert seen.weights.ref == ModelRef(2, 3)


def test_a_workers_result_is_matched_to_its_epochs_weights():
    """Both epochs had a model 5: a result names which it judged, and gets those weights."""
    topics = Topics("r")
    seen = _Latest(topics, 3, listen=True)
    old, new = weights(5, epoch=1), weights(5, epoch=2)
    seen.dispatch(topics.weights, old)
    seen.dispatch(topics.weights, new)
    ref, w, payload = seen.model_of(judged(5, 1))
    assert ref == ModelRef(1, 5) and w.epoch == 1 and payload == old
    ref, w, payload = seen.model_of(judged(5, 2))
    assert ref == ModelRef(2, 5) and w.epoch == 2 and payload == new
    # a result from a worker older than the field names no epoch: the newest model of its version
    ref, w, payload = seen.model_of(judged(5))
    assert ref == ModelRef(2, 5) and payload == new
    # a model no longer kept: its reference, without weights
    assert seen.model_of(judged(9, 1)) == (ModelRef(1, 9), None, None)


def test_a_workers_result_decoded_by_the_evaluator_keeps_its_epoch():
    topics = Topics("r")
    seen = _Latest(topics, 3, listen=True)
    ev = Evaluation.of_returns(ModelRef(2, 5), [1.0], 0.1)
    seen.dispatch(topics.evaluation("pc1"), ev.encode())
    assert seen.results[0].evaluation.model == ModelRef(2, 5)
