"""The worker node: plays the game and streams experience."""

from mqttrl.nodes.worker.node import WorkerNode, run_worker

__all__ = ["WorkerNode", "run_worker"]
