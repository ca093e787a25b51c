"""The learner node: a pure core (admission, membership, rounds, flow) and the shell that owns MQTT."""

from mqttrl.nodes.learner.core import AsyncAdmission, LearnerCore, LearnerRules, SyncRounds
from mqttrl.nodes.learner.node import LearnerNode, run_learner

__all__ = ["AsyncAdmission", "LearnerCore", "LearnerNode", "LearnerRules", "SyncRounds", "run_learner"]
