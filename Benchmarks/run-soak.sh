#!/usr/bin/env bash
# Soak with faults (issue 9): sign-ins, session views and notifications from many concurrent clients against
# `siwa serve` on PostgreSQL, talking to a standalone emulator (`siwa emulator`) that fails a share of its calls;
# PostgreSQL is restarted once in the middle. At the end every user the clients signed in must be in the
# database, every session cookie they hold must still open its user's session page, siwa must still be the
# process it was, and its memory must be flat. Builds release binaries under .build-release; all on loopback.
#
# Usage: Benchmarks/run-soak.sh
# Environment: SOAK_SECONDS (300) SOAK_CLIENTS (200) SOAK_FAULT_RATE (0.05) LOG_DIR (/tmp/siwa-soak-logs)
#              SOAK_USERS_PER_CLIENT (12: emulator test users each client owns)
#              SOAK_PG_RESTART_AT (0.4: share of the run before PostgreSQL is stopped) SOAK_PG_DOWN (5: seconds down)
#              SOAK_KEYS_MAX_AGE (30: the emulator's key set max-age, so siwa refetches it under faults)
#              SOAK_LOG_LEVEL (notice: siwa's log level)
# Exit status: 0 when there was no defect, no lost user or session, no crash or hang (requests stuck, shutdown
# not completing) and memory stayed flat.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${SOAK_SECONDS:-300}"
CLIENTS="${SOAK_CLIENTS:-200}"
RATE="${SOAK_FAULT_RATE:-0.05}"
PER_CLIENT="${SOAK_USERS_PER_CLIENT:-12}"
PG_AT="${SOAK_PG_RESTART_AT:-0.4}"
PG_DOWN="${SOAK_PG_DOWN:-5}"
KEYS_MAX_AGE="${SOAK_KEYS_MAX_AGE:-30}"
logs="${LOG_DIR:-/tmp/siwa-soak-logs}"   # server, emulator and PostgreSQL logs are copied here at exit

command -v curl >/dev/null || apt-get install -y curl >/dev/null
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >/dev/null; }

echo "building release binaries (siwa, Soak) under .build-release ..." >&2
swift build -c release --product siwa --scratch-path .build-release >&2
swift build -c release --product Soak --scratch-path .build-release >&2
bin="$(swift build -c release --scratch-path .build-release --show-bin-path)"

work="$(mktemp -d /tmp/siwa-soak.XXXXXX)"
chmod 755 "$work"   # PostgreSQL may run as another user and needs to reach its data directory inside
PGBIN="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
PGDATA="$work/pg"
mkdir -p "$PGDATA"
PGRUN=()
if [ "$(id -u)" -eq 0 ]; then
    # initdb refuses to run as root: run the server as the postgres user (as scripts/test does).
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$PGDATA"
    PGRUN=(runuser -u postgres --)
fi
pg_ctl() { "${PGRUN[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" "$@"; }

pids=()
cleanup() {
    local pid left
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 100); do   # up to 10 s to exit, then killed: a stuck siwa must not keep the script waiting
        left=0; for pid in "${pids[@]}"; do running "$pid" && left=1; done
        [ "$left" -eq 0 ] && break; sleep 0.1
    done
    for pid in "${pids[@]}"; do if running "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pg_ctl -m immediate stop >/dev/null 2>&1 || true
    mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$work"/*.md "$PGDATA/server.log" "$logs"/ 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
status_of() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$1" || true; }
# running PID: the process exists and has not exited (a child that exited stays a zombie until waited for).
running() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }

# ---------------------------------------------------------------------------------------------------------
# Throwaway PostgreSQL on loopback.
pgport="$(free_port)"
"${PGRUN[@]}" "$PGBIN/initdb" -D "$PGDATA" -U siwa --auth=trust >/dev/null
pg_ctl -o "-h 127.0.0.1 -p $pgport -k $PGDATA" -l "$PGDATA/server.log" -w start >/dev/null
"${PGRUN[@]}" "$PGBIN/createdb" -h 127.0.0.1 -p "$pgport" -U siwa siwa_soak
psql_q() { "$PGBIN/psql" -X -q -At -h 127.0.0.1 -p "$pgport" -U siwa -d siwa_soak -c "$1"; }

