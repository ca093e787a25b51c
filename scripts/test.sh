#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian machine, then runs it.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k wire`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Real servers the integration tests start on free ports, and iproute2 for hosts as network
# namespaces (tests/test_hosts.py), faketime (and its libfaketime: tests/test_game_speed_faketime.py), wine64 for a Windows CPython (tests/test_windows_worker.py; Debian puts
# it in /usr/lib/wine, off PATH): binary -> Debian package
missing=()
for pair in mosquitto:mosquitto victoria-metrics:victoria-metrics influxd:influxdb nats-server:nats-server prometheus:prometheus Xvfb:xvfb xdotool:xdotool ip:iproute2 wine64:wine64 faketime:faketime; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/lib/wine/${pair%%:*}" ] || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages for the integration tests: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # policy-rc.d may forbid starting services in containers; the tests start their own
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first, pinned: an unpinned torch pulls several GB of CUDA packages
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
# lint and format first: a failure names the command that fixes it
.venv/bin/ruff check . || { echo "ruff check failed: .venv/bin/ruff check --fix . fixes most"; exit 1; }
.venv/bin/ruff format --check . || { echo "ruff format failed: run .venv/bin/ruff format ."; exit 1; }
# the floors and no import circles (pyproject.toml's [tool.importlinter])
lint=$(.venv/bin/lint-imports --no-cache 2>&1) || { echo "$lint" | sed -n '/Broken contracts/,$p'; echo "lint-imports failed: an import breaks a floor or makes a circle (pyproject.toml [tool.importlinter])"; exit 1; }
# the plugin toolkit, the wire and the built-in plugins type-check (pyproject.toml's [tool.mypy])
.venv/bin/mypy || { echo "mypy failed: a type error in mqttrl/plugin, mqttrl/wire or plugins (pyproject.toml [tool.mypy])"; exit 1; }
exec .venv/bin/python -m pytest -q "$@"
