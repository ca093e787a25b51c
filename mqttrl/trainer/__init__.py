"""``mqttrl train``: a whole run on one machine (run.py), its supervisor and live progress."""
