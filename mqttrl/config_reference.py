"""Deprecated: import ``mqttrl.config.reference`` (this path worked in earlier releases and still does,
with a warning); ``python -m mqttrl.config_reference docs/configuration.md`` still rewrites the tables."""

if __name__ == "__main__":
    from mqttrl.config.reference import main

    raise SystemExit(main())

from mqttrl._deprecated import alias

alias(__name__, "mqttrl.config.reference")
