#!/usr/bin/env bash
# A/B of the chat path: server CPU per request of two trees' `rollgym serve` at equal runtime, in
# one loop (A B A B …), so load on the machine falls on both alike.
#
#   bench/ab-chat.sh [A_REV] [B_REV] [PAIRS] [-- more rollgym bench flags]
#   defaults: A = 2ca6491, B = HEAD, 3 pairs; --episodes 1024 --latency-model default
#             --max-turn 2 --max-tokens 16 --duration 20 (a flag given after -- replaces its default)
#
# Each tree comes from `git archive REV` into a temporary directory with this checkout's
# node_modules linked. Only serve differs between A and B: the driver, the mock engine and the
# bench's measuring are this checkout's (`rollgym bench --serve-from DIR`), with neither the load
# generator nor the floor (--no-saturation --no-floor).
#
# Equal runtime: both serves run on Node's defaults. `ROLLGYM_RUNTIME=as-is` stops 2ca6491's serve
# from re-executing itself into its tuned runtime (jemalloc, --max-semi-space-size=16,
# --memory-saver-mode, --heap-growing-percent=200: its default then); since #21 as-is is serve's
# default anyway. NODE_OPTIONS, LD_PRELOAD and glibc's MALLOC_ tunables are cleared for every
# process of the run. To compare both on the tuned runtime instead: ROLLGYM_AB_RUNTIME=tuned.
set -euo pipefail

a_rev=${1:-2ca6491}
b_rev=${2:-HEAD}
pairs=${3:-3}
extra=()
if [[ $# -gt 3 ]]; then
  shift 3
  [[ ${1:-} == "--" ]] && shift
  extra=("$@")
fi
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "ab-chat: PAIRS must be a positive integer, got '$pairs'" >&2; exit 2; }

root=$(git rev-parse --show-toplevel)
node="$root/node_modules/.bin/node"
[[ -x $node ]] || node=node
work=$(mktemp -d /tmp/rollgym-ab.XXXXXX)
trap 'rm -rf "$work/A" "$work/B"' EXIT

for side in A B; do
  rev=$a_rev
  [[ $side == B ]] && rev=$b_rev
  commit=$(git -C "$root" rev-parse --short "$rev^{commit}")
  mkdir -p "$work/$side"
  git -C "$root" archive "$commit" | tar -x -C "$work/$side"
  ln -s "$root/node_modules" "$work/$side/node_modules"
  echo "$side = $rev ($commit), from git archive into $work/$side" >&2
done

unset NODE_OPTIONS LD_PRELOAD MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_
export ROLLGYM_RUNTIME=${ROLLGYM_AB_RUNTIME:-as-is}
echo "runtime: ROLLGYM_RUNTIME=$ROLLGYM_RUNTIME, node $("$node" --version), no NODE_OPTIONS/LD_PRELOAD/MALLOC_" >&2

# The defaults, each unless the extra flags name it (the bench refuses a flag given twice).
flags=()
for pair in "--episodes 1024" "--latency-model default" "--max-turn 2" "--max-tokens 16" "--duration 20"; do
  flag=${pair% *}
  [[ " ${extra[*]-} " == *" $flag "* || " ${extra[*]-} " == *" $flag="* ]] || flags+=($pair)
done
for pair in $(seq 1 "$pairs"); do
  for side in A B; do
    out="$work/run-$pair-$side.json"
    "$node" "$root/bin/rollgym.js" bench "${flags[@]}" "${extra[@]+"${extra[@]}"}" --no-saturation --no-floor \
      --serve-from "$work/$side" --json >"$out"
    echo "pair $pair $side: $("$node" -e '
      const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).results[0];
      console.log(`${r.server_cpu_ms_per_request} ms/request, ${r.requests_per_s} requests/s, lag p99 ${r.event_loop_lag_p99_ms} ms, ${r.episodes_finished}/${r.episodes_total} finished`);
    ' "$out")" >&2
  done
done

# Each run's figure, then per side the median and range, and B/A per pair with their median.
"$node" -e '
  const fs = require("fs");
  const [dir, pairs] = [process.argv[1], Number(process.argv[2])];
  const cpu = (pair, side) =>
    JSON.parse(fs.readFileSync(`${dir}/run-${pair}-${side}.json`, "utf8")).results[0].server_cpu_ms_per_request;
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const rows = Array.from({ length: pairs }, (_, i) => ({ a: cpu(i + 1, "A"), b: cpu(i + 1, "B") }));
  console.log("| pair | A ms/request | B ms/request | B/A |");
  console.log("|---:|---:|---:|---:|");
  for (const [i, r] of rows.entries()) console.log(`| ${i + 1} | ${r.a} | ${r.b} | ${(r.b / r.a).toFixed(3)} |`);
  for (const side of ["a", "b"]) {
    const xs = rows.map((r) => r[side]);
    console.log(`${side.toUpperCase()}: median ${median(xs).toFixed(4)} ms/request, range ${Math.min(...xs)}–${Math.max(...xs)}`);
  }
  const ratios = rows.map((r) => r.b / r.a);
  console.log(`B/A: median ${median(ratios).toFixed(3)}, range ${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}`);
' "$work" "$pairs"
echo "JSON of every run: $work/run-*.json" >&2
