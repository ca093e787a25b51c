#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian machine, then runs it.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k wire`).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mosquitto >/dev/null 2>&1; then
  echo "installing mosquitto (Debian package) for the integration tests"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mosquitto >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first, pinned: an unpinned torch pulls several GB of CUDA packages
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest -q "$@"
