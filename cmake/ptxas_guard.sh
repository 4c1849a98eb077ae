#!/usr/bin/env bash
# The CUDA compiler launcher of libweft's kernels (WEFT_PTXAS_GUARD): runs the compile command it is
# given and fails it where ptxas says it serialised WGMMAs (C7514: an instruction touches a WGMMA's
# accumulators between its issue and its wait, and every WGMMA of the kernel then waits for the one
# before) or injected WGMMA waits (C7517). Both compile to a kernel that is correct and runs at a
# fraction of its speed, and both come from code that looks harmless (a branch that joins paths with
# different WGMMAs in flight, arithmetic the compiler moved between a WGMMA's issue and its wait).
# ptxas prints them as "info", so nothing else in the build would stop. The object is removed so that
# the next build compiles it again.
#   ptxas_guard.sh COMPILER [ARGS...]
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/weft_ptxas_guard.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
status=$?
cat "$log" >&2  # the compiler's messages, as ninja would have shown them
[ "$status" -eq 0 ] || exit "$status"
if grep -qE '\((C7514|C7517)\)' "$log"; then
  out=""
  prev=""
  for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
  [ -n "$out" ] && rm -f "$out"
  echo "weft: ptxas serialised WGMMAs (C7514) or injected WGMMA waits (C7517) compiling ${out:-this object} (lines above):" \
       "the kernel would be correct and several times slower. Keep a WGMMA's accumulators and register operands" \
       "untouched between its issue and its wait on every path (warpgroup_fence_operand around the code that" \
       "writes them; no branch that joins paths with different WGMMAs in flight). -DWEFT_PTXAS_GUARD=OFF builds anyway." >&2
  exit 1
fi
exit 0
