# What the lab tests share (sourced with the test's arguments after setting HERE, its folder, and
# NAME, the lab's name): ROOT, LAB (osdp-lab.sh) and OSDP (the first argument, else $OSDP, else the
# build's) and the environment Open MPI needs; exit 77 (skipped) where a tool is missing or network
# namespaces cannot be made (no CAP_NET_ADMIN); WORK, a scratch folder removed with the lab on every
# exit; ok, notok and the count of failures.

ROOT=$(cd "$HERE/../.." && pwd)
LAB=$ROOT/validate/lab/osdp-lab.sh
OSDP=${1:-${OSDP:-$ROOT/build/cli/osdp}}
OSDP=$(realpath "$OSDP")
export OSDP_DATA_DIR=${OSDP_DATA_DIR:-$ROOT/data}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI leaks by design at exit; the other MPI tests turn leak checks off for it too.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

skip() {
  echo "skipped: $*"
  exit 77
}
for tool in ip tc unshare taskset mpirun python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
probe=osdp-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then skip "ip netns add not permitted (needs CAP_NET_ADMIN)"; fi
ip netns delete "$probe"

WORK=$(mktemp -d)
cleanup() {
  "$LAB" down --name "$NAME" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fails=0
ok() { echo "ok - $*"; }
notok() {
  echo "not ok - $*"
  fails=$((fails + 1))
}
