#!/usr/bin/env bash
# Splits the two cores between the server and the load tool while
# `taskq-bench`'s agents run cycles.
#
#   docs/perf/cpu-split.sh TASKQ_BINARY OUT_DIR [bench flags...]
#
# Reads the server's and the load tool's CPU time (utime + stime, from
# /proc/PID/stat) and the machine's idle time (/proc/stat) over 8 s in the
# middle of a 16 s cycle phase, and prints cycles/s, claim p99, each
# process's µs of CPU per cycle, their ratio (server/tool, which cancels
# the machine's own speed), the idle share of the two cores and the bytes
# the server wrote to disk per cycle (/proc/PID/io).
set -euo pipefail
bin="$(realpath "$1")"; out="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/bench-server.sh"
start_cycles "$bin" "$out" "$@"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
idle() { awk '/^cpu /{print $5 + $6}' /proc/stat; }
written() { awk '/^write_bytes/{print $2}' "/proc/$1/io"; }
sleep 4
s0=$(ticks "$server"); t0=$(ticks "$bench"); i0=$(idle); w0=$(written "$server")
sleep 8
s1=$(ticks "$server"); t1=$(ticks "$bench"); i1=$(idle); w1=$(written "$server")
wait "$bench"
python3 - "$out/bench.json" "$((s1 - s0))" "$((t1 - t0))" "$((i1 - i0))" "$(getconf CLK_TCK)" "$(nproc)" "$((w1 - w0))" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
server, tool, idle, hz, cores, written = (int(x) for x in sys.argv[2:])
cps = doc["cycles"]["per_sec"]
p99 = next(op["p99_ms"] for op in doc["ops"] if op["op"] == "claim")
per = lambda t: t / hz / 8 / cps * 1e6
print(f"cycles/s {cps:,.0f}  claim p99 {p99:.2f} ms  server {per(server):.1f} us/cycle  "
      f"tool {per(tool):.1f} us/cycle  server/tool {server / tool:.3f}  "
      f"idle {100 * idle / (8 * hz * cores):.0f}%  bytes written {written / 8 / cps:,.0f}/cycle")
PY
