#!/usr/bin/env bash
# The whole test suite, set-up included: bash scripts/test.sh
#   1. creates/refreshes the three test environments side by side (scripts/setup_envs.sh; first run:
#      ~10-15 min, then seconds)
#   2. the code checks (ruff lint and format, mypy, the size limits of scripts/check_sizes.py), then
#      pytest on everything that needs no sglang, in the sglang-free environment
#   3. pytest tests/sglang against the REAL sglang 0.5.23 and 0.5.17, including real served rounds:
#      sglang's engine on CPU (tests/sglang/test_served.py, ~10-15 min per version on 2 cores)
# Any failure, and any skipped test, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS="${DSPARK_VENVS:-$HOME/.cache/sglang-dspark-plugin/venvs}"
bash scripts/setup_envs.sh

status=0
echo "== ruff (lint, format)"
"$VENVS/main/bin/ruff" check sglang_dspark_plugin tests scripts || status=1
"$VENVS/main/bin/ruff" format --check sglang_dspark_plugin tests scripts || status=1
echo "== mypy"
"$VENVS/main/bin/python" -m mypy || status=1
echo "== sizes"
"$VENVS/main/bin/python" scripts/check_sizes.py || status=1
echo "== core (no sglang)"
"$VENVS/main/bin/python" -m pytest tests --ignore=tests/sglang -q "$@" || status=1
for v in 0.5.23 0.5.17; do
  echo "== sglang $v"
  DSPARK_EXPECT_SGLANG="$v" "$VENVS/sglang-$v/bin/python" -m pytest tests/sglang -q "$@" || status=1
done
exit $status
