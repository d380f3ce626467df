#!/usr/bin/env bash
# Several taskq nodes on one PostgreSQL database, behind nginx, for the
# cluster's figures (docs/perf.md, "Several nodes").
#
#   docs/perf/cluster.sh bench BIN NODES OUT.json [taskq-bench flags...]
#       `taskq-bench --url` (the one beside BIN, or $TASKQ_BENCH) through
#       nginx over NODES nodes, round-robin or, with BALANCE=hash, hashing
#       the org in the API key as the README says; prints the CPU seconds
#       each node, nginx and PostgreSQL used during the cycles, and each
#       node's requests, how many it forwarded, and its commits. With
#       RESTART=S the last node is stopped (SIGTERM) S seconds into the
#       cycles and started again on its port; its CPU is then not printed.
#   docs/perf/cluster.sh failover BIN KILLS
#       three nodes; KILLS times: kill -9 the owner of a busy org and time
#       the first successful answer through another node; prints each
#       time, the median and the maximum.
#
# Needs psql, nginx and curl; PostgreSQL at $PG_ADMIN_URL (default
# postgres://postgres@127.0.0.1:5432/test), where a scratch database is
# made and dropped.
set -euo pipefail

mode=$1 bin=$(realpath "$2")
admin_url=${PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/test}
db="taskq_cluster_$$"
dir=$(mktemp -d)
key=$(head -c32 /dev/urandom | base64)
token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
url="${admin_url%/*}/$db"
pids=() ports=() nginx_pid=

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null || true
  sleep 0.5
  psql "$admin_url" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] && echo "kept $dir" >&2 || rm -rf "$dir"
}
trap cleanup EXIT
psql "$admin_url" -qc "CREATE DATABASE $db" >/dev/null

# start_node I [PORT]: starts node I in its own directory (same node id on
# restart), on PORT or any free one
start_node() {
  local i=$1 d="$dir/n$1"
  mkdir -p "$d"
  : > "$d/out"
  (cd "$d" && exec env TASKQ_MASTER_KEY="$key" TASKQ_ADMIN_TOKEN="$token" TASKQ_EMBEDDINGS=none \
     TASKQ_DATABASE_URL="$url" "$bin" serve --listen "127.0.0.1:${2:-0}" > out 2>> log < /dev/null) &
  pids[$i]=$!
  for _ in $(seq 1 300); do
    if grep -q "listening on" "$d/out"; then break; fi
    sleep 0.1
  done
  ports[$i]=$(sed -n 's/.*127.0.0.1:\([0-9]*\).*/\1/p' "$d/out" | head -1)
}

