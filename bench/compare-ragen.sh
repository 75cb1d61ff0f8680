#!/usr/bin/env bash
# Side by side on one core: RAGEN's own Sokoban generator vs rollgym's, SimpleSokoban
# (6x6, 1 box, search depth 300), resets over consecutive seeds from 0.
# Usage: RAGEN_SRC=DIR bench/compare-ragen.sh [SECONDS]
#   DIR holds checkouts RAGEN/ (mll-lab-nu/RAGEN), gym-sokoban/ (mpSchrader/gym-sokoban) and
#   Gymnasium/ (Farama-Foundation/Gymnasium >= 1.2.1); python3 needs numpy and PyYAML.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
: "${RAGEN_SRC:?set RAGEN_SRC to a folder holding RAGEN/, gym-sokoban/ and Gymnasium/}"
ragen=$(taskset -c 0 python3 bench/ragen/bench_ragen.py "$seconds" 2>/dev/null | tail -1)
ours=$(taskset -c 0 node_modules/.bin/node bench/envs.ts --seconds "$seconds" --tags SimpleSokoban 2>/dev/null | tail -1)
echo "$ragen"
echo "rollgym $ours"
ragen_rate=$(sed -E 's/.*= ([0-9.]+) rooms\/s.*/\1/' <<<"$ragen")
ours_rate=$(awk '{gsub(",", "", $2); print $2}' <<<"$ours")
awk -v a="$ours_rate" -v b="$ragen_rate" 'BEGIN { printf "rollgym / RAGEN: %.0fx\n", a / b }'
