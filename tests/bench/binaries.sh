# Sourced by the side-by-side benchmarks (bench_startup.sh, bench_search_versus.sh): sets BEFORE and
# AFTER to the two osdp binaries, building what is missing.
#
#   resolve_binaries NAME ROOT COMMIT
#
# BEFORE, when empty: the osdp of COMMIT, built once in a git worktree under ROOT/build-before/ (a
# Release build of the osdp target alone) and reused. AFTER, when empty: ROOT/build/cli/osdp, built
# when missing. NAME prefixes the messages. Exits 2 when either is not an executable.
resolve_binaries() {
  local name=$1 root=$2 commit=$3
  if [ -z "$BEFORE" ]; then
    local src=$root/build-before/src build=$root/build-before/build
    BEFORE=$build/cli/osdp
    if [ ! -x "$BEFORE" ]; then
      echo "$name: building osdp at commit $commit in $root/build-before (takes minutes)" >&2
      [ -d "$src" ] || git -C "$root" worktree add --detach "$src" "$commit" >&2
      cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DOSDP_BUILD_TESTS=OFF \
        -DOSDP_BUILD_BENCHMARKS=OFF >&2
      cmake --build "$build" --target osdp -j "$(nproc)" >&2
    fi
  fi
  if [ -z "$AFTER" ]; then
    AFTER=$root/build/cli/osdp
    if [ ! -x "$AFTER" ]; then
      echo "$name: building the osdp target in $root/build" >&2
      cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >&2
      cmake --build "$root/build" --target osdp -j "$(nproc)" >&2
    fi
  fi
  local b
  for b in "$BEFORE" "$AFTER"; do
    [ -x "$b" ] || { echo "$name: $b is not an executable" >&2; exit 2; }
  done
}
