#!/usr/bin/env bash
# The HTML report (--html) in a real browser: replay, simulate, fleet and plan pages
# are rendered by headless Chromium, which must draw every chart (the page's
# script sets data-drawn="N" on <html> and writes one path.series-line per
# series), and a screenshot must hold far more coloured pixels than the same
# page without its drawing script. Also: the page names no URL (self-contained) and is
# byte-identical across runs.
#
# Needs chromium (scripts/bootstrap installs it when KVREPLAY_BROWSER_TESTS=1;
# .ci/run sets that); without it the test says so and exits 77 (skipped).
# Usage: run_html_browser_test.sh KVREPLAY PNG_PIXELS REPO_ROOT
set -uo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 KVREPLAY PNG_PIXELS REPO_ROOT" >&2
  exit 2
fi
kvreplay=$1
png_pixels=$2
root=$3

browser=
for candidate in chromium chromium-browser google-chrome; do
  if command -v "$candidate" >/dev/null 2>&1; then
    browser=$(command -v "$candidate")
    break
  fi
done
if [[ -z $browser ]]; then
  echo "SKIP: no chromium found; run KVREPLAY_BROWSER_TESTS=1 scripts/bootstrap to install it"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-html.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}

# A small native request trace: a shared prefix, n = 2 samples, enough
# requests for a 32-block pool to preempt.
for i in $(seq 0 59); do
  prefix=""
  ((i % 2 == 0)) && prefix=', "prefix": "sys", "prefix_tokens": 64'
  printf '{"arrival": %d.%02d, "prompt": %d, "output": %d, "n": %d%s}\n' \
    $((i / 20)) $((i % 20 * 5)) $((100 + i * 37 % 400)) $((20 + i * 13 % 60)) \
    $((1 + (i % 3 == 0))) "$prefix"
done >"$work/requests.jsonl"

browse() {  # browse OUT ARGS...: runs headless Chromium with a fresh profile
  local out=$1
  shift
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --disable-quic --no-first-run --disable-background-networking --disable-component-update \
    --disable-sync --hide-scrollbars --user-data-dir="$(mktemp -d "$work/profile.XXXXXX")" \
    "$@" >"$out" 2>"$work/browser.err"
}

# check_page NAME CHARTS COMMAND...: COMMAND writes $work/NAME.html (twice).
check_page() {
  local name=$1 charts=$2
  shift 2
  local page=$work/$name.html
  if ! "$@" --html "$page" -q >/dev/null 2>"$work/err"; then
    fail "$name: kvreplay failed: $(head -c 500 "$work/err")"
    return
  fi
  "$@" --html "$page.again" -q >/dev/null 2>&1
  cmp -s "$page" "$page.again" || fail "$name: the page differs between two runs"
  if grep -qiE 'https?://|//[a-z0-9.-]+\.[a-z]{2,}/|src=|href=|url\(|@import' "$page"; then
    fail "$name: the page names an external resource: $(grep -oiE 'https?://[^"]*|src=[^ ]*|href=[^ ]*|url\([^)]*\)|@import' "$page" | head -3 | tr '\n' ' ')"
  fi

  browse "$work/$name.dom" --dump-dom "file://$page"
  local dom=$work/$name.dom
  local drawn
  drawn=$(grep -oE '<html[^>]*data-drawn="[0-9]+"' "$dom" | grep -oE '[0-9]+"$' | tr -d '"')
  [[ $drawn == "$charts" ]] || fail "$name: data-drawn='${drawn:-missing}', expected $charts charts"
  local lines
  lines=$(grep -oE 'class="series-line"[^>]*data-points="[0-9]+"' "$dom" | grep -oE '[0-9]+"$' | tr -d '"')
  local count=0 short=0 n
  for n in $lines; do
    count=$((count + 1))
    ((n >= 2)) || short=$((short + 1))
  done
  ((count >= charts)) || fail "$name: $count drawn series lines, expected at least $charts"
  ((short == 0)) || fail "$name: $short series lines with fewer than 2 points"
  grep -qE '<path class="series-line"[^>]* d="M[0-9.]+,[0-9.]+L' "$dom" ||
    fail "$name: no SVG path with coordinates in the rendered DOM"

  # The baseline: the same page without its drawing script (cards, tables, text).
  sed '/^<script>$/,/^<\/script>$/d' "$page" >"$work/$name.nojs.html"
  browse /dev/null --window-size=1280,1400 --screenshot="$work/$name.png" "file://$page"
  browse /dev/null --window-size=1280,1400 --screenshot="$work/$name.nojs.png" \
    "file://$work/$name.nojs.html"
  local w h non_white coloured nojs_coloured
  if ! read -r w h non_white coloured < <("$png_pixels" "$work/$name.png") ||
    ! read -r _ _ _ nojs_coloured < <("$png_pixels" "$work/$name.nojs.png"); then
    fail "$name: no readable screenshot ($(tail -n 2 "$work/browser.err" | tr '\n' ' '))"
    return
  fi
  ((non_white > w * h / 50)) || fail "$name: screenshot nearly blank ($non_white of $((w * h)) pixels)"
  ((coloured - nojs_coloured > 1500)) ||
    fail "$name: charts not visible: $coloured coloured pixels with scripts, $nojs_coloured without"
  echo "$name: $drawn charts, $count series lines, screenshot ${w}x$h: $non_white non-white," \
    "$coloured coloured pixels ($nojs_coloured without the drawing script)"
}

