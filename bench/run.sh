#!/usr/bin/env bash
# Runs tinybroker's side of the broker benchmark (shared/bench/WORKLOADS.md) and prints the
# result lines on stdout, in the same format as the NATS peer's run.sh.
#   ./run.sh                  # W1 W2 W3 W4 W5 W6 with the default sizes
#   ./run.sh W1 W2            # a selection
#   RUN_FLAGS="-n 100000 -reps 5" ./run.sh W1      # extra flags for every `tinybroker bench`
#   W5_SUBS="1000 10000" ./run.sh W5               # W5 subscription counts
#   W4_LANGS="go c" ./run.sh W4                    # W4 plugin languages (default: every w4-*.hcl)
#   RUN_FLAGS="-streams 1000 -duration 5s" ./run.sh W6
#   TB_CONFIG=fanout-buffer.hcl ./run.sh W1         # serve with a config file (default: none)
# Every workload (and every W5 subscription count) gets a fresh `tinybroker serve` process on a
# free loopback port, stopped by its PID afterwards. W4 builds the plugins (plugins/build.sh)
# and, for each language <lang> with a bench/w4-<lang>.hcl whose plugins were built, starts a
# fresh plain server and a fresh one with that file, and compares W1 and W2 on the two; TB_CONFIG
# does not apply to W4. Progress and warm-ups go to stderr.
set -euo pipefail
if [ -n "${TB_CONFIG:-}" ] && [ -f "$TB_CONFIG" ]; then # relative to where we were called from
  TB_CONFIG="$(cd "$(dirname "$TB_CONFIG")" && pwd)/$(basename "$TB_CONFIG")"
fi
cd "$(dirname "$0")"
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2 W3 W4 W5 W6)

go build -buildvcs=false -o bin/tinybroker ../cmd/tinybroker
serve_flags=()
if [ -n "${TB_CONFIG:-}" ]; then
  [ -f "$TB_CONFIG" ] || { echo "TB_CONFIG=$TB_CONFIG: no such file (relative paths start in bench/)" >&2; exit 1; }
  serve_flags+=(--config "$TB_CONFIG")
  echo "== server config: $TB_CONFIG" >&2
fi

results=$(mktemp)
errlog=$(mktemp)
tmpdir=$(mktemp -d)
jobs=()
for w in "${workloads[@]}"; do
  case "$w" in
    W5) for k in ${W5_SUBS:-1000 10000 100000}; do jobs+=("W5 -subs $k"); done ;;
    W4)
      # Build every plugin; a language whose plugins did not build is skipped below.
      bash plugins/build.sh || echo "== some plugins failed to build; their W4 languages are skipped" >&2
      langs=${W4_LANGS:-}
      if [ -z "$langs" ]; then
        for f in w4-*.hcl; do [ -f "$f" ] && langs+=" $(basename "$f" .hcl | sed 's/^w4-//')"; done
      fi
      for lang in $langs; do
        cfg=w4-$lang.hcl
        if [ ! -f "$cfg" ]; then
          echo "W4 tinybroker lang=$lang skipped: no bench/$cfg" | tee -a "$results" >&2
          continue
        fi
        # Every plugin path of the config (relative to bench/) must have been built.
        missing=$(sed -n 's/^[[:space:]]*path[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$cfg" |
          while read -r p; do [ -f "$p" ] || printf '%s ' "$p"; done)
        if [ -n "$missing" ]; then
          echo "W4 tinybroker lang=$lang skipped: ${missing% } not built (see bench/plugins/build.sh)" | tee -a "$results" >&2
          continue
        fi
        jobs+=("W4 $lang")
      done
      ;;
    *) jobs+=("$w") ;;
  esac
done

srv_pids=()
stop_servers() {
  local p
  for p in "${srv_pids[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  srv_pids=()
}
trap 'stop_servers; rm -rf "$results" "$errlog" "$tmpdir"' EXIT

# start_server NAME [serve flags...] starts `tinybroker serve`, logging to $tmpdir/NAME.log, and
# sets srv_addr and srv_pid.
start_server() {
  local name=$1 log=$tmpdir/$1.log
  shift
  bin/tinybroker serve --listen 127.0.0.1:0 --log-level info "$@" >"$log" 2>&1 &
  srv_pid=$!
  srv_pids+=("$srv_pid")
  srv_addr=""
  # The server logs `listening: addr=HOST:PORT` at info level once it is bound (and its
  # plugins are loaded).
  for _ in $(seq 300); do
    srv_addr=$(sed -n 's/.*listening.* addr=\([^ ]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$srv_addr" ] && return 0
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$log" >&2
  echo "server $name did not start" >&2
  exit 1
}

# run_bench LABEL ARGS... runs `tinybroker bench ARGS... RUN_FLAGS`: result lines go to
# $results, progress and errors to $errlog, both also to stderr; a failure adds
# "LABEL FAILED: why" to $results.
run_bench() {
  local label=$1
  shift
  # shellcheck disable=SC2086  # RUN_FLAGS is split on purpose
  if ! { bin/tinybroker bench "$@" ${RUN_FLAGS:-} 2>&1 >&3 3>&- |
    tee "$errlog" >&2 3>&-; } 3>&1 | tee -a "$results" >&2; then
    echo "$label FAILED: $(grep '^tinybroker:' "$errlog" | tail -n 1)" >>"$results"
  fi
}

# server_warnings NAME: warnings of a server (e.g. a slow consumer disconnected) belong with
# the results.
server_warnings() { grep -v -e '\[INFO\]' "$tmpdir/$1.log" >&2 || true; }

t0=$SECONDS
for job in "${jobs[@]}"; do
  w=${job%% *}
  case "$w" in
    W4)
      lang=${job#W4 }
      [ -z "${TB_CONFIG:-}" ] || echo "== W4 ignores TB_CONFIG: its plain server runs with the defaults" >&2
      start_server plain
      plain_addr=$srv_addr
      plain_pid=$srv_pid
      start_server "w4-$lang" --config "$PWD/w4-$lang.hcl"
      echo "== W4 lang=$lang: plain server $plain_addr (pid $plain_pid), with w4-$lang.hcl $srv_addr (pid $srv_pid)" >&2
      run_bench "W4 tinybroker lang=$lang" --addr "$plain_addr" --w4-addr "$srv_addr" --w4-lang "$lang" -w W4
      stop_servers
      server_warnings plain
      server_warnings "w4-$lang"
      ;;
    *)
      start_server "$w" "${serve_flags[@]}"
      echo "== $job against $srv_addr (server pid $srv_pid)" >&2
      label="$w tinybroker"
      [ "$w" != W5 ] || label="W5 tinybroker subs=${job##* }"
      # shellcheck disable=SC2086  # $job is split on purpose
      run_bench "$label" --addr "$srv_addr" --server-pid "$srv_pid" -w $job
      stop_servers
      server_warnings "$w"
      ;;
  esac
done

echo "== results: ${workloads[*]} in $((SECONDS - t0)) s"
cat "$results"
