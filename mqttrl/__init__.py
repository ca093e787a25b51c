"""mqttrl: distributed reinforcement learning over MQTT.

One learner trains, many workers play and stream experience, a telemetry host
watches; they meet only on an MQTT broker (see docs/architecture.md).
"""

__version__ = "0.1.0"

#: Version of the wire protocol (topic tree, headers, payload layouts).
#: Bumped on any incompatible change; every decoder checks it.
PROTOCOL_VERSION = 1
