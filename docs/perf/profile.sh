#!/usr/bin/env bash
# Profiles the server `taskq-bench` spawns, while its agents run cycles.
#
#   docs/perf/profile.sh TASKQ_BINARY OUT_DIR [bench flags...]
#
# Records the server's CPU for 6 s in the middle of a 16 s cycle phase
# (perf's cpu-clock sampling at 499 Hz with DWARF call stacks: this machine
# kind has no hardware counters), folds the stacks and prints where the
# server's CPU went per cycle (categorize.py). Needs perf (Debian's
# linux-perf) and python3. A release build has symbols enough.
set -euo pipefail
bin="$(realpath "$1")"; out="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/bench-server.sh"
start_cycles "$bin" "$out" "$@"
sleep 3
perf record -q -e cpu-clock -F 499 -p "$server" --call-graph dwarf,32768 \
  -o "$out/perf.data" -- sleep 6 >/dev/null 2>&1
wait "$bench"
perf script -i "$out/perf.data" 2>/dev/null | python3 "$here/collapse.py" >"$out/server.folded"
cps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['cycles']['per_sec'])" "$out/bench.json")
python3 "$here/categorize.py" "$out/server.folded" 499 6 "$cps"
