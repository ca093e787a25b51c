#!/usr/bin/env bash
# The README's after-training commands after a failed launch of each kind (issue 33; docs/cli.md,
# "After a failed launch"). Trains CartPole once (~30 s), then fails on purpose; writes runs/ and cartpole.onnx.
cd "$(dirname "$0")/.."
V=${VENV:-.venv}/bin
step() { echo; echo "\$ $*"; "$@" 2>&1 | grep -v " INFO " | tail -${TAILN:-6}; echo "[exit ${PIPESTATUS[0]}]"; }
step $V/mqttrl train configs/cartpole_dqn.toml --no-progress
sleep 1
step $V/mqttrl train configs/cartpole_dqn.toml --set env.id=CartPole-v9
step $V/mqttrl train configs/cartpole_dqn.toml --set env.id=LunarLander-v3
step $V/mqttrl train configs/cartpole_dqn.toml --set env.id=Pendulum-v1
step $V/mqttrl train configs/pendulum_sac.toml --set algorithm.name=dqn
step $V/mqttrl train configs/cartpole_dqn.toml --run-dir runs/cartpole-typo --resume
echo; echo '$ python: the threads example of docs/python-api.md (stop at once)'
$V/python - <<'PY' 2>&1 | tail -3
import threading
from concurrent.futures import ThreadPoolExecutor
import mqttrl
stop = threading.Event()
pool = ThreadPoolExecutor(1)
job = pool.submit(mqttrl.train, "configs/cartpole_dqn.toml", progress=False, stop=stop)
stop.set()
result = job.result()
print("stop_reason", result.stop_reason, "run_dir", result.run_dir)
PY
echo; echo '$ ls runs'; ls runs
step $V/mqttrl enjoy runs/cartpole-dqn --episodes 2
echo; echo '$ python -c load_policy'
$V/python -c 'import mqttrl; p = mqttrl.load_policy("runs/cartpole-dqn"); print(p.source.path); print(p.source.reason)' 2>&1 | grep -v INFO
TAILN=12 step $V/mqttrl compare runs/cartpole-dqn-*
step $V/mqttrl export runs/cartpole-dqn -o cartpole.onnx
