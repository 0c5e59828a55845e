#!/usr/bin/env bash
# A hung and a dead peer under mpirun -np 2 (test_mpi_backend --fault-mode, collectives with a 3 s
# timeout, OSDP_INJECT_FAULT on rank 1): the job must end well before the 60 s guard with a non-zero
# status, rank 0 naming itself and the operation it waited for (hang), rank 1 naming the operation
# it left (exit). A run without a fault must succeed, so the program is not failing for other reasons.
# Usage: test_faults.sh <mpiexec> <test_mpi_backend>
set -u
mpiexec=$1
program=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "not ok - $1"
  failures=$((failures + 1))
}
ok() { echo "ok - $1"; }

# run NAME FAULT: runs the job, sets rc and ms (its wall time), leaves stderr in $work/NAME.err.
run() {
  local start
  start=$(date +%s%N)
  OSDP_INJECT_FAULT=$2 timeout 60 "$mpiexec" -np 2 --oversubscribe -x OSDP_INJECT_FAULT \
    "$program" --fault-mode --timeout 3 >"$work/$1.out" 2>"$work/$1.err"
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  echo "# $1: status $rc after $ms ms"
}

expect_in() {  # expect_in NAME PATTERN DESCRIPTION
  if grep -qE -- "$2" "$work/$1.err"; then ok "$3"; else fail "$3"; sed 's/^/#   /' "$work/$1.err"; fi
}

within() {  # within LIMIT_S DESCRIPTION
  if [ "$ms" -lt $(($1 * 1000)) ]; then ok "$2 ($ms ms < $1 s)"; else fail "$2 ($ms ms)"; fi
}

run none ""
if [ "$rc" -eq 0 ]; then ok "no fault: status 0"; else fail "no fault: status $rc"; sed 's/^/#   /' "$work/none.err"; fi
expect_in none "rank 0: fault mode finished" "no fault: rank 0 finished"
expect_in none "rank 1: fault mode finished" "no fault: rank 1 finished"

op="reduce-scatter fault.layer1"
run hang "rank=1,op=$op,kind=hang"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "hang: non-zero status $rc"; else fail "hang: status $rc"; fi
within 30 "hang: the job ended long before the guard"
if [ "$ms" -ge 2900 ]; then ok "hang: rank 0 waited for its 3 s timeout"; else fail "hang: ended after $ms ms"; fi
expect_in hang "rank 1: injected fault: hanging in $op" "hang: rank 1 says where it hangs"
expect_in hang "osdp: error: rank 0: $op \\(.*\\) did not complete within 3 s: a peer rank died or hung" \
  "hang: rank 0 names itself, the operation and the timeout"

run exit "rank=1,op=$op,kind=exit"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "exit: non-zero status $rc"; else fail "exit: status $rc"; fi
within 20 "exit: the job ended promptly"
expect_in exit "rank 1: injected fault: exiting before $op" "exit: rank 1 names the operation it left"

run bad "rank=1,op=x,kind=explode"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "bad spec: non-zero status $rc"; else fail "bad spec: status $rc"; fi
expect_in bad "OSDP_INJECT_FAULT=\"rank=1,op=x,kind=explode\": kind \"explode\"" "bad spec: a clear error"

if [ "$failures" -ne 0 ]; then
  echo "$failures failed"
  exit 1
fi
echo "all passed"
