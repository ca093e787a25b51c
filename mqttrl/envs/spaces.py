"""Spaces as JSON: where they were before they moved below the config (``mqttrl.config.spaces``,
beside the env spec that carries them); these names stay importable here."""

from mqttrl.config.spaces import SpaceError, same_space, space_from_json, space_to_json

__all__ = ["SpaceError", "same_space", "space_from_json", "space_to_json"]
