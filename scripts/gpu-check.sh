#!/usr/bin/env bash
# The GPU path in one prepared run (issue N): on a GPU host with only the drivers (and Python 3.12, or
# pyenv) installed, set up cua-stream's environment and SGLang's own, serve the tiny Qwen3-VL with SGLang,
# run the whole loop (scripted environment) for three GRPO steps against it, and print the logprob gap
# between trainer and engine (goal <= 0.02), step time, weight-update time and episodes per minute.
#
#   bash scripts/gpu-check.sh             # on the GPU host (about 10 minutes the first time, mostly installs)
#   bash scripts/gpu-check.sh --dry-run   # anywhere: every step but the GPU ones; the reference engine
#                                         # stands in for SGLang, whose launch flags are still checked by
#                                         # SGLang's own argument parser
#
# It stops at the first failure with one line saying what (and the log to read); exit 1.
# The trainer is megatron-bridge's Qwen3-VL (trainer.backend = megatron, its own venv: scripts/megatron-env.sh),
# on the GPU in bf16 (trainer.device = cuda; megatron-core's local modules, no Transformer Engine): the gap it
# prints is Megatron against SGLang. In a dry run the worker trains on the CPU. CUA_GPU_CHECK_TRAINER=torch
# trains with the torch backend (CPU) instead; CUA_GPU_CHECK_TRAINER_DEVICE=cpu keeps megatron on the CPU.
#
# Environment: CUA_GPU_CHECK_HOME (state, logs, report; default a new temp dir), CUA_GPU_CHECK_PORT (SGLang's
# port, default 30000), CUA_GPU_CHECK_GATEWAY_PORT (the session gateway's, default SGLang's + 1),
# CUA_SGLANG_ARGS (extra launch_server flags), CUA_GPU_CHECK_MAX_GAP (default 0.02).
# The megatron trainer's parallel layout on a multi-GPU host: CUA_GPU_CHECK_TP and CUA_GPU_CHECK_PP (default
# 1 each), passed on as trainer.tensor_parallel_size, pipeline_parallel_size and nproc_per_node = TP x PP (one
# rank per GPU; step 1 checks the host has that many). The trainer refuses at start a layout the model cannot
# take; its worker runs one rank yet, so TP x PP > 1 stops at step 6 with the worker's message (issue #53).
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
case "${1:-}" in
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "usage: bash scripts/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac

home=${CUA_GPU_CHECK_HOME:-$(mktemp -d -t cua-gpu-check.XXXXXX)}
mkdir -p "$home/logs"
port=${CUA_GPU_CHECK_PORT:-30000}
gateway_port=${CUA_GPU_CHECK_GATEWAY_PORT:-$((port + 1))}
max_gap=${CUA_GPU_CHECK_MAX_GAP:-0.02}
export CUA_HOME="$home"
t0=$(date +%s)
engine_pid=

say() { echo "gpu-check: $*"; }
fail() {  # one line saying what failed, then the end
  echo "gpu-check: FAILED at $*" >&2
  exit 1
}
cleanup() {
  if [ -n "$engine_pid" ]; then kill -- "-$engine_pid" 2>/dev/null || kill "$engine_pid" 2>/dev/null; fi
  if [ -x .venv/bin/cua-stream ]; then .venv/bin/cua-stream broker stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

wait_for() {  # URL SECONDS: until it answers 200
  local url=$1 until=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$until" ]; do
    curl -fsS -o /dev/null --max-time 5 "$url" 2>/dev/null && return 0
    if [ -n "$engine_pid" ] && ! kill -0 "$engine_pid" 2>/dev/null; then return 1; fi
    sleep 2
  done
  return 1
}

tp=${CUA_GPU_CHECK_TP:-1}
pp=${CUA_GPU_CHECK_PP:-1}
ranks=$((tp * pp))
if [ "$ranks" -gt 1 ]; then
  export CUA_TRAINER_TENSOR_PARALLEL_SIZE="$tp" CUA_TRAINER_PIPELINE_PARALLEL_SIZE="$pp" CUA_TRAINER_NPROC_PER_NODE="$ranks"
fi

# 1. the GPU
if [ "$dry" = 1 ]; then
  say "1/7 GPU: skipped (--dry-run)"
else
  gpus=$(nvidia-smi -L 2>/dev/null) || fail "1/7 GPU: nvidia-smi finds no GPU (install the NVIDIA driver, or use --dry-run)"
  [ "$(echo "$gpus" | wc -l)" -ge "$ranks" ] || fail "1/7 GPU: the layout TP=$tp x PP=$pp needs $ranks GPUs, nvidia-smi lists $(echo "$gpus" | wc -l)"
  say "1/7 GPU: $(echo "$gpus" | head -n 1) (layout TP=$tp x PP=$pp)"
fi

# 2. cua-stream's environment (Python 3.12 venv, pinned packages) and a JDK for the Kafka broker
say "2/7 cua-stream's environment (.venv; first time: a few minutes)"
if ! command -v java >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      openjdk-17-jre-headless; } >"$home/logs/apt.log" 2>&1 || fail "2/7 installing a JDK for Kafka (see $home/logs/apt.log)"
fi
(CUA_SETUP_PACKAGES=0 source scripts/setup.sh) >"$home/logs/setup.log" 2>&1 || fail "2/7 cua-stream's setup (see $home/logs/setup.log)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True

