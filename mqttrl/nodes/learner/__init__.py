"""The learner node: a pure core (admission, membership, rounds, flow) and the shell that owns MQTT."""

from mqttrl.nodes.learner.node import LearnerNode, run_learner

__all__ = ["LearnerNode", "run_learner"]
