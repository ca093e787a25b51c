"""The plugin host: hook specifications (``spec``) and the manager that loads entry points (``manager``)."""

from mqttrl.plugin.spec import hookimpl, hookspec

__all__ = ["hookimpl", "hookspec"]
