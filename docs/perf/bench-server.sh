# Sourced by the scripts beside it: starts the load tool, `taskq-bench`,
# in the background and waits until its cycle phase has begun.
#
#   start_cycles TASKQ_BINARY OUT_DIR [bench flags...]
#
# The load tool is the `taskq-bench` beside TASKQ_BINARY (`cargo build
# --release --workspace` builds both), or $TASKQ_BENCH; it starts
# TASKQ_BINARY as its server. Runs a 16 s cycle phase, writes the bench's
# JSON report and progress to OUT_DIR/bench.json and OUT_DIR/bench.err,
# and sets `bench` (the load tool's pid) and `server` (the pid of the
# server it spawned).
start_cycles() {
  local bin="$1" out="$2"; shift 2
  local load="${TASKQ_BENCH:-$(dirname "$bin")/taskq-bench}"
  mkdir -p "$out"
  "$load" --server-bin "$bin" --duration 16 "$@" --json >"$out/bench.json" 2>"$out/bench.err" &
  bench=$!
  # The cycle phase starts when the progress line first names it.
  for _ in $(seq 1 240); do grep -q "cycle" "$out/bench.err" && break; sleep 0.5; done
  # The server is the load tool's child: other servers on the machine are not.
  server=$(pgrep -P "$bench" -f " serve" | head -n 1)
}
