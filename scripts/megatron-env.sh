#!/usr/bin/env bash
# megatron-bridge 0.6.2 (with megatron-core 0.19.2) in a venv of its own, outside the checkout: it cannot
# share cua-stream's (megatron-bridge pins transformers <= 5.12.1; cua-stream runs 5.24). Prints the venv's
# python on stdout, progress on stderr. Idempotent: a venv whose stamp matches is reused.
#
# Both packages go in without their dependencies (their full sets pull CUDA-only builds: flashinfer,
# transformer-engine, nvidia-resiliency-ext, plus wandb, mlflow, diffusers...), then only what
# `from megatron.bridge import AutoBridge` and its Qwen3-VL model code import, found by importing them in
# a venv holding megatron alone: torch, transformers at megatron-bridge's pin, omegaconf and a few small
# ones. Measured on this CPU host (no pip cache): 155 s and 5.7 GB the first time, almost all of it torch
# (PyPI's Linux wheel is the CUDA build; download.pytorch.org's CPU wheels were not reachable from here).
# transformer-engine is not installed: its torch extension (transformer-engine-torch) is source-only and
# builds with CUDA; consumers/trainer/backends/megatron/worker.py stands in megatron-core's local modules
# for it.
#
# CUA_MEGATRON_VENV chooses the venv (default ~/.cache/cua-stream/megatron-bridge-0.6.2).
set -euo pipefail

BRIDGE_VERSION=0.6.2
CORE_VERSION=0.19.2
TORCH_SPEC="torch<=2.14.1"
VENV="${CUA_MEGATRON_VENV:-$HOME/.cache/cua-stream/megatron-bridge-$BRIDGE_VERSION}"
# transformers: megatron-bridge 0.6.2 requires >=5.8,<=5.12.1; the newest it allows.
DEPS=("$TORCH_SPEC" "transformers==5.12.1" numpy packaging einops pillow omegaconf safetensors)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
stamp="megatron-bridge==$BRIDGE_VERSION megatron-core==$CORE_VERSION ${DEPS[*]}"
python="$VENV/bin/python"

if [ -x "$python" ] && [ "$(cat "$VENV/.cua-megatron" 2>/dev/null || true)" = "$stamp" ]; then
  echo "$python"
  exit 0
fi

source "$here/python312.sh"
py312=$(find_python312) || {
  echo "megatron-env: megatron-bridge needs Python 3.12: install it (pyenv install 3.12) or set CUA_PYTHON" \
    >&2
  exit 2
}
started=$SECONDS
echo "megatron-env: installing into $VENV (the first time takes a few minutes)" >&2
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$py312" -m venv "$VENV"
fi
rm -f "$VENV/.cua-megatron"
"$python" -m pip install -q --upgrade pip >&2
"$python" -m pip install -q "${DEPS[@]}" >&2
# pip lists each requirement left out as a conflict: kept in a log, shown only on failure.
"$python" -m pip install -q --no-deps "megatron-core==$CORE_VERSION" "megatron-bridge==$BRIDGE_VERSION" \
  >"$VENV/.pip-install.log" 2>&1 || {
  cat "$VENV/.pip-install.log" >&2
  echo "megatron-env: installing megatron-core / megatron-bridge failed (above)" >&2
  exit 1
}
"$python" "$here/../consumers/trainer/backends/megatron/worker.py" --check-imports >"$VENV/.check-imports.log" 2>&1 || {
  cat "$VENV/.check-imports.log" >&2
  echo "megatron-env: megatron-bridge's Qwen3-VL code does not import in $VENV (a missing dependency?)" >&2
  exit 1
}
echo "$stamp" > "$VENV/.cua-megatron"
echo "megatron-env: ready in $((SECONDS - started)) s, $(du -sh "$VENV" | cut -f1)" >&2
echo "$python"
