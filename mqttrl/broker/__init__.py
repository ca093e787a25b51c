"""Broker tooling: an embedded broker for one-machine runs (embedded.py) and per-run identities
on mosquitto's dynamic security plugin (dynsec.py, ``mqttrl broker``)."""
