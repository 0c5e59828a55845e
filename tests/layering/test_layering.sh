#!/usr/bin/env bash
# The layering of CONTRIBUTING.md, checked on the sources (run by CTest as the test `layering`):
#   costmodel <- search, sim <- validate <- experiments <- cli
# and, inside validate/, the folders' own rules (validate/*/README.md).
#   bash tests/layering/test_layering.sh [REPO_ROOT]
set -uo pipefail
cd "${1:-$(dirname "$0")/../..}" || exit 2

passed=0
failed=0
# verdict DESC OFFENDING_LINES: ok when there are none.
verdict() {
  if [[ -z $2 ]]; then
    echo "ok - $1"
    passed=$((passed + 1))
  else
    echo "not ok - $1"
    printf '%s\n' "$2" | head -n 10 | sed 's/^/#   /'
    failed=$((failed + 1))
  fi
}
sources() { grep -rnE "$1" "${@:2}" --include='*.hpp' --include='*.cpp' --include='*.cu'; }
# only DESC FOLDER ALLOWED_REGEX: every osdp include in FOLDER's sources names an allowed folder.
only() {
  verdict "$1" "$(sources '#include "[a-z_]+/' "$2" | grep -vE "#include \"($3)/")"
}
# none DESC REGEX FOLDER...: no line of the folders' sources matches REGEX.
none() {
  verdict "$1" "$(sources "$2" "${@:3}")"
}

only "costmodel/ includes nothing else of osdp" costmodel 'costmodel'
only "search/ includes costmodel/ only" search 'costmodel|search'
only "sim/ includes costmodel/ only" sim 'costmodel|sim'
only "validate/ includes costmodel/ and sim/, never search/, experiments/ or cli/" validate 'costmodel|sim|validate'
only "experiments/ never includes cli/" experiments 'costmodel|search|sim|validate|experiments'
only "validate/executor/ includes no backend folder" validate/executor 'costmodel|sim|validate/executor'
only "validate/cpu/ includes the executor's interface, not mpi/ or cuda/" validate/cpu 'costmodel|validate/executor|validate/cpu'
only "validate/calibrate/ runs on any backend (no cpu/, mpi/ or cuda/)" validate/calibrate 'costmodel|validate/executor|validate/calibrate'
only "validate/torch/ drives torchrun: the executor's errors and the launcher's run_child, no device" validate/torch \
  'costmodel|validate/executor|validate/torch|validate/mpi'
none "no MPI or CUDA header outside validate/mpi, validate/cuda and the sweep's MPI division" \
  '#include <(mpi|cuda|cublas|nccl)' costmodel search sim validate/executor validate/cpu validate/calibrate validate/torch

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
