# Sourced by the scripts beside it: starts `taskq bench` in the background
# and waits until its cycle phase has begun.
#
#   start_cycles TASKQ_BINARY OUT_DIR [bench flags...]
#
# Runs a 16 s cycle phase, writes the bench's JSON report and progress to
# OUT_DIR/bench.json and OUT_DIR/bench.err, and sets `bench` (the load
# tool's pid) and `server` (the pid of the server it spawned).
start_cycles() {
  local bin="$1" out="$2"; shift 2
  mkdir -p "$out"
  "$bin" bench --duration 16 "$@" --json >"$out/bench.json" 2>"$out/bench.err" &
  bench=$!
  # The cycle phase starts when the progress line first names it.
  for _ in $(seq 1 240); do grep -q "cycle" "$out/bench.err" && break; sleep 0.5; done
  server=$(pgrep -f "$(basename "$bin") serve" | head -n 1)
}
