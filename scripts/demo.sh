#!/usr/bin/env bash
# The main job: the embedded local demo. Sets everything up on a fresh machine first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
exec .venv/bin/cua-stream demo "$@"
