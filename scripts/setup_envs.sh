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

# What each environment installs is read from pyproject.toml (its extras and [tool.sglang-dspark-plugin.envs]
# pins; scripts/env_spec.py), so the test environments install the package's own extras and the pins live
# in one place.
spec() { "$PY" scripts/env_spec.py "$@"; }

make_env() {  # name
  local name="$1"
  local dir="$VENVS/$name" stamp listed reqs
  stamp="$(spec stamp "$name")"
  listed="$(spec requirements "$name")"
  mapfile -t reqs <<<"$listed"
  if [ ! -f "$dir/.stamp" ] || [ "$(cat "$dir/.stamp")" != "$stamp" ]; then
    echo "[setup] creating $name in $dir: ${reqs[*]} (this can take several minutes)"
    rm -rf "$dir"
    "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q "${reqs[@]}"
    echo "$stamp" > "$dir/.stamp"
  fi
  # The checkout itself: editable, so the entry points point here. Dependencies are already in place.
  "$dir/bin/python" -m pip install -q --no-deps -e . >"$dir/.editable.log" 2>&1 \
    || { cat "$dir/.editable.log" >&2; echo "[setup] installing this checkout into $name failed" >&2; exit 1; }
  echo "[setup] $name ready: $("$dir/bin/python" -c 'import sys; print(sys.version.split()[0])')"
}

known="$(spec names)"
want=("$@")
[ ${#want[@]} -eq 0 ] && mapfile -t want <<<"$known"
for env in "${want[@]}"; do
  grep -qxF -- "$env" <<<"$known" \
    || { echo "unknown environment '$env' (expected one of: $(echo $known))" >&2; exit 2; }
done
# The environments are independent and their creation is mostly download and unpacking: create them
# side by side (a fresh machine then waits for the slowest, not the sum).
pids=()
for env in "${want[@]}"; do
  make_env "$env" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
[ $failed -eq 0 ] || { echo "[setup] creating an environment failed (see above)" >&2; exit 1; }
