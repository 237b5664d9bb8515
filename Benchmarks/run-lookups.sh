#!/usr/bin/env bash
# Session look-ups of cookies not in memory (issue 34): run-front.sh's random-cookie line (4) on its own (siwa serve
# --upstream on SQLite and on a throwaway PostgreSQL with SESSIONS sessions, /auth/check for MEMORY_SECONDS at
# WRK_CONNECTIONS connections, each request with the cookie of a random stored session, so nearly every one asks the
# store), and the same with a made-up cookie on every request. Counts answers other than 202 (401 for made-up cookies)
# and siwa's "session look-up not made" log lines (refusals); samples PostgreSQL's pg_stat_activity every 20 ms for the
# most of siwa's queries active at once. A report, not a test: exits 0 whatever the figures.
#
# Usage: Benchmarks/run-lookups.sh
# Environment: SESSIONS (100000) MEMORY_SECONDS (20) WRK_CONNECTIONS (64) WRK_THREADS (2)
#              SIWA_BIN_DIR (a directory holding another siwa to measure, e.g. an older commit's; default: a release
#              build of this tree under SCRATCH_PATH, .build-release) LOG_DIR (/tmp/siwa-lookups-logs)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS="${WRK_CONNECTIONS:-64}"; export WRK_THREADS="${WRK_THREADS:-2}"; SECS="${MEMORY_SECONDS:-20}"
export SESSIONS="${SESSIONS:-100000}"; NGINX_WORKERS=auto; NGINX=/usr/sbin/nginx
scratch="${SCRATCH_PATH:-.build-release}"
. Benchmarks/lib.sh
bench_need_wrk_nginx
if [ -n "${SIWA_BIN_DIR:-}" ]; then bin="$SIWA_BIN_DIR"; measured="siwa from $SIWA_BIN_DIR"; else build_release siwa; fi
work="$(mktemp -d /tmp/siwa-lookups.XXXXXX)"; chmod 755 "$work"
pids=(); PGBIN=""; PGDATA="$work/pg"; PGRUN=()
pg_ctl() { "${PGRUN[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" "$@"; }
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    [ -n "$PGBIN" ] && [ -d "$PGDATA/base" ] && { pg_ctl -m immediate stop >/dev/null 2>&1 || true; }
    logs="${LOG_DIR:-/tmp/siwa-lookups-logs}"; mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$logs"/ 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
start_upstream
port="$(free_port)"; emport="$(free_port)"; check_url="http://127.0.0.1:$port/auth/check"
rows=()
line() {   # line LABEL NAME LUA EXPECT [PGSAMPLE]
    local label="$1" name="$2" lua="$3" expect="$4" sample="${5:-}" most="n/a" sampler=""
    if [ -n "$sample" ]; then
        ( m=0; while :; do n="$(psql_q "SELECT count(*) FROM pg_stat_activity WHERE datname = 'siwa_front' AND state = 'active' AND query NOT LIKE '%pg_stat_activity%'")"; [ "$n" -gt "$m" ] && m="$n" && echo "$m" > "$work/$name.most"; sleep 0.02; done ) &
        sampler=$!
    fi
    EXPECT_STATUS="$expect" wrk_run "$name" "$check_url" "$siwa_pid" -s "$lua"
    [ -n "$sampler" ] && { kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; most="$(cat "$work/$name.most" 2>/dev/null || echo 0)"; }
    local unexpected; unexpected="$(awk '/^unexpected:/ {print $2}' "$work/$name.txt")"
    local busy; busy="$(grep -c 'session look-up not made' "$work/siwa.log" || true)"
    rows+=("| $label | $(wrk_rate "$name") | $(wrk_pct "$name" 50) | $(wrk_pct "$name" 99) | $(cat "$work/$name.cpu") µs | $(wrk_requests "$name") | $unexpected | $busy | $most |")
}
# SQLite, seeded as run-front.sh seeds it.
db="$work/siwa.sqlite"
start_siwa "$db"; stop_siwa   # creates the schema
seed_sqlite "$db" "$SESSIONS"
start_siwa "$db"
expect 202 "$check_url" -H "Cookie: siwa_session=benchsession$(printf '%031d' 1)"
line "SQLite, a random stored session (202)" sqlite-real Benchmarks/lua/check_many_count.lua 202
line "SQLite, a made-up cookie (401)" sqlite-madeup Benchmarks/lua/madeup_count.lua 401
stop_siwa
# PostgreSQL, throwaway.
start_throwaway_postgres siwa_front
start_siwa "$pg_url"; stop_siwa   # creates the schema
seed_postgres "$SESSIONS"
start_siwa "$pg_url"
expect 202 "$check_url" -H "Cookie: siwa_session=benchsession$(printf '%031d' 1)"
line "${pg_label%% (*}, a random stored session (202)" pg-real Benchmarks/lua/check_many_count.lua 202 sample
line "PostgreSQL, a made-up cookie (401)" pg-madeup Benchmarks/lua/madeup_count.lua 401 sample
stop_siwa
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $measured, load average $(cut -d' ' -f1-3 /proc/loadavg); wrk -t$WRK_THREADS -c$CONNS -d${SECS}s on /auth/check of siwa serve --upstream, $SESSIONS sessions stored"
echo
echo "| line | requests/s | p50 | p99 | CPU per request | requests | answers not the expected status | log lines \"session look-up not made\" (cumulative) | most siwa queries active at once (pg_stat_activity, every 20 ms) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
