"""Where the scalar storage base was before it joined the toolkit (``mqttrl.plugin``: ``ScalarStorage``,
``ScalarMapper``, ``Scalars``, in ``mqttrl/plugin/scalar_storage.py``); its names stay importable here."""

from mqttrl.plugin import STEPS, ScalarMapper, Scalars, ScalarStorage

__all__ = ["STEPS", "ScalarMapper", "ScalarStorage", "Scalars"]
