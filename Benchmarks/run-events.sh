#!/usr/bin/env bash
# Account events benchmark (issue 47, part B): how fast siwa delivers the outbox of account events to an app, with
# the store on PostgreSQL. EVENTS deliveries (PEOPLE people, EVENTS / PEOPLE each, so that the order per person is
# kept as it is in use) are written into the outbox as the stores write them; `siwa serve` is then started with one
# app in event_webhooks, an nginx answering 204 (the receiver, so that what is measured is siwa and the database),
# and the time until the outbox is empty is measured, with siwa's and PostgreSQL's CPU per event. The ceiling line:
# the same bodies posted to the same nginx by wrk over keep-alive connections, the most the receiver takes.
# Release build under .build-release; loopback only; a throwaway PostgreSQL.
#
# Usage: Benchmarks/run-events.sh
# Environment: EVENTS (20000) PEOPLE (2000) SCRATCH_PATH (.build-release) NGINX (/usr/sbin/nginx)
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${EVENTS:-20000}"
PEOPLE="${PEOPLE:-2000}"
NGINX="${NGINX:-/usr/sbin/nginx}"
NGINX_WORKERS=1
scratch="${SCRATCH_PATH:-.build-release}"
source Benchmarks/lib.sh
bench_need_wrk_nginx
build_release siwa

work="$(mktemp -d /tmp/siwa-events-bench.XXXXXX)"
PGDATA="$(mktemp -d /tmp/siwa-events-pg.XXXXXX)"   # its own: the postgres user cannot enter $work
PGRUN=()
pg_ctl() { "${PGRUN[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" "$@"; }
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pg_ctl -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work" "$PGDATA"
}
trap cleanup EXIT
start_throwaway_postgres siwa_events

# The app: nginx answering 204 to every POST.
rport="$(free_port)"
start_nginx receiver 1 "
    server {
        listen 127.0.0.1:$rport;
        keepalive_requests 1000000;
        location / { return 204; }
    }"

secret="whsec_$(head -c 32 /dev/urandom | base64)"
webhooks="[{\"name\": \"bench\", \"url\": \"http://127.0.0.1:$rport/hooks\", \"secret\": \"$secret\", \"events\": [\"person.groups_changed\"]}]"
key="$(head -c 32 /dev/urandom | base64)"
# The schema, made by siwa (a command migrates the store it opens).
"$bin/siwa" groups list --db "$pg_url" --data-key "$key" >/dev/null
body='{"data":{"added":["finance"],"removed":[],"sub":"000123.bench","via":"operator"},"timestamp":"2026-11-28T20:00:00.000Z","type":"person.groups_changed"}'
echo "writing $EVENTS deliveries for $PEOPLE people into the outbox ..." >&2
psql_q "
    INSERT INTO event_deliveries (webhook, event_id, type, sub, payload, created_at, next_attempt_at)
    SELECT 'bench', 'msg_bench' || i, 'person.groups_changed', '000123.bench' || (i % $PEOPLE), '$body', extract(epoch FROM now()), 0
    FROM generate_series(1, $EVENTS) i ORDER BY i;" >/dev/null
psql_q "VACUUM ANALYZE event_deliveries" >/dev/null

port="$(free_port)"; emport="$(free_port)"
pg_pids() { pgrep -f "postgres.*$PGDATA" || true; pgrep -u postgres -f "postgres: " || true; }
pg_before="$(cpu_ticks $(pg_pids | sort -u))"
started="$(date +%s%N)"
SIWA_LOG_LEVEL=warning SIWA_EVENT_WEBHOOKS="$webhooks" "$bin/siwa" serve --port "$port" --emulator-port "$emport" --db "$pg_url" --data-key "$key" \
    >> "$work/siwa.log" 2>&1 &
siwa_pid=$!; pids+=("$siwa_pid")
left="$EVENTS"
for _ in $(seq 1 1200); do
    left="$(psql_q "SELECT COUNT(*) FROM event_deliveries")"
    [ "$left" = 0 ] && break
    kill -0 "$siwa_pid" 2>/dev/null || { cat "$work/siwa.log" >&2; exit 1; }
    sleep 0.1
done
elapsed_ms=$(( ($(date +%s%N) - started) / 1000000 ))
siwa_ticks="$(cpu_ticks "$siwa_pid")"
pg_after="$(cpu_ticks $(pg_pids | sort -u))"
[ "$left" = 0 ] || { echo "the outbox still holds $left deliveries after two minutes" >&2; tail -20 "$work/siwa.log" >&2; exit 1; }
delivered="$(curl -s "http://127.0.0.1:$port/metrics" | awk -F' ' '/^siwa_account_event_deliveries_total\{outcome="delivered"\}/ {print $2}')"
hz="$(getconf CLK_TCK)"
rate="$(awk -v n="$EVENTS" -v ms="$elapsed_ms" 'BEGIN {printf "%.0f", n / (ms / 1000)}')"
siwa_us="$(awk -v t="$siwa_ticks" -v hz="$hz" -v n="$EVENTS" 'BEGIN {printf "%.0f", t / hz * 1e6 / n}')"
pg_us="$(awk -v a="$pg_before" -v b="$pg_after" -v hz="$hz" -v n="$EVENTS" 'BEGIN {printf "%.0f", (b - a) / hz * 1e6 / n}')"

# The ceiling: the receiver alone, the same body posted over keep-alive connections.
printf 'wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = "application/json"\n' "$body" > "$work/post.lua"
wrk -t1 -c64 -d5s -s "$work/post.lua" "http://127.0.0.1:$rport/hooks" > "$work/ceiling.txt" 2>&1
ceiling="$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$work/ceiling.txt")"

cat <<REPORT

## siwa account events benchmark

$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, measured: $measured. $EVENTS deliveries of person.groups_changed for
$PEOPLE people in the outbox ($pg_label), one app (nginx answering 204), siwa serve started on them; time until the
outbox is empty (siwa's start included).

| line | events/s | time | siwa CPU per event | PostgreSQL CPU per event | delivered (siwa's metric) |
|---|---|---|---|---|---|
| siwa, outbox on PostgreSQL → app | $rate | $elapsed_ms ms | $siwa_us µs | $pg_us µs | ${delivered:-?} |
| ceiling: wrk posting the same body to the app | $ceiling | 5 s | | | |

Target (issue 47): at least 1,000 events/s.
REPORT