# The standalone emulator: siwa's return URL and notification URL registered, CLIENTS × PER_CLIENT test users.
port="$(free_port)"; emport="$(free_port)"
"$bin/siwa" emulator --print-config > "$work/emulator.base.json"
python3 - "$work/emulator.base.json" "$port" "$CLIENTS" "$PER_CLIENT" "$KEYS_MAX_AGE" "$work/AuthKey_EMU0KEY001.p8" > "$work/emulator.json" <<'PY'
import json, secrets, sys
path, port, clients, per, max_age, key_out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
c = json.load(open(path))
for client in c["clients"]:
    if client["redirectURIs"]:
        client["redirectURIs"] = [f"http://127.0.0.1:{port}/auth/apple/callback"]
    client["notificationURL"] = f"http://127.0.0.1:{port}/auth/apple/notifications"
with open(key_out, "w") as f:
    f.write(c["clients"][0]["privateKeyPEM"] + "\n")
c["keySetMaxAge"] = max_age
c["users"] = [
    {"sub": f"{n % 1000000:06d}.{secrets.token_hex(16)}.{i:04d}", "firstName": f"Soak{n}x{i}", "lastName": "Tester",
     "email": f"soak{n}.{i}@example.com", "relayEmail": f"s{n}x{i}{secrets.token_hex(3)}@privaterelay.appleid.com"}
    for n in range(clients) for i in range(per)
]
print(json.dumps(c))
PY
"$bin/siwa" emulator --config "$work/emulator.json" --port "$emport" > "$work/emulator.log" 2>&1 &
emu_pid=$!; pids+=("$emu_pid")
until [ "$(status_of "http://127.0.0.1:$emport/auth/keys")" = 200 ]; do
    running "$emu_pid" || { cat "$work/emulator.log" >&2; echo "the emulator exited" >&2; exit 1; }
    sleep 0.1
done

# siwa serve on PostgreSQL, configured as for Apple but with the emulator as Apple (the test team's key).
data_key="$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')"
SIWA_TEAM_ID=EMU0TEAM01 SIWA_KEY_ID=EMU0KEY001 SIWA_KEY_FILE="$work/AuthKey_EMU0KEY001.p8" \
SIWA_SERVICES_ID=com.example.siwa.web SIWA_RETURN_URL="http://127.0.0.1:$port/auth/apple/callback" \
SIWA_APPLE_BASE_URL="http://127.0.0.1:$emport" SIWA_DATA_KEY="$data_key" \
SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL="${SOAK_LOG_LEVEL:-notice}" \
    "$bin/siwa" serve --port "$port" --db "postgres://siwa@127.0.0.1:$pgport/siwa_soak" > "$work/siwa.log" 2>&1 &
siwa_pid=$!; pids+=("$siwa_pid")
ready_deadline=$(( $(date +%s) + 60 ))
until [ "$(status_of "http://127.0.0.1:$port/readyz")" = 200 ]; do
    running "$siwa_pid" || { cat "$work/siwa.log" >&2; echo "siwa serve exited" >&2; exit 1; }
    [ "$(date +%s)" -lt "$ready_deadline" ] || { cat "$work/siwa.log" >&2; echo "siwa serve not ready within 60 s" >&2; exit 1; }
    sleep 0.1
done
sleep 2

# ---------------------------------------------------------------------------------------------------------
# The run: the driver in the background, siwa's RSS every 10 s, PostgreSQL restarted once.
t0="$(date +%s)"
rss_start="$(rss_kb "$siwa_pid")"
( while running "$siwa_pid"; do echo "$(( $(date +%s) - t0 )) $(rss_kb "$siwa_pid")" >> "$work/rss.txt"; sleep 10; done ) &
sampler=$!; pids+=("$sampler")

echo "soak: $CLIENTS clients for $SECS s, emulator faults $RATE; PostgreSQL restart at ${PG_AT} of the run" >&2
"$bin/Soak" --server "http://127.0.0.1:$port" --emulator "http://127.0.0.1:$emport" --emulator-config "$work/emulator.json" \
    --clients "$CLIENTS" --seconds "$SECS" --fault-rate "$RATE" --outage-file "$work/outage.txt" \
    --expected-users "$work/expected-users.txt" --deleted-users "$work/deleted-users.txt" > "$work/soak.md" &
driver=$!; pids+=("$driver")

sleep "$(awk -v s="$SECS" -v a="$PG_AT" 'BEGIN { printf "%.1f", s * a }')"
echo "soak: stopping PostgreSQL (pg_ctl stop -m fast) for ${PG_DOWN} s" >&2
stop_ms="$(now_ms)"
pg_ctl -m fast -w stop >/dev/null
sleep "$PG_DOWN"
pg_ctl -o "-h 127.0.0.1 -p $pgport -k $PGDATA" -l "$PGDATA/server.log" -w start >/dev/null
start_ms="$(now_ms)"
echo "$stop_ms $start_ms" > "$work/outage.txt"
ready_after=""
for _ in $(seq 1 1200); do
    if [ "$(status_of "http://127.0.0.1:$port/readyz")" = 200 ]; then ready_after=$(( $(now_ms) - start_ms )); break; fi
    running "$siwa_pid" || break
    sleep 0.05
done
echo "soak: PostgreSQL back; siwa /readyz 200 after ${ready_after:-never} ms" >&2

driver_rc=0
wait "$driver" || driver_rc=$?

# ---------------------------------------------------------------------------------------------------------
# The count.
alive="no"; running "$siwa_pid" && alive="yes (same process, pid $siwa_pid, never restarted)"
rss_end="$(rss_kb "$siwa_pid")"
kill "$sampler" 2>/dev/null || true
# Requests siwa still holds although the driver gave up on them (a hang): its sockets left in CLOSE-WAIT.
stuck="$(ss -tn state close-wait "( sport = :$port )" 2>/dev/null | tail -n +2 | wc -l)"
# Graceful shutdown: SIGTERM drains in-flight requests; a stuck one keeps siwa from exiting.
shutdown="not running"
if running "$siwa_pid"; then
    term_ms="$(now_ms)"
    kill -TERM "$siwa_pid"
    shutdown="did not exit within 20 s of SIGTERM (then killed)"
    for _ in $(seq 1 400); do
        running "$siwa_pid" || { shutdown="exited $(( $(now_ms) - term_ms )) ms after SIGTERM"; break; }
        sleep 0.05
    done
    running "$siwa_pid" && kill -KILL "$siwa_pid"
fi
psql_q "SELECT sub FROM users" | sort > "$work/found-users.txt"
psql_q "SELECT sub FROM tombstones" | sort > "$work/tombstones.txt"
sort "$work/expected-users.txt" > "$work/expected.sorted"
sort "$work/deleted-users.txt" > "$work/deleted.sorted"
expected_n="$(wc -l < "$work/expected.sorted")"
found_n="$(comm -12 "$work/expected.sorted" "$work/found-users.txt" | wc -l)"
missing_n="$(comm -23 "$work/expected.sorted" "$work/found-users.txt" | wc -l)"
deleted_n="$(wc -l < "$work/deleted.sorted")"
deleted_present="$(comm -12 "$work/deleted.sorted" "$work/found-users.txt" | wc -l)"
deleted_tombstoned="$(comm -12 "$work/deleted.sorted" "$work/tombstones.txt" | wc -l)"
users_total="$(wc -l < "$work/found-users.txt")"
sessions_total="$(psql_q "SELECT count(*) FROM sessions")"
notifications_total="$(psql_q "SELECT count(*) FROM notifications")"
revoked_users="$(psql_q "SELECT count(*) FROM users WHERE link_revoked_at IS NOT NULL")"

# Memory: start, after warm-up, max, end; flat when the last window's mean is within 10 % of the second's
# (windows of a minute in a five-minute run, a quarter of the run in shorter ones).
window="$(awk -v s="$SECS" 'BEGIN { w = s / 4; if (w > 60) w = 60; if (w < 10) w = 10; printf "%d", w }')"
read -r rss_warm rss_max mean_a mean_b flat growth < <(awk -v w="$window" -v s="$SECS" '
    { t = $1; r = $2; if (r > max) max = r
      if (warm == "" && t >= w) warm = r
      if (t >= w && t < 2 * w) { sa += r; na++ }
      if (t >= s - w && t <= s + 5) { sb += r; nb++ } }
    END { a = na ? sa / na : 0; b = nb ? sb / nb : 0
          g = a ? 100 * (b - a) / a : 0
          printf "%d %d %d %d %s %.1f\n", warm, max, a, b, (a && b <= a * 1.10) ? "yes" : "no", g }' "$work/rss.txt")
log_levels="$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(critical|error|warning|notice)$/) { n[$i]++; break } }
    END { for (l in n) printf "%s %d; ", l, n[l] }' "$work/siwa.log")"
crash_lines="$(grep -c -E 'Fatal error|Segmentation|Illegal instruction|Aborted' "$work/siwa.log" || true)"

failed=0
[ "$driver_rc" -eq 0 ] || failed=1
[ "$missing_n" -eq 0 ] && [ "$deleted_present" -eq 0 ] && [ "$deleted_tombstoned" -eq "$deleted_n" ] || failed=1
case "$alive" in yes*) ;; *) failed=1 ;; esac
case "$shutdown" in exited*) ;; *) failed=1 ;; esac
[ "$stuck" -eq 0 ] || failed=1
[ "$flat" = yes ] || failed=1

