#!/usr/bin/env bash
# The test suite: sets everything up on a fresh machine, starts a real local Kafka broker (KRaft, from
# Maven Central jars), runs ruff and pytest, and stops the broker. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .

# Two consecutive free ports: the client listener and the KRaft controller.
port=$(.venv/bin/python - <<'PY'
import socket
for p in range(29092, 29992, 2):
    ok = True
    for q in (p, p + 1):
        with socket.socket() as s:
            ok &= s.connect_ex(("127.0.0.1", q)) != 0
    if ok:
        print(p)
        break
PY
)
broker_home="$PWD/.cua/test-broker"
.venv/bin/cua-stream broker start --home "$broker_home" --port "$port" --fresh
trap '.venv/bin/cua-stream broker stop --home "$broker_home" --port "$port" || true' EXIT
export CUA_TEST_BOOTSTRAP_SERVERS="127.0.0.1:$port"

.venv/bin/python -m pytest "$@"
