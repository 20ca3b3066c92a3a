# Sourced by scripts/setup.sh, scripts/sglang-env.sh and scripts/megatron-env.sh: find_python312 prints
# the path of a Python 3.12 interpreter (CUA_PYTHON, python3.12 on PATH, or pyenv's newest 3.12), or fails.

find_python312() {
  local cand
  for cand in "${CUA_PYTHON:-}" python3.12; do
    if [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 \
       && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
      command -v "$cand"; return 0
    fi
  done
  # pyenv: use the interpreter's own path (the bare python3.12 shim fails unless 3.12 is selected).
  if command -v pyenv >/dev/null 2>&1; then
    local v
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -n 1 || true)
    if [ -n "$v" ] && [ -x "$(pyenv root)/versions/$v/bin/python3.12" ]; then
      echo "$(pyenv root)/versions/$v/bin/python3.12"; return 0
    fi
  fi
  return 1
}
