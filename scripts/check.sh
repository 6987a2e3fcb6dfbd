#!/usr/bin/env bash
# The main job, set-up included: bash scripts/check.sh [dspark-harvest check options]
# Installs the package (CPU torch, no sglang) into the `main` environment of scripts/setup_envs.sh,
# then runs `dspark-harvest check` on the embedded tiny target and drafters (or on --target/--draft).
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS="${DSPARK_VENVS:-$HOME/.cache/sglang-dspark-plugin/venvs}"
bash scripts/setup_envs.sh main >&2
exec "$VENVS/main/bin/dspark-harvest" check "$@"
