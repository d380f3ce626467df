#!/usr/bin/env bash
# Counts the pages each SQLite commit writes, by table and index, while the
# agents of `taskq-bench` run cycles.
#
#   docs/perf/wal-pages.sh TASKQ_BINARY OUT_DIR [bench flags...]
#
# Copies the database and its WAL 8 s into a 16 s cycle phase, then reads
# the WAL's frames back (wal-pages.py): every changed page is one frame,
# written with two `pwrite`s, so frames per commit are what a commit costs
# the disk and the kernel. Needs python3 with SQLite's dbstat (Debian's has
# it).
set -euo pipefail
bin="$(realpath "$1")"; out="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/bench-server.sh"
start_cycles "$bin" "$out" "$@"
sleep 8
wal=$(find "/proc/$server/fd" -lname '*-wal' -printf '%l\n' | head -n 1)
cp "${wal%-wal}" "$out/copy.db"
cp "$wal" "$out/copy.db-wal"
wait "$bench"
python3 "$here/wal-pages.py" "$out/copy.db"
