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
