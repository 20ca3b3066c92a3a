#!/usr/bin/env bash
# Megatron's Qwen3-VL trained on a GPU host that reaches no package index (issue N): the trainer's half of
# scripts/gpu-check.sh, for a host where SGLang's environment (6 GB) cannot be installed or carried. The
# probe (scripts/megatron_gpu_probe.py) trains megatron-bridge's Qwen3-VL in bf16 against a bf16 engine
# (transformers' Qwen3-VL on the same GPU) for three GRPO steps and prints the logprob gap, step time and
# weight-update time; then the float32 control, where the gap is rounding only.
#
#   bash scripts/megatron-gpu-probe.sh pack            # here (a network): wheels into .whl/, the tiny
#                                                      # model's files (not its weights) into .gpu/
#   bash scripts/megatron-gpu-probe.sh run [OUT_DIR]   # there, in the checkout with .whl/ and .gpu/ beside it
#
# `run` needs a Python 3.12 with torch (a CUDA build), numpy, pillow, safetensors, huggingface_hub, einops,
# regex and pyyaml (the host's python3, or CUA_PROBE_PYTHON; the lent GPU machine's image holds them): megatron-core 0.19.2, megatron-bridge 0.6.2 and transformers 5.12.1 go in
# from the wheels, into /tmp/cua-probe-site (on PYTHONPATH, ahead of the host's own transformers).
# Exit 1 when a gap is over its goal (bf16 0.02, the seed's live check measured 0.012-0.017; float32 1e-3)
# or an update did not reach the engine. CUA_PROBE_DEVICE: default cuda (cpu for a try on any host);
# CUA_PROBE_SHAPE: tiny (default) or mid (804M parameters: the probe's MID_SHAPE).
set -euo pipefail
cd "$(dirname "$0")/.."

wheels=(transformers==5.12.1 tokenizers==0.22.2 megatron-core==0.19.2 megatron-bridge==0.6.2 omegaconf==2.4.0
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0)

case "${1:-}" in
  pack)
    for d in .whl .gpu; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude; done
    rm -rf .whl .gpu && mkdir -p .whl .gpu/tiny-files
    # the GPU host's CPU is x86-64 and its Python 3.12: wheels for it, whatever this host is
    platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
      manylinux2014_x86_64; do platforms+=(--platform "$p"); done
    .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d .whl "${wheels[@]}"
    model=$(.venv/bin/python -c 'from cua_stream.app.demo import tiny_model_dir; print(tiny_model_dir())')
    find "$model" -maxdepth 1 -type f ! -name '*.safetensors' -exec cp {} .gpu/tiny-files/ \;
    echo "packed: $(du -sh .whl | cut -f1) of wheels, $(du -sh .gpu | cut -f1) of model files (the weights are made there)"
    ;;
  run)
    out=${2:-$(mktemp -d -t cua-gpu-probe.XXXXXX)}
    mkdir -p "$out"
    py=${CUA_PROBE_PYTHON:-python3}
    device=${CUA_PROBE_DEVICE:-cuda}
    shape=${CUA_PROBE_SHAPE:-tiny}
    [ -d .whl ] && [ -d .gpu/tiny-files ] || { echo "megatron-gpu-probe: no .whl/ or .gpu/: run 'pack' first" >&2; exit 2; }
    site=/tmp/cua-probe-site
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
    status=0
    "$py" scripts/megatron_gpu_probe.py .gpu/tiny-files --device "$device" --shape "$shape" --steps 3 \
      --report "$out/report-bf16.json" >"$out/probe-bf16.log" 2>&1 || status=1
    "$py" scripts/megatron_gpu_probe.py .gpu/tiny-files --device "$device" --shape "$shape" --steps 2 --dtype float32 --max-gap 1e-3 \
      --report "$out/report-fp32.json" >"$out/probe-fp32.log" 2>&1 || status=1
    for log in "$out/probe-bf16.log" "$out/probe-fp32.log"; do
      echo "== $log"
      grep -E '^(step=|device:|logprob gap|engine|step_s|update_s|export_s|reload_s|sample_s|FAILED)' "$log" \
        || tail -n 20 "$log"
    done
    exit "$status"
    ;;
  *)
    echo "usage: bash scripts/megatron-gpu-probe.sh pack | run [OUT_DIR]" >&2
    exit 2
    ;;
esac
