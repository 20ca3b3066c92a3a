#!/usr/bin/env bash
# SGLang 0.5.23 in a venv of its own, outside the checkout (it cannot share cua-stream's: sglang pins
# openai==2.8.0, harbor's litellm needs openai>=2.20). Prints the venv's python on stdout, progress on
# stderr. Idempotent: a venv whose stamp matches is reused (a second run takes about a second).
#
#   scripts/sglang-env.sh          the contract install (tests/contract/sglang_check.py): sglang without
#                                  its dependencies, plus what its request and response classes import
#                                  (torch, transformers and a few small ones, at sglang's own pins):
#                                  measured 110-120 s and 6.0 GB the first time, on this CPU host
#   scripts/sglang-env.sh --full   the complete `pip install sglang==0.5.23` (a GPU host that serves it:
#                                  183 s, 10.4 GB); a full venv also serves the contract check
#
# CUA_SGLANG_VENV chooses the venv (default ~/.cache/cua-stream/sglang-0.5.23).
set -euo pipefail

SGLANG_VERSION=0.5.23
VENV="${CUA_SGLANG_VENV:-$HOME/.cache/cua-stream/sglang-$SGLANG_VERSION}"
mode=contract
case "${1:-}" in
  "") ;;
  --full) mode=full ;;
  *) echo "usage: $0 [--full]" >&2; exit 2 ;;
esac

# What sglang.srt.managers.io_struct, sglang.srt.sampling.sampling_params and sglang.api.v1.api_types
# import, found by importing them in a venv holding sglang alone (then each missing module's package).
# Versions come from sglang's own requirements where it pins them. fastapi and pydantic: the checker
# parses bodies the way the HTTP server's FastAPI routes do.
CONTRACT_DEPS=(
  torch torchvision transformers tokenizers numpy pydantic fastapi msgspec pyzmq orjson psutil pybase64
  requests packaging pillow tqdm ipython aiohttp dill apache-tvm-ffi sentencepiece compressed-tensors
  gguf openai partial_json_parser
)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
full_stamp="sglang==$SGLANG_VERSION full"
if [ "$mode" = full ]; then stamp=$full_stamp; else stamp="sglang==$SGLANG_VERSION contract ${CONTRACT_DEPS[*]}"; fi
python="$VENV/bin/python"

ready() {  # the venv exists and was finished by this script, in this mode (a full one serves both)
  [ -x "$python" ] || return 1
  local have
  have=$(cat "$VENV/.cua-sglang" 2>/dev/null || true)
  [ "$have" = "$stamp" ] || [ "$have" = "$full_stamp" ]
}

if ready; then
  echo "$python"
  exit 0
fi

source "$here/python312.sh"
py312=$(find_python312) || {
  echo "sglang-env: SGLang's venv needs Python 3.12: install it (pyenv install 3.12) or set CUA_PYTHON" >&2
  exit 2
}
started=$SECONDS
echo "sglang-env: installing into $VENV ($mode; the first time takes a few minutes)" >&2
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$py312" -m venv "$VENV"
fi  # else the install goes on top: a contract venv becomes a full one without downloading torch again
rm -f "$VENV/.cua-sglang"
"$python" -m pip install -q --upgrade pip >&2
if [ "$mode" = full ]; then
  "$python" -m pip install -q "sglang==$SGLANG_VERSION" >&2
else
  "$python" -m pip install -q --no-deps "sglang==$SGLANG_VERSION" >&2
  # Each dependency as sglang itself requires it (its pin, when it has one).
  mapfile -t reqs < <("$python" - "${CONTRACT_DEPS[@]}" <<'PY'
import re
import sys
from importlib.metadata import requires

def key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

pinned = {}
for req in requires("sglang") or []:
    if "extra ==" in req:
        continue
    spec = req.split(";")[0].strip()
    name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0)
    pinned[key(name)] = re.sub(r"\[.*?\]", "", spec)
for name in sys.argv[1:]:
    print(pinned.get(key(name), name))
PY
  )
  # pip lists every sglang requirement left out as a conflict: kept in a log, shown only on failure.
  "$python" -m pip install -q "${reqs[@]}" >"$VENV/.pip-install.log" 2>&1 || {
    cat "$VENV/.pip-install.log" >&2
    echo "sglang-env: installing sglang's contract dependencies failed (above)" >&2
    exit 1
  }
  "$python" -c "import sglang.srt.managers.io_struct, sglang.api.v1.api_types" 2>/dev/null || {
    echo "sglang-env: sglang's request classes do not import in $VENV (a missing dependency?)" >&2
    exit 1
  }
fi
echo "$stamp" > "$VENV/.cua-sglang"
echo "sglang-env: ready in $((SECONDS - started)) s, $(du -sh "$VENV" | cut -f1)" >&2
echo "$python"
