# Sourced by scripts/demo.sh and scripts/test.sh: find Python 3.12, create .venv, install cua-stream.
# Idempotent: reinstalls only when pyproject.toml or constraints.txt changed since the last install.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/python312.sh"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  PY312=$(find_python312) || {
    echo "error: cua-stream needs Python 3.12 (Harbor 0.26 requires it). Install it (e.g. pyenv install 3.12)" \
         "or point CUA_PYTHON at a 3.12 interpreter." >&2
    exit 2
  }
  echo "setup: creating .venv with $PY312"
  rm -rf .venv
  "$PY312" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi

# constraints.txt pins every package the tests ran with (transitive ones too): a fresh machine installs
# the same set, and the self-contained image built from this .venv stays cached across machines' runs.
stamp=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.cua-installed 2>/dev/null || true)" != "$stamp" ]; then
  echo "setup: installing cua-stream and its pinned dependencies (first time: a few minutes, ~6 GB with torch)"
  # The docs extra (MkDocs, Material) too: the test suite builds the docs site (tests/unit/test_docs.py).
  .venv/bin/python -m pip install -q -e '.[dev,megatron,s3,docs]' -c constraints.txt
  echo "$stamp" > .venv/.cua-installed
fi

# MiniWoB++, whose pages the miniwob/* tasks serve: pinned with its hash, without its dependencies (its
# html/ is all cua-stream uses; gymnasium and selenium are not needed), and not vendored (one of its files
# is GPL-3.0). Stamped like the install above, so a second run does nothing.
mw_requirements=cua_stream/tasks/miniwob/requirements.txt
mw_stamp=$(sha256sum "$mw_requirements" | cut -d' ' -f1)
if [ "$(cat .venv/.cua-miniwob 2>/dev/null || true)" != "$mw_stamp" ]; then
  echo "setup: installing MiniWoB++ (pinned, hash-checked, without its dependencies)"
  .venv/bin/python -m pip install -q --no-deps --require-hashes -r "$mw_requirements"
  echo "$mw_stamp" > .venv/.cua-miniwob
fi

# The system packages below (desktop, container engine, Node.js) are for episodes on a screen and for the
# tests; CUA_SETUP_PACKAGES=0 skips them (scripts/gpu-check.sh: its loop runs the scripted environment).
apt_ok() { [ "${CUA_SETUP_PACKAGES:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

# The local desktop's Debian packages (cua_stream/desktop/packages.txt), installed when a program is
# missing and we may: as root, with apt-get. Otherwise `cua-stream desktop doctor` says what to do.
desktop_missing=$(awk -F'\t' '!/^#/ && NF == 2 {print $1}' cua_stream/desktop/packages.txt | while read -r p; do
  command -v "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$desktop_missing" ] && apt_ok; then
  echo "setup: installing the local desktop's packages (missing: $(echo $desktop_missing | tr '\n' ' '))"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    $(awk -F'\t' '!/^#/ && NF == 2 {print $2}' cua_stream/desktop/packages.txt | sort -u) >/dev/null
fi

# The container engine (episodes in Harbor's docker environment: `cua-stream containers start`): Debian's
# Docker Engine and debootstrap (the base image is made from Debian's packages: no registry is reachable).
if { ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; } && apt_ok; then
  echo "setup: installing the container engine's packages (docker.io, debootstrap)"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io debootstrap >/dev/null
fi

# Node.js runs the dashboard's page script in its unit test (tests/unit/test_dashboard_render.py).
if ! command -v node >/dev/null 2>&1 && apt_ok; then
  echo "setup: installing nodejs (the dashboard script's test)"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs >/dev/null
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
