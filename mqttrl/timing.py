"""Deprecated: import ``mqttrl.observe.timing`` (this path worked in earlier releases and still does, with a warning)."""

from mqttrl._deprecated import alias

alias(__name__, "mqttrl.observe.timing")
