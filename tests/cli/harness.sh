# The shared harness of the CLI test scripts (sourced; it needs $TMP): checks print "ok - ..." or
# "not ok - ..." with the evidence as "#" lines; `finish` prints "N passed, M failed" and fails when
# anything failed.

passed=0
failed=0
ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() {
  echo "not ok - $1"
  shift
  local line
  for line in "$@"; do printf '%s\n' "$line" | head -n 20 | sed 's/^/#   /'; done
  failed=$((failed + 1))
}

# run NAME CMD...: runs CMD, keeps stdout in $TMP/NAME.out, stderr in $TMP/NAME.err, sets RC.
RC=0
run() {
  local name=$1
  shift
  RC=0
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || RC=$?
}

# expect_rc DESC NAME WANT: the exit status of the last `run NAME ...` was WANT.
expect_rc() {
  if [[ $RC -eq $3 ]]; then
    ok "$1 (exit $3)"
  else
    not_ok "$1: exit $RC, expected $3" "stdout: $(head -c 2000 "$TMP/$2.out")" "stderr: $(head -c 2000 "$TMP/$2.err")"
  fi
}

# jcheck DESC FILE CODE [ARGS...]: python CODE with the file's JSON in `j` (and ARGS in `args`)
# passes; CODE fails with `assert cond, message`.
jcheck() {
  local desc=$1 file=$2 code=$3 msg
  shift 3
  if msg=$(python3 -c "
import json, math, sys
j = json.load(open(sys.argv[1]))
args = sys.argv[2:]
$code" "$file" "$@" 2>&1); then
    ok "$desc"
  else
    not_ok "$desc" "$(printf '%s\n' "$msg" | tail -n 3)"
  fi
}

# contains DESC FILE PATTERN...: the file contains every fixed string.
# A Python check of a text file: `text` holds it.
pcheck() {
  local desc=$1 file=$2 code=$3 msg
  if msg=$(python3 -c "
import re, sys
text = open(sys.argv[1]).read()
$code" "$file" 2>&1); then
    ok "$desc"
  else
    not_ok "$desc" "$(printf '%s\n' "$msg" | tail -n 3)"
  fi
}

contains() {
  local desc=$1 file=$2 p
  shift 2
  for p in "$@"; do
    if ! grep -qF -- "$p" "$file"; then
      not_ok "$desc: \"$p\" missing" "$(head -c 2000 "$file")"
      return 0
    fi
  done
  ok "$desc"
}

# json_field FILE KEY: prints a top-level field of a JSON file.
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# same DESC FILE1 FILE2: the two files are byte-identical.
same() {
  if [[ -f $2 && -f $3 ]] && cmp -s "$2" "$3"; then
    ok "$1"
  else
    not_ok "$1" "$(diff "$2" "$3" 2>&1 | head -n 10)"
  fi
}

# finish: the closing line CTest's log shows, and the status.
finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
