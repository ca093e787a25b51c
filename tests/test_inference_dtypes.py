"""Central inference carries observations in their own dtype: a uint8 frame or a bool grid goes
to the server as it is (not widened to float32, 4x the bytes), and the server's request spec
takes the dtype the env gives the network."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pixel_env

from mqttrl.config import from_dict
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings
from mqttrl.wire import Rejected, decode_request, encode_json, encode_request


@pytest.mark.parametrize(
    "env_id,dtype,shape",
    [(pixel_env.PIXEL_DOT, np.uint8, (4, 16, 16)), (pixel_env.BOOL_GRID, np.bool_, (8, 8, 2))],
)
def test_an_inference_server_takes_observations_in_their_own_dtype(shared_mosquitto, env_id, dtype, shape):
    from mqttrl.nodes.inference import InferenceServer

    run = f"inf-dtype-{np.dtype(dtype).name}"
    registry = get_registry()
    cfg = from_dict(
        {"run": run, "env": {"id": env_id}, "algorithm": {"name": "dqn"}}, lambda n: registry.algorithm(n).params
    )
    server = InferenceServer(BrokerSettings(url=shared_mosquitto.url), run, "s0", backend="numpy")
    server._on_config("", encode_json(cfg.to_dict()))
    assert server.spec.fields["obs"].dtype == np.dtype(dtype).name
    assert server.spec.fields["obs"].shape == shape

    obs = np.zeros((3, *shape), dtype)
    payload = encode_request(run, "w0", 1, 0, obs, server.topics.infer_reply("w0"))
    assert len(payload) < obs.nbytes + 1024  # not widened on the way
    server._on_request("w0", payload)
    (pending,) = server._batch
    assert pending.request.obs.dtype == dtype
    out = server.forward(pending.request.obs)  # the forward takes them as they come
    assert next(iter(out.values())).shape[0] == 3
    # a float32 copy of the same observations is refused: the spec names the env's dtype
    with pytest.raises(Rejected) as ei:
        decode_request(encode_request(run, "w0", 2, 0, obs.astype(np.float32), "x"), server.spec)
    assert ei.value.reason == "dtype"
