"""Everything that touches MQTT: the client (reconnects, outboxes, last wills) and the topic table."""
