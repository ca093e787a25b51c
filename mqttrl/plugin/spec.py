"""The plugin hooks. A plugin module implements any of them with ``@hookimpl``.

A third-party package adds algorithms, environments or storages by declaring an
entry point in the ``mqttrl`` group that names its module::

    [project.entry-points.mqttrl]
    my_algo = "my_package.mqttrl_plugin"
"""

import pluggy

hookspec = pluggy.HookspecMarker("mqttrl")
hookimpl = pluggy.HookimplMarker("mqttrl")


@hookspec
def mqttrl_register_algorithms(register):
    """Register algorithms: call ``register(AlgorithmInfo)`` once for each.

    An :class:`mqttrl.algorithm.AlgorithmInfo` names the algorithm, its
    hyperparameter class, its mode (async off-policy or sync on-policy) and
    factories for its sample spec, worker-side actor and learner.
    """


@hookspec
def mqttrl_register_envs(register):
    """Register environments: call ``register(name, factory, description)``.

    ``name`` is an exact env id (``"MyGame-v0"``) or a namespace ending in
    ``/`` (``"mygame/"``), in which case ``factory(rest_of_id, **kwargs)`` is
    called for ids starting with it. A plain factory is called as
    ``factory(**kwargs)`` and must return a gymnasium.Env.
    """


@hookspec
def mqttrl_register_storages(register):
    """Register telemetry sinks: call ``register(name, factory, description)``.

    ``factory(settings: dict)`` returns an object with ``write(measurement,
    tags, fields, time)`` and ``close()``.
    """
