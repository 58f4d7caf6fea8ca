#!/usr/bin/env bash
# scripts/check-layers' seam check on a copy of src/: it passes as the tree
# is, fails on an engine's kind named outside the engines' own files, and
# takes a new engine's folder (one with a NAME_engine.cc) as its own.
#   seam_check_test.sh CHECK_LAYERS SRC_DIR LAYERS_FILE
set -euo pipefail
check=${1:?usage: seam_check_test.sh CHECK_LAYERS SRC_DIR LAYERS_FILE}
src=${2:?}
layers=${3:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/src"
fail=0
expect() {  # expect RC DESCRIPTION: the check's exit status is RC
  local rc=0
  bash "$check" "$work/src" "$layers" >"$work/out" 2>&1 || rc=$?
  if [[ ($1 == 0 && $rc != 0) || ($1 != 0 && $rc == 0) ]]; then
    echo "FAIL: $2 (exit $rc)"
    cat "$work/out"
    fail=1
  else
    echo "ok: $2"
  fi
}
expect 0 "the tree as it is"
mkdir "$work/src/engine/newengine"
echo 'constexpr auto kKind = EngineKind::kNewengine;' >"$work/src/engine/newengine/newengine_engine.cc"
expect 0 "a new engine's folder names its own kind"
echo 'const bool planted = options.engine == EngineKind::kVllm;' >>"$work/src/app/options.cc"
expect 1 "an engine's kind named in app/options.cc"
grep -q "^app/options.cc:[0-9]*: names EngineKind::k outside" "$work/out" ||
  { echo "FAIL: the message names no file and line"; cat "$work/out"; fail=1; }
exit $fail
