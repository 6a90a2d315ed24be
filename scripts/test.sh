#!/bin/bash
# The test command, on a fresh machine (root, Debian 12): installs everything the tests need,
# starts the REAL testbed (Slurm in network-namespace pods, Slurm's PBS qsub wrappers, Grid
# Engine, sshd login host), runs the whole suite, and stops the testbed again.
#   scripts/test.sh                 # everything
#   scripts/test.sh --fast          # the fast tier: no testbed, no training (about a minute; no root needed)
#   scripts/test.sh -m "not train"  # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
step() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }
pytest=(.venv/bin/python -m pytest -p no:cacheprovider)
# Bytecode is written (to the clone's __pycache__, ignored by git): with PYTHONDONTWRITEBYTECODE set,
# as on these machines, every pytest process and worker rewrote and compiled every test module
# again (collection 7.7 s -> 3.7 s each, measured).
unset PYTHONDONTWRITEBYTECODE

if [ "${1:-}" = --fast ]; then
  shift
  step "python environment"
  scripts/setup-dev.sh test
  step "fast tier: no testbed, no training"
  # four workers on two cores: the fast tier waits for a third of its time (sshd, sockets, deadlines);
  # measured on a quiet 2-core machine: 137 s at -n 2, 105-112 s at -n 4, 111 s at -n 6
  exec "${pytest[@]}" -n "${HPC_TEST_WORKERS:-4}" -m "not train and not scheduler" --durations="${HPC_TEST_DURATIONS:-25}" "$@"
fi

step "testbed packages"
testbed/install.sh
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  [ -n "${up_pid:-}" ] && wait "$up_pid" 2>/dev/null
  [ "${HPC_TESTBED_KEEP:-0}" = 1 ] || testbed/down.sh >/dev/null 2>&1 || true
}
trap cleanup EXIT
# The testbed comes up (daemons starting, ~8 s that mostly wait) while pip installs on one core.
step "python environment, and the testbed coming up beside it"
up_log=$(mktemp)
testbed/up.sh >"$up_log" 2>&1 &
up_pid=$!
HPC_SETUP_COMPILE=0 scripts/setup-dev.sh test
step "lint: ruff; beside it mypy, and the bytecode of what the jobs import"
# The bytecode (scripts/warm-bytecode.py, ~17 s of one core) and mypy (~20 s of one core from
# cold) run side by side before the lanes start, on a machine the set-up left half idle; mypy's
# verdict joins the tests' at the end.
warm_log=$(mktemp)
.venv/bin/python scripts/warm-bytecode.py >"$warm_log" 2>&1 &
warm_pid=$!
mypy_log=$(mktemp)
.venv/bin/mypy hpc_launch >"$mypy_log" 2>&1 &
mypy_pid=$!
.venv/bin/ruff check hpc_launch tests bench
.venv/bin/ruff format --check hpc_launch tests bench scripts
warm_rc=0
wait "$warm_pid" || warm_rc=$?
[ "$warm_rc" = 0 ] || { cat "$warm_log"; exit "$warm_rc"; }
step "testbed up"
up_rc=0
wait "$up_pid" || up_rc=$?
up_pid=
cat "$up_log"
[ "$up_rc" = 0 ] || exit "$up_rc"
# shellcheck source=testbed/env.sh
. testbed/env.sh
# DeepSpeed JIT-compiles its CPU ops once (33-77 s); keep them for the whole run.
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.cache/torch_extensions}
export PYTHONUNBUFFERED=1

step "tests"
set +e
if [ $# -gt 0 ]; then  # a chosen subset, as asked
  "${pytest[@]}" --durations="${HPC_TEST_DURATIONS:-25}" "$@"
  rc=$?
else
  # Four lanes side by side: the tests that use the testbed's pods, one at a time (there are 3;
  # two 2-node jobs together queue behind each other, and the fault injections take a pod or a
  # daemon away); the tests whose jobs run on the side pods (`side`: pod4 and pod5, a partition of
  # their own; the chains, walltime deadlines and preemption, which mostly wait), one at a time; the testbed
  # tests that use no pod (`beside`: the local cluster, Grid Engine on this machine, the login
  # sshd), one at a time, and after them the unit tests (and a training test marked `after_unit`:
  # the suite is CPU-bound, and the lanes should end together); and the training tests. (The unit and
  # training tests were one lane: at 1100 s it was nearly as long as the pods' lane while the
  # `beside` one sat idle after 300 s. The pods' lane alone took 985 s at 43 % of two cores: it
  # waits, so its waits moved to a lane of their own. pytest-xdist's --dist loadgroup would do
  # this in one run, but 3.8 under pytest 9 ignores the groups.)
  beside_log=$(mktemp)
  unit_log=$(mktemp)
  train_log=$(mktemp)
  side_log=$(mktemp)
  beside_rc=$(mktemp)
  durations=--durations="${HPC_TEST_DURATIONS:-25}"
  {
    "${pytest[@]}" -m "scheduler and beside" "$durations" >"$beside_log" 2>&1
    echo $? >"$beside_rc"
    "${pytest[@]}" -m "not scheduler and (not train or after_unit)" "$durations" >"$unit_log" 2>&1
  } &
  beside_then_unit=$!
  "${pytest[@]}" -m "train and not scheduler and not after_unit" "$durations" >"$train_log" 2>&1 &
  train=$!
  "${pytest[@]}" -m "scheduler and side" "$durations" >"$side_log" 2>&1 &
  side=$!
  "${pytest[@]}" -m "scheduler and not beside and not side" "$durations"
  rc=$?
  wait "$side"
  rc_side=$?
  step "beside them: the tests on the side pods"
  cat "$side_log"
  wait "$beside_then_unit"
  rc_unit=$?
  rc_beside=$(cat "$beside_rc")
  step "beside them: the testbed tests that use no pod"
  cat "$beside_log"
  step "after those: the unit tests"
  cat "$unit_log"
  wait "$train"
  rc_train=$?
  step "beside them: the training tests"
  cat "$train_log"
  for lane_rc in "$rc_side" "$rc_beside" "$rc_unit" "$rc_train"; do
    [ "$rc" = 0 ] && rc=$lane_rc
  done
fi
set -e
if wait "$mypy_pid"; then mypy_rc=0; else mypy_rc=$?; fi
step "mypy (run beside the tests)"
cat "$mypy_log"
step "done (pytest exit $rc, mypy exit $mypy_rc)"
# pytest exit 5 = no tests collected: with a -m/-k filter that is not a failure of the code
[ "$rc" = 5 ] && [ $# -gt 0 ] && rc=0
[ "$rc" = 0 ] && rc=$mypy_rc
exit "$rc"
