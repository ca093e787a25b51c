"""Deprecated: import ``mqttrl.observe.curves`` (this path worked in earlier releases and still does, with a warning)."""

from mqttrl._deprecated import alias

alias(__name__, "mqttrl.observe.curves")
