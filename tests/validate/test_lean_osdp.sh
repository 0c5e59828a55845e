#!/usr/bin/env bash
# The osdp program loads no CUDA, cuBLAS or NCCL library unless a GPU job or --version asks for the
# nccl backend's module (validate/backends.hpp): it does not link them (ldd), `osdp models` and
# `osdp plan` do not load them (the dynamic loader's own log, LD_DEBUG=files), and `osdp --version`
# loads the module when the build has one.
#
#   test_lean_osdp.sh OSDP HAVE_NCCL_MODULE(0|1)
set -uo pipefail
OSDP=$1 NCCL_MODULE=${2:-0}
unset OSDP_BACKEND_DIR
TMP=$(mktemp -d "${TMPDIR:-/tmp}/osdp-lean.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
gpu_libs='lib(cudart|cublas|cublasLt|nccl|cuda)\.so'

linked=$(ldd "$OSDP" | grep -E "$gpu_libs" || true)
[ -z "$linked" ] && pass "osdp links no CUDA, cuBLAS or NCCL library" || fail "osdp links:"$'\n'"$linked"

for cmd in "models" "plan --model nd-48x1024 --cluster titan-rtx-8 --memory 16GiB"; do
  # shellcheck disable=SC2086  # the command's words
  LD_DEBUG=files LD_DEBUG_OUTPUT=$TMP/ld "$OSDP" $cmd > /dev/null || fail "osdp $cmd failed"
  loaded=$(cat "$TMP"/ld.* | grep -E "file=[^ ]*($gpu_libs|osdp_backend_)" | sed -E 's/.*file=([^ ]*).*/\1/' | sort -u)
  rm -f "$TMP"/ld.*
  [ -z "$loaded" ] && pass "osdp $cmd loads no CUDA, cuBLAS or NCCL library" ||
    fail "osdp $cmd loads:"$'\n'"$loaded"
done

if [ "$NCCL_MODULE" = 1 ]; then
  LD_DEBUG=files LD_DEBUG_OUTPUT=$TMP/ld "$OSDP" --version > "$TMP/version" || fail "osdp --version failed"
  if cat "$TMP"/ld.* | grep -q 'file=[^ ]*osdp_backend_nccl\.so'; then
    pass "osdp --version loads the nccl module"
  else
    fail "osdp --version does not load the nccl module"
  fi
  grep -q '^CUDA: compiled in (toolkit .*); runtime ' "$TMP/version" && pass "--version: $(grep '^CUDA:' "$TMP/version" | cut -c1-70)..." ||
    fail "--version has no CUDA runtime line:"$'\n'"$(cat "$TMP/version")"
fi
[ $failures -eq 0 ]
