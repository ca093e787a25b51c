"""mqttrl's built-in plugins, registered through the ``mqttrl`` entry point group like any third-party plugin."""
