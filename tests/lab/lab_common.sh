# What the lab tests share (sourced after setting LAB, the osdp-lab.sh script, and NAME, the lab's
# name): exit 77 (skipped) where a tool is missing or network namespaces cannot be made (no
# CAP_NET_ADMIN); WORK, a scratch folder removed with the lab on every exit; ok, notok and the count
# of failures.

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