check_page replay 4 "$kvreplay" replay "$root/traces/quickstart.jsonl" --check every
# simulate: KV memory in use vs cached, requests running and waiting,
# preemptions, waste, and the TTFT and TPOT CDFs with their SLO lines.
check_page simulate 6 "$kvreplay" simulate "$work/requests.jsonl" --pool-blocks 32 \
  --max-seq-tokens 4096 --slo-ttft-ms 500 --slo-tpot-ms 20
# With offload tiers: those six, the KV each tier holds against its
# capacity, and the blocks stored and loaded back.
check_page simulate-offload 8 "$kvreplay" simulate "$work/requests.jsonl" --pool-blocks 32 \
  --max-seq-tokens 4096 --offload cpu:64MiB,disk:1GiB
# A fleet: KV in use, requests waiting and running, preemptions, one line per
# instance, and the fleet's TTFT and TPOT CDFs; likewise with prefill and
# decode instances.
check_page fleet 6 "$kvreplay" simulate "$work/requests.jsonl" --pool-blocks 32 \
  --max-seq-tokens 4096 --replicas 3 --router least-kv
# ... and with offload tiers, each tier's fill per instance (two tiers: two charts).
check_page fleet-offload 8 "$kvreplay" simulate "$work/requests.jsonl" --pool-blocks 32 \
  --max-seq-tokens 4096 --replicas 2 --router prefix-aware --offload cpu:64MiB,disk:1GiB
check_page fleet-pd 6 "$kvreplay" simulate "$work/requests.jsonl" --pool-blocks 32 \
  --max-seq-tokens 4096 --prefill-replicas 1 --decode-replicas 2
# plan: preemptions, peak in use, p99 TTFT and TPOT against KV memory; pools
# sized by the GPUs of swept deployments: preemptions, p99 TTFT and SLO
# attainment against GPUs.
check_page plan 4 "$kvreplay" plan "$work/requests.jsonl" --kv-memory 32MiB,64MiB,128MiB \
  --page-tokens 16,32 --max-seq-tokens 4096 -j 2
check_page plan-gpus 3 "$kvreplay" plan "$work/requests.jsonl" --model llama-3.1-8b \
  --gpu h100-80gb,h200 --tp 1,2 --max-seq-tokens 4096 --slo-ttft-ms 200 --slo-tpot-ms 20 \
  --no-search -j 2
# plan over fleets: the same against GPUs, a line per router, and $ per
# million output tokens.
check_page plan-fleet 4 "$kvreplay" plan "$work/requests.jsonl" --model llama-3.1-8b \
  --gpu h100-80gb --replicas 1,2,4 --pd 2:2 --router round-robin,prefix-aware \
  --max-seq-tokens 4096 --slo-ttft-ms 200 --slo-tpot-ms 20 --gpu-hour-usd 2.5 --no-search -j 2
exit $failed