# 3. SGLang's own environment (it cannot share one with Harbor: scripts/sglang-env.sh)
if [ "$dry" = 1 ]; then
  say "3/7 SGLang's environment (the request classes only: --dry-run)"
  sglang_py=$(bash scripts/sglang-env.sh 2>"$home/logs/sglang-env.log") || fail "3/7 SGLang's environment (see $home/logs/sglang-env.log)"
else
  say "3/7 SGLang's environment (the whole server; first time: ~3 minutes, ~10 GB)"
  sglang_py=$(bash scripts/sglang-env.sh --full 2>"$home/logs/sglang-env.log") || fail "3/7 SGLang's environment (see $home/logs/sglang-env.log)"
fi
sglang_py=$(echo "$sglang_py" | tail -n 1)
trainer=${CUA_GPU_CHECK_TRAINER:-megatron}
trainer_device=cpu
if [ "$dry" = 0 ] && [ "$trainer" = megatron ]; then trainer_device=${CUA_GPU_CHECK_TRAINER_DEVICE:-cuda}; fi
if [ "$trainer" = megatron ]; then  # megatron-bridge pins its own transformers: a venv of its own too
  say "3/7 megatron-bridge's environment (first time: ~3 minutes, ~6 GB)"
  CUA_MEGATRON_PYTHON=$(bash scripts/megatron-env.sh 2>"$home/logs/megatron-env.log" | tail -n 1) \
    || fail "3/7 megatron-bridge's environment (see $home/logs/megatron-env.log)"
  export CUA_MEGATRON_PYTHON
fi

# 4. the tiny Qwen3-VL (random weights, the real vocabulary; no hub)
model=$(.venv/bin/python -c 'from cua_stream.app.demo import tiny_model_dir; print(tiny_model_dir())' 2>"$home/logs/model.log") \
  || fail "4/7 building the tiny model (see $home/logs/model.log)"
say "4/7 tiny model: $model"

# 5. the engine: SGLang serving it on the GPU (in a dry run, the reference engine in its place)
# shellcheck disable=SC2206
sglang_args=(--model-path "$model" --host 127.0.0.1 --port "$port" --dtype bfloat16 --mem-fraction-static 0.3
  ${CUA_SGLANG_ARGS:-})
"$sglang_py" - "${sglang_args[@]}" >"$home/logs/sglang-args.log" 2>&1 <<'EOF' || fail "5/7 SGLang refuses its launch flags (see $home/logs/sglang-args.log)"
import sys
from sglang.srt.server_args import prepare_server_args
args = prepare_server_args(sys.argv[1:])
print("parsed:", args.model_path, args.port, args.dtype)
EOF
if [ "$dry" = 1 ]; then
  say "5/7 engine: SGLang's parser accepts its flags; the reference engine serves in its place (--dry-run)"
  setsid .venv/bin/cua-stream engine "$model" --port "$port" >"$home/logs/engine.log" 2>&1 &
  engine_pid=$!
  wait_for "http://127.0.0.1:$port/health" 120 || fail "5/7 the reference engine did not start (see $home/logs/engine.log)"
else
  say "5/7 engine: SGLang ${sglang_args[*]}"
  setsid "$sglang_py" -m sglang.launch_server "${sglang_args[@]}" >"$home/logs/engine.log" 2>&1 &
  engine_pid=$!
  wait_for "http://127.0.0.1:$port/health_generate" 300 || fail "5/7 SGLang did not serve (see $home/logs/engine.log)"
fi

# 6. the loop: broker, topics, gateway, producer (scripted environment), scorer, trainer; 3 GRPO steps
say "6/7 the loop: 3 GRPO steps ($trainer trainer on $trainer_device) against http://127.0.0.1:$port (logs in $home)"
timeout 600 .venv/bin/cua-stream demo --environment scripted --steps 3 --engine-url "http://127.0.0.1:$port" \
  --trainer-backend "$trainer" --trainer-device "$trainer_device" \
  --gateway-port "$gateway_port" --report "$home/report.json" --no-keep-broker >"$home/logs/demo.log" 2>&1 \
  || fail "6/7 the loop (see $home/logs/demo.log)"

# 7. the numbers
say "7/7 numbers (from $home/report.json):"
.venv/bin/python - "$home/report.json" "$max_gap" <<'EOF' || fail "7/7 the numbers are off their goals (above)"
import json, statistics, sys
report, max_gap = json.load(open(sys.argv[1])), float(sys.argv[2])
steps = report["steps"]
gaps = [s["metrics"].get("logprob_gap", float("nan")) for s in steps]
train = [s["metrics"].get("train_s", float("nan")) for s in steps]
push = [s["metrics"]["previous_push_s"] for s in steps if "previous_push_s" in s["metrics"]]
print(f"  steps: {len(steps)}; the engine serves v{report['served_version']}")
print(f"  logprob gap trainer-engine: max {max(gaps):.4f}, per step {', '.join(f'{g:.4f}' for g in gaps)} (goal <= {max_gap})")
print(f"  step (train) time: median {statistics.median(train):.2f} s")
print(f"  weight update: median {statistics.median(push):.2f} s" if push else "  weight update: not measured")
print(f"  episodes per minute: {report['episodes_per_min']} ({report['episodes']} in {report['wall_s']:.0f} s)")
ok = len(steps) == 3 and str(report["served_version"]) == "3" and max(gaps) <= max_gap
sys.exit(0 if ok else 1)
EOF
say "passed in $(( $(date +%s) - t0 )) s"
