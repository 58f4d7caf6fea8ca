#!/usr/bin/env bash
# The binary-only build and the install (README "Quick start"):
#   - a fresh configure with the defaults puts kvreplay alone in `all`: no tests,
#     no kvtrace_gen, no bench_parse, no fuzz drivers, and no CTest entries;
#   - `cmake --install BUILD --prefix DIR` installs bin/kvreplay and nothing else,
#     and the installed binary runs.
# The fresh configure uses Unix Makefiles (whose `all` it reads from
# CMakeFiles/Makefile2) and CUDA off, which changes nothing in `all` but time.
#
# Usage: run_build_tests.sh KVREPLAY_BINARY REPO_ROOT BUILD_DIR CMAKE
set -uo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 KVREPLAY_BINARY REPO_ROOT BUILD_DIR CMAKE" >&2
  exit 2
fi
kvreplay=$1
root=$2
build=$3
cmake=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-build.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$root" || exit 2

# shellcheck source=lib.sh
source tests/cli/lib.sh  # relative to the repository root (the current directory)

# The targets in `all`: what the directory-level `all` rules (`all:`, `src/all:`)
# name in CMakeFiles/Makefile2, as `DIR/CMakeFiles/TARGET.dir/all`.
in_all() {
  awk '$1 ~ /(^|\/)all:$/ && $1 !~ /CMakeFiles/ && $2 ~ /\.dir\/all$/ {
         n = split($2, part, "/"); sub(/\.dir$/, "", part[n - 1]); print part[n - 1] }' \
    "$work/fresh/CMakeFiles/Makefile2" | sort -u
}
env -u CMAKE_CXX_COMPILER_LAUNCHER -u CMAKE_C_COMPILER_LAUNCHER \
  "$cmake" -S "$root" -B "$work/fresh" -G "Unix Makefiles" -DKVREPLAY_CUDA=OFF \
  >"$work/configure.log" 2>&1
rc=$?
check '[[ $rc -eq 0 ]]' "configure with the defaults: exit $rc, $(tail -n 3 "$work/configure.log")"
if [[ $rc -eq 0 ]]; then
  targets=$(in_all)
  check 'grep -qx kvreplay <<<"$targets"' "kvreplay is not in all: $(tr "\n" " " <<<"$targets")"
  for t in kvtrace_gen bench_parse core_tests sim_tests dataplane_tests dataplane_gpu_tests \
           html_tests fuzz_kvtrace_regress png_pixels dataplane_fault_replay; do
    check '! grep -qx "$t" <<<"$targets"' "$t is in all with the defaults"
  done
  check '[[ -z $(find "$work/fresh" -name CTestTestfile.cmake) ]]' \
    "the default build registers CTest entries"
fi
finish "a plain configure builds kvreplay alone"

"$cmake" --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1
rc=$?
check '[[ $rc -eq 0 ]]' "cmake --install: exit $rc, $(tail -n 3 "$work/install.log")"
installed=$(cd "$work/prefix" 2>/dev/null && find . ! -type d | sort)
check '[[ $installed == ./bin/kvreplay ]]' "installed: $(tr "\n" " " <<<"$installed")"
check '[[ -x $work/prefix/bin/kvreplay ]] &&
       [[ $("$work/prefix/bin/kvreplay" --version) == $("$kvreplay" --version) ]]' \
  "the installed kvreplay does not run, or is not the one built"
finish "cmake --install installs bin/kvreplay alone"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
