# lib.sh - the harness the CLI test scripts source: counters and `expect`.
# The sourcing script sets nothing; it ends with: echo "$passed passed, $failed failed".
passed=0 failed=0

# expect NAME WANT_RC PATTERN -- CMD...: runs CMD, checks the exit code (0, or
# any non-zero for WANT_RC != 0; a signal is always a failure) and that the
# combined output matches the extended regex PATTERN.
expect() {
  local name="$1" want="$2" pattern="$3"; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ge 128 ]; then
    echo "FAIL $name: crashed with signal $((rc - 128))"; failed=$((failed + 1)); return
  fi
  if { [ "$want" = 0 ] && [ "$rc" != 0 ]; } || { [ "$want" != 0 ] && [ "$rc" = 0 ]; }; then
    echo "FAIL $name: exit $rc, wanted $([ "$want" = 0 ] && echo 0 || echo non-zero)"; echo "$out" | head -5 | sed 's/^/    /'
    failed=$((failed + 1)); return
  fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL $name: output lacks /$pattern/"; echo "$out" | head -5 | sed 's/^/    /'
    failed=$((failed + 1)); return
  fi
  echo "PASS $name"; passed=$((passed + 1))
}

# check NAME RC [DETAIL]: records a check the caller made itself (RC 0 passes).
check() {
  if [ "$2" = 0 ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1${3:+: $3}"; failed=$((failed + 1)); fi
}

# run_killed DIR CMD...: runs the training command CMD (which writes its run to DIR) in the
# background, waits (at most 60 s) for DIR's checkpoint step-N directory named by KILL_AT
# (default step-8) and kills it with SIGKILL: a run stopped for real after a checkpoint.
run_killed() {
  local dir="$1"; shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 1 6000); do [ -d "$dir/checkpoints/${KILL_AT:-step-8}" ] && break; sleep 0.01; done
  kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
