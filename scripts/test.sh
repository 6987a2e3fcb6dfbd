#!/usr/bin/env bash
# The whole test suite, set-up included: bash scripts/test.sh
#   1. creates/refreshes the three test environments side by side (scripts/setup_envs.sh; first run:
#      ~4-15 min, then seconds)
#   2. the code checks (ruff lint and format, mypy, the size limits of scripts/check_sizes.py), then
#      pytest on everything that needs no sglang, in the sglang-free environment, one worker a core
#   3. pytest tests/sglang against the REAL sglang 0.5.23 and 0.5.17, including real served rounds:
#      sglang's engine on CPU. The two suites run side by side (each in its own environment, its own
#      temporary folders and ports; their logs are printed whole, one after the other, when both end):
#      most of their time is engine start-up and single-threaded CPU rounds, so two of them share the
#      machine's cores instead of queueing. DSPARK_SGLANG_SERIAL=1 runs them one after the other.
# Any failure, and any skipped test, fails the run. The end prints each stage's wall time and the total
# of passed and failed tests over every suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENVS="${DSPARK_VENVS:-$HOME/.cache/sglang-dspark-plugin/venvs}"
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/dspark-test.XXXXXX")"
trap 'rm -rf "$LOGS"' EXIT
START=$(date +%s)
TIMES=()
status=0

timed() {  # name command...: run it, record its wall time and outcome
  local name="$1" t0 rc
  shift
  t0=$(date +%s)
  set +e
  "$@"
  rc=$?
  set -e
  TIMES+=("$(printf '%-22s %5ds  %s' "$name" $(($(date +%s) - t0)) "$([ $rc -eq 0 ] && echo ok || echo "FAILED ($rc)")")")
  [ $rc -eq 0 ] || status=1
  return 0
}

lint() {
  "$VENVS/main/bin/ruff" check sglang_dspark_plugin tests scripts &&
    "$VENVS/main/bin/ruff" format --check sglang_dspark_plugin tests scripts
}

core_suite() {  # pytest on everything that needs no sglang, shown as it runs and kept for the total;
  # one worker a core (pytest-xdist, at most 4: each holds its own torch), DSPARK_CORE_WORKERS overrides
  local workers="${DSPARK_CORE_WORKERS:-$(n=$(nproc); echo $((n < 4 ? n : 4)))}"
  "$VENVS/main/bin/python" -m pytest tests --ignore=tests/sglang -q --durations=10 -n "$workers" "$@" 2>&1 |
    tee "$LOGS/core.log"
}

sglang_suite() {  # version [pytest args]: tests/sglang in that version's environment, into its own log
  local v="$1"
  shift
  DSPARK_EXPECT_SGLANG="$v" "$VENVS/sglang-$v/bin/python" -m pytest tests/sglang -q --durations=15 \
    --basetemp="$LOGS/tmp-$v" "$@" >"$LOGS/sglang-$v.log" 2>&1
}

timed "set-up" bash scripts/setup_envs.sh
echo "== ruff (lint, format)"
timed "ruff" lint
echo "== mypy"
timed "mypy" "$VENVS/main/bin/python" -m mypy
echo "== sizes"
timed "sizes" "$VENVS/main/bin/python" scripts/check_sizes.py
echo "== core (no sglang)"
timed "core" core_suite "$@"

if [ "${DSPARK_SGLANG_SERIAL:-0}" = 1 ]; then
  for v in 0.5.23 0.5.17; do
    timed "sglang $v" sglang_suite "$v" "$@"
  done
else
  echo "== sglang 0.5.23 and 0.5.17, side by side (logs below when both end)"
  t0=$(date +%s)
  sglang_suite 0.5.23 "$@" & p23=$!
  sglang_suite 0.5.17 "$@" & p17=$!
  rc23=0; rc17=0
  wait $p23 || rc23=$?
  wait $p17 || rc17=$?
  both=$(($(date +%s) - t0))
  TIMES+=("$(printf '%-22s %5ds  %s' "sglang 0.5.23 + 0.5.17" "$both" \
    "$([ $rc23 -eq 0 ] && [ $rc17 -eq 0 ] && echo ok || echo "FAILED (0.5.23: $rc23, 0.5.17: $rc17)")")")
  [ $rc23 -eq 0 ] && [ $rc17 -eq 0 ] || status=1
fi
for v in 0.5.23 0.5.17; do
  echo "== sglang $v"
  cat "$LOGS/sglang-$v.log"
done

echo
echo "== stage times (wall)"
printf '%s\n' "${TIMES[@]}"
printf '%-22s %5ds\n' "total" $(($(date +%s) - START))
# One line over every suite (errors count as failed), printed last.
cat "$LOGS"/core.log "$LOGS"/sglang-*.log | awk '
  /^[0-9]+ (passed|failed|errors?)/ {
    for (i = 1; i < NF; i++) {
      if ($(i + 1) ~ /^passed/) passed += $i
      if ($(i + 1) ~ /^(failed|errors?)/) failed += $i
    }
  }
  END { printf "total: %d passed, %d failed\n", passed, failed }'
exit $status
