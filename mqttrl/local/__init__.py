"""One machine runs a whole run: `mqttrl train` (embedded broker, supervisor, live progress)."""
