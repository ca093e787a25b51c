"""Old import paths that keep working for a release, with a DeprecationWarning naming the new one.

Plugin packages written against an earlier release import ``mqttrl.hookspecs``,
``mqttrl.algorithm`` or ``mqttrl.storage``; those modules are now thin aliases made
here, so that a rename never breaks a third-party plugin without a warning first
(docs/plugins.md, "Stable API"; CHANGELOG.md).
"""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make module ``old`` the module ``new``, warning once on import of the old name."""
    warnings.warn(
        f"{old} is deprecated and will be removed in a later release; import {new} instead",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)


#: every old module path that is now an alias: old -> new (docs/architecture.md's map shows the new)
MOVED = {
    "mqttrl.algorithm": "mqttrl.plugin.algorithm",
    "mqttrl.hookspecs": "mqttrl.plugin.hookspecs",
    "mqttrl.storage": "mqttrl.plugin.storage",
    # issue 35: the loose root modules grouped into packages that say what they hold
    "mqttrl.settings": "mqttrl.config.settings",
    "mqttrl.config_convert": "mqttrl.config.convert",
    "mqttrl.config_reference": "mqttrl.config.reference",
    "mqttrl.timing": "mqttrl.observe.timing",
    "mqttrl.prometheus": "mqttrl.observe.prometheus",
    "mqttrl.ledger": "mqttrl.observe.ledger",
    "mqttrl.curves": "mqttrl.observe.curves",
    "mqttrl.policy_source": "mqttrl.policy.source",
    "mqttrl.procs": "mqttrl.system.procs",
    "mqttrl.devices": "mqttrl.system.devices",
}
