"""The worker node: plays the game and streams experience."""

from mqttrl.nodes.worker.core import WorkerCore
from mqttrl.nodes.worker.node import SyncTimeout, WorkerNode, run_worker
from mqttrl.nodes.worker.remote_forward import InferenceUnavailable, RemoteForward

__all__ = ["InferenceUnavailable", "RemoteForward", "SyncTimeout", "WorkerCore", "WorkerNode", "run_worker"]
