#!/usr/bin/env bash
# The whole test suite, set-up included: bash scripts/test.sh
#   1. creates/refreshes the three test environments side by side (scripts/setup_envs.sh; first run:
#      ~4-15 min, then seconds)
#   2. the code checks (ruff lint and format, mypy, the size limits of scripts/check_sizes.py), then
#      pytest on everything that needs no sglang, in the sglang-free environment, one worker a core
#   3. pytest tests/sglang against the REAL sglang 0.5.23 and 0.5.17, including real served rounds:
#      sglang's engine on CPU. Three jobs run side by side: 0.5.23's served cases (test_served.py,
#      test_served_load.py), the rest of 0.5.23's suite, and 0.5.17's whole suite (each in its version's
#      environment, with its own temporary folders and ports; their logs are printed whole, one after
#      the other, when all end): most of their time is engine start-up and single-threaded CPU rounds,
#      so they share the machine's cores instead of queueing. DSPARK_SGLANG_SERIAL=1 runs each version's
#      suite whole, one after the other.
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
  local workers="${DSPARK_CORE_WORKERS:-$(n=$(nproc); echo $((n < 4 ? n : 4)))}" rc=0
  "$VENVS/main/bin/python" -m pytest tests --ignore=tests/sglang -q --durations=10 -n "$workers" "$@" 2>&1 |
    tee "$LOGS/core.log" || rc=$?
  [ $rc -eq 5 ] && [ "$FILTERED" = 1 ] && rc=0  # as in sglang_suite
  return $rc
}

sglang_suite() {  # name version [pytest args]: pytest in that version's environment, into the name's log
  local name="$1" v="$2" rc=0
  shift 2
  DSPARK_EXPECT_SGLANG="$v" "$VENVS/sglang-$v/bin/python" -m pytest -q --durations=15 \
    --basetemp="$LOGS/tmp-$name" "$@" >"$LOGS/sglang-$name.log" 2>&1 || rc=$?
  # pytest's 5 (no test collected) is a failure unless the caller's own arguments (-k ...) left none
  [ $rc -eq 5 ] && [ "$FILTERED" = 1 ] && rc=0
  return $rc
}

FILTERED=$([ $# -gt 0 ] && echo 1 || echo 0)
SERVED_FILES=(tests/sglang/test_served.py tests/sglang/test_served_load.py)
IGNORE_SERVED=("${SERVED_FILES[@]/#/--ignore=}")
# The side-by-side jobs, name|version: 0.5.23's suite is the longest (its release serves more cases),
# so its served cases run as a job of their own: three jobs keep both cores busy to the end.
JOBS=("0.5.23-served|0.5.23" "0.5.23-rest|0.5.23" "0.5.17|0.5.17")
job_paths() {  # name: the tests that job runs
  case "$1" in
    *-served) echo "${SERVED_FILES[*]}" ;;
    *-rest) echo "tests/sglang ${IGNORE_SERVED[*]}" ;;
    *) echo "tests/sglang" ;;
  esac
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
  LOGGED=(0.5.23 0.5.17)
  for v in "${LOGGED[@]}"; do
    timed "sglang $v" sglang_suite "$v" "$v" tests/sglang "$@"
  done
else
  echo "== sglang 0.5.23 (served cases, the rest) and 0.5.17, side by side (logs below when all end)"
  LOGGED=()
  pids=()
  t0=$(date +%s)
  for job in "${JOBS[@]}"; do
    name="${job%%|*}"
    # shellcheck disable=SC2046  # the paths split into words on purpose
    sglang_suite "$name" "${job##*|}" $(job_paths "$name") "$@" &
    pids+=($!)
    LOGGED+=("$name")
  done
  outcome=""
  for i in "${!pids[@]}"; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    [ $rc -eq 0 ] || { status=1; outcome+=" ${LOGGED[$i]}: $rc"; }
  done
  TIMES+=("$(printf '%-22s %5ds  %s' "sglang, side by side" $(($(date +%s) - t0)) \
    "$([ -z "$outcome" ] && echo ok || echo "FAILED ($outcome )")")")
fi
for name in "${LOGGED[@]}"; do
  echo "== sglang $name"
  cat "$LOGS/sglang-$name.log"
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