cpu_of() { # utime+stime of a pid, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}

pg_cpu() { # "pid ticks" of every PostgreSQL process
  for p in $(pgrep -x postgres); do echo "$p $(cpu_of "$p")"; done
}

traffic_of() { # a node's requests for an org, those it forwarded, its commits
  curl -sf "http://127.0.0.1:$1/metrics" -H "Authorization: Bearer $token" |
    awk '/^taskq_cluster_requests_total /{r=$2} /^taskq_cluster_forwarded_total /{f=$2}
         /^taskq_commits_total /{c=$2} END {print r+0, f+0, c+0}'
}

start_nginx() { # sets nginx_port
  local n=$1 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  {
    echo "worker_processes 2; daemon off; pid $dir/nginx.pid; error_log $dir/nginx.err;"
    echo "events { worker_connections 4096; }"
    echo "http { access_log off; client_body_temp_path $dir/b; proxy_temp_path $dir/p;"
    echo " fastcgi_temp_path $dir/f; uwsgi_temp_path $dir/u; scgi_temp_path $dir/s;"
    if [ "${BALANCE:-}" = hash ]; then
      echo ' map $http_x_api_key $taskq_org {'
      echo '  "~^tq_(?<org>[0-9a-f]{32})_[0-9a-f]{32}_" $org;'
      echo '  default $request_id; }'
      echo " upstream taskq { keepalive 256; hash \$taskq_org consistent;"
      params=" max_fails=1 fail_timeout=3s"
    else
      echo " upstream taskq { keepalive 256;"
      params=
    fi
    for i in $(seq 1 "$n"); do echo "  server 127.0.0.1:${ports[$i]}${params};"; done
    echo " }"
    echo " server { listen 127.0.0.1:$port; location / { proxy_pass http://taskq;"
    echo "  proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_read_timeout 120s; } } }"
  } > "$dir/nginx.conf"
  nginx -c "$dir/nginx.conf" -p "$dir" -e "$dir/nginx.err" > /dev/null 2>&1 < /dev/null &
  nginx_pid=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.05
  done
  nginx_port=$port
}

case "$mode" in
bench)
  nodes=$3 out=$4; shift 4
  for i in $(seq 1 "$nodes"); do start_node "$i"; done
  sleep 4  # every node sees the others
  start_nginx "$nodes"
  port=$nginx_port
  # Counted from the end of the create phase (or the start), so that the
  # figures are the cycles'.
  snapshot() {
    for i in $(seq 1 "$nodes"); do cpu_of "${pids[$i]}" > "$dir/cpu.$i"; done
    for p in $(pgrep -P "$nginx_pid") "$nginx_pid"; do cpu_of "$p"; done | paste -sd+ | bc > "$dir/nginx.before"
    pg_cpu > "$dir/pg.before"
    for i in $(seq 1 "$nodes"); do traffic_of "${ports[$i]}" > "$dir/traffic.$i"; done
    touch "$dir/cycling"
  }
  snapshot
  rm -f "$dir/cycling"
  for i in $(seq 1 "$nodes"); do echo "0 0 0" > "$dir/carried.$i"; done
  "${TASKQ_BENCH:-$(dirname "$bin")/taskq-bench}" --url "http://127.0.0.1:$port" \
    --admin-token "$token" --json "$@" 2> >(while IFS= read -r line; do
      case $line in "[create] finished"*) snapshot ;; esac
      printf '%s\n' "$line" >&2
    done) > "$out" &
  bench_pid=$!
  if [ -n "${RESTART:-}" ]; then
    while [ ! -f "$dir/cycling" ]; do sleep 0.1; done
    sleep "$RESTART"
    # Its counters start again from 0: what it counted so far is carried.
    traffic_of "${ports[$nodes]}" > "$dir/carried.$nodes"
    kill -TERM "${pids[$nodes]}"
    wait "${pids[$nodes]}" 2>/dev/null || true
    start_node "$nodes" "${ports[$nodes]}"
    echo "node $nodes restarted" >&2
  fi
  wait "$bench_pid"
  hz=$(getconf CLK_TCK)
  for i in $(seq 1 "$nodes"); do
    [ -n "${RESTART:-}" ] && [ "$i" = "$nodes" ] && continue
    echo "node $i cpu_s $(echo "($(cpu_of "${pids[$i]}") - $(cat "$dir/cpu.$i")) / $hz" | bc -l)"
  done
  nginx_before=$(cat "$dir/nginx.before")
  nginx_after=$(for p in $(pgrep -P "$nginx_pid") "$nginx_pid"; do cpu_of "$p"; done | paste -sd+ | bc)
  echo "nginx cpu_s $(echo "($nginx_after - $nginx_before) / $hz" | bc -l)"
  # Processes that ended during the run are not counted; new ones from 0.
  pg_ticks=$(pg_cpu | awk -v hz="$hz" 'NR==FNR {b[$1]=$2; next} {t += $2 - b[$1]} END {print t}' "$dir/pg.before" -)
  echo "postgres cpu_s $(echo "$pg_ticks / $hz" | bc -l)"
  for i in $(seq 1 "$nodes"); do
    read -r r0 f0 c0 < "$dir/traffic.$i"
    read -r r1 f1 c1 < <(traffic_of "${ports[$i]}")
    read -r rc fc cc < "$dir/carried.$i"
    echo "node $i requests $((r1 + rc - r0)) forwarded $((f1 + fc - f0)) commits $((c1 + cc - c0))"
  done
  ;;
failover)
  kills=$3
  for i in 1 2 3; do start_node "$i"; done
  sleep 4
  org=$(curl -sf -X POST "http://127.0.0.1:${ports[1]}/admin/orgs" -H "Authorization: Bearer $token" \
    -d '{"name":"failover","owner_email":"o@failover.test","tier":"enterprise"}')
  org_id=$(echo "$org" | python3 -c 'import json,sys; print(json.load(sys.stdin)["org_id"])')
  api_key=$(echo "$org" | python3 -c 'import json,sys; print(json.load(sys.stdin)["owner"]["api_key"])')
  times=()
  for k in $(seq 1 "$kills"); do
    curl -sf "http://127.0.0.1:${ports[1]}/tasks?limit=1" -H "X-Api-Key: $api_key" >/dev/null || true
    curl -sf -X POST "http://127.0.0.1:${ports[2]}/tasks" -H "X-Api-Key: $api_key" \
      -d '{"tasks":[{"title":"busy"}]}' >/dev/null || true
    # The owner: the node whose log last spawned the org's actor and has
    # not stopped it since.
    owner=
    for i in 1 2 3; do
      spawned=$(grep -c "org actor spawned org_id=$org_id" "$dir/n$i/log" || true)
      stopped=$(grep -cE "org actor stopped org_id=$org_id|org lost to another node org_id=$org_id" "$dir/n$i/log" || true)
      if [ "$spawned" -gt "$stopped" ] && kill -0 "${pids[$i]}" 2>/dev/null; then owner=$i; fi
    done
    [ -z "$owner" ] && { echo "no owner found"; exit 1; }
    other=$(( owner % 3 + 1 ))
    kill -9 "${pids[$owner]}"
    t0=$(date +%s.%N)
    while ! curl -sf -m 2 "http://127.0.0.1:${ports[$other]}/tasks?limit=1" -H "X-Api-Key: $api_key" >/dev/null; do
      sleep 0.02
    done
    t1=$(date +%s.%N)
    t=$(echo "$t1 - $t0" | bc -l)
    times+=("$t")
    printf 'kill %2d: node %d, served again after %.3f s\n' "$k" "$owner" "$t"
    wait "${pids[$owner]}" 2>/dev/null || true
    start_node "$owner"
    sleep 4  # the restarted node is live again
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median %.3f s, max %.3f s over %d kills\n", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), a[NR], NR}'
  ;;
*) echo "usage: $0 bench|failover ..."; exit 2 ;;
esac
