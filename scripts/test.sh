#!/usr/bin/env bash
# The test suite: sets everything up on a fresh machine, starts a real local Kafka broker (KRaft, from
# Maven Central jars), runs ruff and pytest, and stops the broker. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .

# SGLang 0.5.23 in its own venv (it cannot share this one), for the contract tests that parse what the
# project sends with SGLang's own request classes (tests/contract/test_sglang_requests.py). Cached outside
# the checkout: the first run takes ~2 minutes and 6 GB, later ones a second.
CUA_SGLANG_PYTHON=$(bash scripts/sglang-env.sh) || {
  echo "test.sh: SGLang's venv could not be made: run bash scripts/sglang-env.sh and fix what it reports" >&2
  exit 1
}
export CUA_SGLANG_PYTHON

# megatron-bridge 0.6.2 in its own venv too (it pins transformers <= 5.12.1), for the parity of its Qwen3-VL
# with the torch backend (tests/contract/test_megatron_vl.py). Cached outside the checkout: the first run
# takes ~3 minutes and 5.7 GB, later ones a second.
CUA_MEGATRON_PYTHON=$(bash scripts/megatron-env.sh) || {
  echo "test.sh: megatron-bridge's venv could not be made: run bash scripts/megatron-env.sh (it says why)" >&2
  exit 1
}
export CUA_MEGATRON_PYTHON

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
stop_engine=""
trap '.venv/bin/cua-stream broker stop --home "$broker_home" --port "$port" || true
      [ -z "$stop_engine" ] || .venv/bin/cua-stream containers stop || true' EXIT
export CUA_TEST_BOOTSTRAP_SERVERS="127.0.0.1:$port"

# The container engine for the tests that run episodes in Docker (root): cua-stream's private daemon and
# its images, built here and cached (the first build takes ~5 minutes). If it cannot start, those tests
# try again and fail saying why.
if [ "$(id -u)" = 0 ]; then
  .venv/bin/cua-stream containers status >/dev/null 2>&1 || stop_engine=1
  .venv/bin/cua-stream containers start --build >/dev/null \
    || echo "test.sh: the container engine did not start; the container tests will say why" >&2
fi

# CUA_TEST_WORKERS=N runs the tests on N pytest workers, the whole-loop and screen tests one after another
# on one of them (tests/conftest.py, HEAVY). Off by default: on this 2-core machine two workers were no
# faster than one process (58.6 against 55.4 min in all) and timed a container test out under the load.
.venv/bin/python -m pytest -n "${CUA_TEST_WORKERS:-0}" --dist loadfile "$@"
