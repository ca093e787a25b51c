"""Moved to :mod:`mqttrl.envs.spaces` (the run's env spec uses the same descriptions); kept so that
imports from here go on working."""

from mqttrl.envs.spaces import SpaceError, same_space, space_from_json, space_to_json

__all__ = ["SpaceError", "same_space", "space_from_json", "space_to_json"]