cat <<OUT

## siwa soak with faults

$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(uname -m)), $(swift --version 2>/dev/null | head -1), PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}')
\`siwa serve\` (release) on PostgreSQL against a standalone \`siwa emulator\` (key set max-age ${KEYS_MAX_AGE} s),
SIWA_RATE_LIMIT_PER_MINUTE=0, SIWA_LOG_LEVEL=${SOAK_LOG_LEVEL:-notice}; driver \`Benchmarks/Soak\` (AsyncHTTPClient), all on loopback
on the same machine. $CLIENTS clients × $PER_CLIENT test users each.

$(cat "$work/soak.md")

### PostgreSQL restart, database, process

| measure | value |
|---|---|
| PostgreSQL down (stop -m fast → start) | $(( (start_ms - stop_ms) / 1000 )).$(( (start_ms - stop_ms) % 1000 / 100 )) s at t=$(( (stop_ms / 1000) - t0 )) s |
| siwa \`/readyz\` 200 after PostgreSQL was back | ${ready_after:-never} ms (siwa not restarted) |
| users the clients signed in: found in \`users\` / expected | $found_n / $expected_n (missing: $missing_n) |
| users deleted by account-delete: gone / tombstoned / expected | $(( deleted_n - deleted_present )) / $deleted_tombstoned / $deleted_n |
| rows at the end | users $users_total (of which $revoked_users with consent revoked), sessions $sessions_total, notifications $notifications_total |
| siwa alive at the end | $alive; crash lines in its log: ${crash_lines:-0} |
| siwa requests still open at the end though the driver gave up on them (sockets in CLOSE-WAIT) | $stuck |
| siwa graceful shutdown at the end | $shutdown |
| siwa log lines by level | ${log_levels:-none} |
| siwa RSS: start / after warm-up (t≥${window} s) / max / end | $(mb "$rss_start") / $(mb "${rss_warm:-0}") / $(mb "${rss_max:-0}") / $(mb "$rss_end") MB |
| siwa RSS flat (mean of the last ${window} s vs t=${window}–$(( 2 * window )) s, within 10 %) | $flat: $(mb "${mean_b:-0}") vs $(mb "${mean_a:-0}") MB (${growth} %) |
| RSS samples (t s: MB) | $(awk '{ printf "%s: %.0f  ", $1, $2 / 1024 }' "$work/rss.txt") |

Verdict: $([ "$failed" -eq 0 ] && echo "PASS — no defect, no lost user or session, no crash or hang, memory flat" || echo "FAIL — see above; logs in $logs")
OUT
exit "$failed"
