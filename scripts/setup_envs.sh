#!/usr/bin/env bash
# Create (or refresh) the virtual environments this project is tested in, one per sglang version:
#   main           torch (CPU) + transformers, no sglang: everything except the sglang glue
#   sglang-0.5.23  the current sglang release
#   sglang-0.5.17  the eval pin whose DSPARK semantics the plugin matches
# Environments live in $DSPARK_VENVS (default: ~/.cache/sglang-dspark-plugin/venvs) and are reused
# when their requirement stamp is unchanged; this checkout is (re)installed into each, editable.
# Usage: bash scripts/setup_envs.sh [main|sglang-0.5.23|sglang-0.5.17 ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS="${DSPARK_VENVS:-$HOME/.cache/sglang-dspark-plugin/venvs}"
PY="${PYTHON:-python3}"
mkdir -p "$VENVS"

# torch 2.13.0 is the CPU build; a bare "torch" would pull a multi-GB CUDA build.
MAIN_REQS=("torch==2.13.0" "transformers>=4.56,<6" "safetensors>=0.4" "huggingface_hub>=0.24"
           "tqdm>=4.66" "matplotlib>=3.7" "pytest>=8" "hypothesis>=6.100" "ruff>=0.6" "mypy>=1.10"
           "pyyaml>=6" "prometheus_client>=0.17")
TEST_REQS=("pytest>=8" "hypothesis>=6.100" "pyyaml>=6")

make_env() {  # name, requirement...
  local name="$1"; shift
  local dir="$VENVS/$name" stamp
  stamp="$(printf '%s\n' "$@" | sha256sum | cut -c1-16)"
  if [ ! -f "$dir/.stamp" ] || [ "$(cat "$dir/.stamp")" != "$stamp" ]; then
    echo "[setup] creating $name in $dir (this can take several minutes)"
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q "$@"
    echo "$stamp" > "$dir/.stamp"
  fi
  # The checkout itself: editable, so the entry points point here. Dependencies are already in place.
  "$dir/bin/python" -m pip install -q --no-deps -e . >"$dir/.editable.log" 2>&1 \
    || { cat "$dir/.editable.log" >&2; echo "[setup] installing this checkout into $name failed" >&2; exit 1; }
  echo "[setup] $name ready: $("$dir/bin/python" -c 'import sys; print(sys.version.split()[0])')"
}

setup_one() {
  case "$1" in
    main) make_env main "${MAIN_REQS[@]}" ;;
    sglang-0.5.23) make_env sglang-0.5.23 "sglang==0.5.23" "${TEST_REQS[@]}" ;;
    sglang-0.5.17) make_env sglang-0.5.17 "sglang==0.5.17" "${TEST_REQS[@]}" ;;
  esac
}

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(main sglang-0.5.23 sglang-0.5.17)
for env in "${want[@]}"; do
  case "$env" in
    main|sglang-0.5.23|sglang-0.5.17) ;;
    *) echo "unknown environment '$env' (expected main, sglang-0.5.23 or sglang-0.5.17)" >&2; exit 2 ;;
  esac
done
# The environments are independent and their creation is mostly download and unpacking: create them
# side by side (a fresh machine then waits for the slowest, not the sum).
pids=()
for env in "${want[@]}"; do
  setup_one "$env" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
[ $failed -eq 0 ] || { echo "[setup] creating an environment failed (see above)" >&2; exit 1; }
