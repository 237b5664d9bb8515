#!/usr/bin/env bash
# Web benchmark (issue 8): siwa's pages and full sign-in callback under wrk, next to a Hummingbird hello-world
# (the HTTP ceiling) and the raw RS256 rate (the crypto ceiling), plus memory, start-to-ready time and growth.
# Builds release binaries under .build-release (the debug .build is left alone); everything on loopback.
#
# Usage: Benchmarks/run-web.sh
# Environment: PEER (1; 0 skips the django-allauth peer) PEER_CALLBACKS (1500) PEER_VENV (/tmp/siwa-peer-venv)
#              WRK_SECONDS (10) WRK_CONNECTIONS (32) WRK_THREADS (2) CALLBACKS (tuples per callback run, 9000)
#              CALLBACK_SECONDS (5: callback lines must end before their tuples run out)
#              PAGE_ROUNDS (3) PAGE_SECONDS (5): (a), (d), (g), (h) and the hello-world alternate, each keeps its best round
#              LOG_DIR (/tmp/siwa-web-bench-logs)
#              GROWTH ("1000 10000 100000": users+sessions stored before each extra callback run; "" to skip)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
SECS="${WRK_SECONDS:-10}"
CONNS="${WRK_CONNECTIONS:-32}"
export WRK_THREADS="${WRK_THREADS:-2}"
# At most 9000: the emulator sweeps its code store with a full scan on every redemption while it holds more
# than 10 000 codes (EmulatorState.sweepCodes), which would charge the emulator's O(n) to siwa's callback.
CALLBACKS_N="${CALLBACKS:-9000}"
CALLBACK_SECS="${CALLBACK_SECONDS:-5}"
PAGE_ROUNDS="${PAGE_ROUNDS:-3}"
PAGE_SECS="${PAGE_SECONDS:-5}"
GROWTH="${GROWTH-1000 10000 100000}"

command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }; }
command -v sqlite3 >/dev/null || apt-get install -y sqlite3 >/dev/null
command -v curl >/dev/null || apt-get install -y curl >/dev/null

echo "building release binaries (siwa, HelloWorld, VerifyBenchmark) under .build-release ..." >&2
swift build -c release --product siwa --scratch-path .build-release >&2
swift build -c release --product HelloWorld --scratch-path .build-release >&2
swift build -c release --product VerifyBenchmark --scratch-path .build-release >&2
bin="$(swift build -c release --scratch-path .build-release --show-bin-path)"

work="$(mktemp -d /tmp/siwa-web-bench.XXXXXX)"
logs="${LOG_DIR:-/tmp/siwa-web-bench-logs}"   # server logs and raw wrk outputs are copied here at exit
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$logs"/ 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }   # utime + stime, in clock ticks
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# wrk_run NAME URL [wrk args...]: runs wrk, leaves its output in $work/NAME.txt
wrk_run() {
    local name="$1" url="$2"; shift 2
    wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECS}s" --latency "$@" "$url" > "$work/$name.txt" 2>&1 || true
}
# Fields from a wrk output: rate, p50, p99, completed requests, duration, non-2xx/3xx and socket errors.
wrk_rate() { awk '/^Requests\/sec:/ {print $2}' "$work/$1.txt"; }
wrk_pct() { awk -v p="$2%" '$1 == p {print $2; exit}' "$work/$1.txt"; }
wrk_requests() { awk '/requests in/ {print $1; exit}' "$work/$1.txt"; }
wrk_duration() { awk '/requests in/ {sub(",", "", $4); print $4; exit}' "$work/$1.txt"; }
wrk_errors() {
    local bad sock
    bad="$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$work/$1.txt")"
    sock="$(awk '/Socket errors:/ {print}' "$work/$1.txt")"
    signins="$(awk '/^SIGNINS/ {print $2 ", " $3}' "$work/$1.txt")"
    echo "${bad:-0}${sock:+ ($sock)}${signins:+; sign-ins $signins}"
}

rows=()
row() { rows+=("| $1 | $(wrk_rate "$2") | $(wrk_pct "$2" 50) | $(wrk_pct "$2" 99) | $(wrk_requests "$2") in $(wrk_duration "$2") | $(wrk_errors "$2") |"); }

# ---------------------------------------------------------------------------------------------------------
# siwa serve, local mode (emulator in process), fresh SQLite db, no rate limit, warnings only.
port="$(free_port)"; emport="$(free_port)"
db="$work/siwa.sqlite"
# start_siwa: launches siwa serve on the same ports and db; sets siwa_pid and ready_ms (launch → /readyz 200).
start_siwa() {
    local start_ns
    start_ns="$(now_ns)"
    # The rule of line (h): /billing/ asks for a sign-in with Apple within the last second; wrk, on loopback, stands for
    # Traefik, whose X-Forwarded-* are believed from a trusted proxy only.
    SIWA_TRUSTED_PROXIES=127.0.0.1 SIWA_ACCESS_RULES='[{"paths": ["^/billing/"], "policy": "allow", "max_auth_age": 1}]' \
    SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning "$bin/siwa" serve --port "$port" --emulator-port "$emport" --db "$db" \
        >> "$work/siwa.log" 2>&1 &
    siwa_pid=$!; pids+=("$siwa_pid")
    until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)" = 200 ]; do
        kill -0 "$siwa_pid" 2>/dev/null || { cat "$work/siwa.log" >&2; echo "siwa serve exited" >&2; exit 1; }
        sleep 0.005
    done
    ready_ms=$(( ($(now_ns) - start_ns) / 1000000 ))
    until curl -s -o /dev/null "http://127.0.0.1:$emport/auth/keys"; do sleep 0.01; done
}
stop_siwa() { kill "$siwa_pid"; wait "$siwa_pid" 2>/dev/null || true; }
start_siwa
first_ready_ms="$ready_ms"
sleep 2
rss_idle="$(rss_kb "$siwa_pid")"
rss_idle_anon="$(awk '/^RssAnon:/ {print $2}' "/proc/$siwa_pid/status")"
rss_idle_file="$(awk '/^RssFile:/ {print $2}' "/proc/$siwa_pid/status")"
base="http://127.0.0.1:$port"

# (e) the HTTP ceiling: a Hummingbird hello-world built in the same run, measured in the same rounds as the
# pages so that a noisy moment on the machine does not skew their ratio.
hport="$(free_port)"
"$bin/HelloWorld" "$hport" > "$work/hello.log" 2>&1 &
hello_pid=$!; pids+=("$hello_pid")
until curl -s -o /dev/null "http://127.0.0.1:$hport/"; do sleep 0.01; done

# Warm-up (not reported)
wrk -t"$WRK_THREADS" -c"$CONNS" -d2s "$base/" > /dev/null 2>&1 || true
wrk -t"$WRK_THREADS" -c"$CONNS" -d2s "http://127.0.0.1:$hport/" > /dev/null 2>&1 || true

SESSION_COOKIE="$(python3 Benchmarks/web/gen_callbacks.py "$port" --session)"
export SESSION_COOKIE
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Cookie: $SESSION_COOKIE" "$base/session")" = 200 ] || { echo "session cookie does not open /session" >&2; exit 1; }

# (g) an invitation's page (issue 47), as a person who is not signed in opens its link: made by siwa invite create.
invite_path="$("$bin/siwa" invite create --group bench --uses 10 --note "An invitation for the benchmark" --db "$db" 2>/dev/null | sed -E 's|^https?://[^/]+||')"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base$invite_path")" = 200 ] || { echo "the invitation's page $invite_path does not answer 200" >&2; exit 1; }

# (h) the step-up page (issue 47): a navigation to /billing/, whose rule asks for a sign-in within the last second,
# as Traefik's forwardAuth asks /auth/forward, with a session older than that.
export FORWARDED_HOST="127.0.0.1:$port"
sleep 1.1
stepup_status="$(curl -s -o /dev/null -w '%{http_code}' -H "Cookie: $SESSION_COOKIE" -H 'Accept: text/html' -H 'Sec-Fetch-Mode: navigate' \
    -H 'X-Forwarded-Method: GET' -H 'X-Forwarded-Proto: http' -H "X-Forwarded-Host: $FORWARDED_HOST" -H 'X-Forwarded-Uri: /billing/invoices?year=2026' "$base/auth/forward")"
[ "$stepup_status" = 401 ] || { echo "the step-up page answers $stepup_status, not 401" >&2; exit 1; }

# (a), (d), (e), (g), (h): PAGE_ROUNDS alternating rounds of PAGE_SECONDS each; each line keeps its best round.
best_round() {
    local name="$1" best="" best_rate=0 f r
    for f in "$work/$name".r*.txt; do
        r="$(awk '/^Requests\/sec:/ {print $2}' "$f")"
        if awk -v a="${r:-0}" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then best="$f"; best_rate="$r"; fi
    done
    cp "$best" "$work/$name.txt"
    cp "${best%.txt}.cpu" "$work/$name.cpu"
}
# wrk_page NAME PID URL [wrk args...]: wrk_run, and the CPU time of process PID per request (µs) in $work/NAME.cpu: a
# throughput ratio on two shared cores moves with the machine, the CPU a request costs much less.
wrk_page() {
    local name="$1" pid="$2" cpu0 cpu1
    shift 2
    cpu0="$(cpu_ticks "$pid")"
    wrk_run "$name" "$@"
    cpu1="$(cpu_ticks "$pid")"
    awk -v t="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" -v n="$(wrk_requests "$name")" \
        'BEGIN { if (n > 0) printf "%.1f", 1000000 * t / hz / n; else print "n/a" }' > "$work/$name.cpu"
}
SECS_SAVED="$SECS"; SECS="$PAGE_SECS"
for round in $(seq 1 "$PAGE_ROUNDS"); do
    echo "(a) GET /, (d) GET /session, (g) an invitation's page, (h) the step-up page, (e) hello-world: round $round of $PAGE_ROUNDS" >&2
    wrk_page "hello.r$round" "$hello_pid" "http://127.0.0.1:$hport/"
    wrk_page "signin.r$round" "$siwa_pid" "$base/"
    wrk_page "session.r$round" "$siwa_pid" "$base/session" -s Benchmarks/lua/session.lua
    wrk_page "invite.r$round" "$siwa_pid" "$base$invite_path"
    wrk_page "stepup.r$round" "$siwa_pid" "$base/auth/forward" -s Benchmarks/lua/stepup.lua
done
SECS="$SECS_SAVED"
for name in hello signin session invite stepup; do best_round "$name"; done
kill "$hello_pid" 2>/dev/null || true
row "(a) \`GET /\` sign-in page (best of $PAGE_ROUNDS rounds)" signin
row "(d) \`GET /session\` signed in (best of $PAGE_ROUNDS rounds)" session
row "(g) \`GET /auth/invite/…\` an invitation's page, not signed in (best of $PAGE_ROUNDS rounds)" invite
row "(h) \`GET /auth/forward\` a navigation to a \`max_auth_age\` path, session too old: the step-up page, 401 (best of $PAGE_ROUNDS rounds)" stepup

# (c) the full callback: fresh tuples through the emulator's headless consent, each POSTed once.
# RSS is sampled every 0.2 s during the run; the maximum and the value at the end are reported.
callback_run() {
    local name="$1" label="$2" t0 t1
    t0="$(now_ns)"
    python3 Benchmarks/web/gen_callbacks.py "$port" "$CALLBACKS_N" "$work/$name.tuples" --workers 4
    t1="$(now_ns)"
    echo "  generated $CALLBACKS_N callbacks in $(( (t1 - t0) / 1000000 )) ms" >&2
    ( peak=0; while kill -0 "$siwa_pid" 2>/dev/null; do r="$(rss_kb "$siwa_pid")"; [ "$r" -gt "$peak" ] && peak="$r" && echo "$peak" > "$work/$name.peak"; sleep 0.2; done ) &
    local sampler=$!
    local cpu0 cpu1
    cpu0="$(cpu_ticks "$siwa_pid")"
    # Shorter than the other lines: wrk reports requests over the whole duration even when the tuples ran out
    # early, so the run must end before they do (at most 9000, see CALLBACKS_N).
    SECS_SAVED="$SECS"; SECS="$CALLBACK_SECS"
    CALLBACKS="$work/$name.tuples" wrk_run "$name" "$base/auth/apple/callback" -s Benchmarks/lua/callback.lua
    SECS="$SECS_SAVED"
    cpu1="$(cpu_ticks "$siwa_pid")"
    kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true
    # CPU of the siwa process (its in-process emulator included) per request of the run.
    awk -v t="$((cpu1 - cpu0))" -v hz="$(getconf CLK_TCK)" -v n="$(wrk_requests "$name")" \
        'BEGIN { if (n > 0) printf "%.2f", 1000 * t / hz / n; else print "n/a" }' > "$work/$name.cpu"
    echo "$(rss_kb "$siwa_pid")" > "$work/$name.end"
    row "$label" "$name"
    rm -f "$work/$name.tuples"
}
echo "(c) POST /auth/apple/callback" >&2
callback_run callback "(c) \`POST /auth/apple/callback\` full sign-in"
rss_cb_peak="$(cat "$work/callback.peak")"; rss_cb_end="$(cat "$work/callback.end")"
echo "(c') POST /auth/apple/callback at 8 connections" >&2
CONNS_SAVED="$CONNS"; CONNS=8
callback_run callback8 "(c') callback as (c), 8 connections"
CONNS="$CONNS_SAVED"

echo "(b) GET /auth/apple" >&2
wrk_run start "$base/auth/apple"
row "(b) \`GET /auth/apple\` start (302)" start

# Growth: users + sessions stored (bulk insert with the sqlite3 CLI while siwa runs), then the callback again.
growth_rows=()
users_now() { sqlite3 "$db" "SELECT count(*) FROM users"; }
sessions_now() { sqlite3 "$db" "SELECT count(*) FROM sessions"; }
growth_rows+=("| $(users_now) | $(sessions_now) | $(wrk_rate callback) | $(wrk_pct callback 50) | $(wrk_pct callback 99) | $first_ready_ms ms | $(mb "$rss_idle") | $(mb "$rss_cb_peak") |")
inserted=0
for target in $GROWTH; do
    echo "(growth) $target users+sessions" >&2
    sqlite3 "$db" <<SQL
.timeout 30000
WITH RECURSIVE n(i) AS (SELECT $inserted + 1 UNION ALL SELECT i + 1 FROM n WHERE i < $target)
INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at)
SELECT printf('000999.bench%032d.%04d', i, i % 10000), printf('user%d@example.com', i), 0, 'Bench', printf('User %d', i),
       unixepoch(), unixepoch() FROM n;
WITH RECURSIVE n(i) AS (SELECT $inserted + 1 UNION ALL SELECT i + 1 FROM n WHERE i < $target)
INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at)
SELECT lower(hex(randomblob(32))), printf('000999.bench%032d.%04d', i, i % 10000), lower(hex(randomblob(16))),
       unixepoch(), unixepoch() + 7 * 86400 FROM n;
SQL
    inserted="$target"
    # Restart: the in-process emulator's code store starts empty again (see CALLBACKS above), the db stays.
    stop_siwa; start_siwa; sleep 1
    growth_ready="$ready_ms"; growth_idle="$(rss_kb "$siwa_pid")"
    callback_run "growth$target" "(c) callback, $target extra users+sessions stored"
    growth_rows+=("| $(users_now) | $(sessions_now) | $(wrk_rate "growth$target") | $(wrk_pct "growth$target" 50) | $(wrk_pct "growth$target" 99) | $growth_ready ms | $(mb "$growth_idle") | $(mb "$(cat "$work/growth$target.peak")") |")
done
db_size="$(du -k "$db" "$db-wal" 2>/dev/null | awk '{s += $1} END {print s}')"

row "(e) Hummingbird hello-world \`GET /\` (HTTP ceiling, best of $PAGE_ROUNDS rounds alternating with (a) and (d))" hello

# The peer: django-allauth's Apple provider (PyPI) under gunicorn with as many workers as cores, pointed at a
# second emulator process (\`siwa emulator\`, same code, its web client's return URL set to the peer's callback).
# Its tuples are taken through allauth's own login + form_post receiver; the wrk line GETs allauth's finish
# URL, where it exchanges the code, fetches the keys, verifies the id_token, upserts the user and logs in.
peer_run() {
    local venv="${PEER_VENV:-/tmp/siwa-peer-venv}"
    # The socialaccount extra brings what allauth's Apple provider imports (requests, PyJWT with cryptography);
    # the check imports them too, so a venv made without the extra is completed rather than trusted.
    if ! "$venv/bin/python" -c "import gunicorn, allauth, requests, jwt, cryptography" >/dev/null 2>&1; then
        echo "  installing the peer (django-allauth[socialaccount], gunicorn) into $venv" >&2
        { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } && "$venv/bin/pip" install -q "django-allauth[socialaccount]==65.21.1" "Django==5.2.19" "gunicorn==27.0.1" >&2 || return 1
    fi
    local pport peport
    pport="$(free_port)"; peport="$(free_port)"
    "$bin/siwa" emulator --print-config > "$work/peer-emulator.base.json" || return 1
    python3 - "$work/peer-emulator.base.json" "http://127.0.0.1:$pport/accounts/apple/login/callback/" > "$work/peer-emulator.json" <<'PY' || return 1
import json, sys
c = json.load(open(sys.argv[1]))
c["clients"][0]["redirectURIs"] = [sys.argv[2]]
c["clients"][0].pop("notificationURL", None)
print(json.dumps(c))
PY
    "$bin/siwa" emulator --config "$work/peer-emulator.json" --port "$peport" > "$work/peer-emulator.log" 2>&1 &
    local emu_pid=$!; pids+=("$emu_pid")
    export PEER_DB="$work/peer.sqlite3" PEER_EMULATOR="http://127.0.0.1:$peport"
    "$venv/bin/python" Benchmarks/peer/manage.py migrate -v 0 >&2 || return 1
    "$venv/bin/python" Benchmarks/peer/manage.py shell -c "from django.contrib.sites.models import Site; Site.objects.update_or_create(id=1, defaults={'domain': '127.0.0.1:$pport', 'name': 'peer'})" >&2 || return 1
    (cd Benchmarks/peer && exec "$venv/bin/gunicorn" -w "$(nproc)" -b "127.0.0.1:$pport" --log-level warning peersite.wsgi) > "$work/peer.log" 2>&1 &
    local g_pid=$!; pids+=("$g_pid")
    until curl -s -o /dev/null "http://127.0.0.1:$pport/session/" && curl -s -o /dev/null "http://127.0.0.1:$peport/auth/keys"; do
        kill -0 "$g_pid" 2>/dev/null || { cat "$work/peer.log" >&2; return 1; }
        sleep 0.1
    done
    local t0 t1
    t0="$(now_ns)"
    "$venv/bin/python" Benchmarks/peer/gen_peer.py "$pport" "${PEER_CALLBACKS:-1500}" "$work/peer.tuples" --workers 4 || { tail -20 "$work/peer.log" >&2; return 1; }
    t1="$(now_ns)"
    echo "  generated ${PEER_CALLBACKS:-1500} peer sign-ins in $(( (t1 - t0) / 1000000 )) ms" >&2
    # One sign-in first, as siwa had one before its callback line: the first creates the user and social account.
    IFS=$'\t' read -r first_path first_cookie < "$work/peer.tuples"
    curl -s -o /dev/null -H "Cookie: $first_cookie" "http://127.0.0.1:$pport$first_path"
    sed -i 1d "$work/peer.tuples"
    CALLBACKS="$work/peer.tuples" wrk_run peer "http://127.0.0.1:$pport/" -s Benchmarks/lua/peer_finish.lua
    peer_rss_kb="$(for p in $(pgrep -P "$g_pid") "$g_pid"; do awk '/^VmRSS:/ {print $2}' "/proc/$p/status"; done | awk '{s += $1} END {print s}')"
    row "(peer) django-allauth Apple callback (finish: token exchange … login), gunicorn -w $(nproc)" peer
    kill "$g_pid" "$emu_pid" 2>/dev/null || true
}
peer_rss_kb=""
if [ "${PEER:-1}" = 1 ]; then
    echo "(peer) django-allauth" >&2
    peer_run || echo "  the peer did not run; see above" >&2
fi

# (f) the crypto ceiling: swift-crypto's raw RS256 verification rate (one core), from the core benchmark.
echo "(f) crypto ceiling" >&2
"$bin/VerifyBenchmark" --seconds 1 --rounds 2 > "$work/core.txt"
rs256="$(grep 'raw RS256' "$work/core.txt")"
verify="$(grep 'id_token verify' "$work/core.txt")"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f %%", 100 * a / b; else print "n/a" }'; }

cat <<OUT

## siwa web benchmark

$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(uname -m)), $(swift --version 2>/dev/null | head -1)
wrk ${WRK_THREADS} threads, ${CONNS} connections, ${SECS} s per line, --latency; all on loopback on the same machine
(load generator and servers share the cores). siwa: \`siwa serve\` local mode (emulator in process), SQLite,
SIWA_RATE_LIMIT_PER_MINUTE=0, SIWA_LOG_LEVEL=warning. Callback lines: $CALLBACK_SECS s each, $CALLBACKS_N pre-generated callbacks per run,
each POSTed once (a run that used them all would under-report its rate; see "requests in").

| line | requests/s | p50 | p99 | requests | non-2xx/3xx; sign-ins completed |
|---|---:|---:|---:|---|---|
$(printf '%s\n' "${rows[@]}")

(f) crypto ceiling (VerifyBenchmark, one task on one core):
\`\`\`
$rs256
$verify
\`\`\`

| ratio | value |
|---|---:|
| sign-in page / hello-world | $(ratio "$(wrk_rate signin)" "$(wrk_rate hello)") |
| session page / hello-world | $(ratio "$(wrk_rate session)" "$(wrk_rate hello)") |
| invitation's page / hello-world (target, as the sign-in page's: 85 %) | $(ratio "$(wrk_rate invite)" "$(wrk_rate hello)") |
| step-up page / hello-world (target, as the sign-in page's: 85 %) | $(ratio "$(wrk_rate stepup)" "$(wrk_rate hello)") |
| CPU per request (µs, the server's process, best round): sign-in page / session page / invitation's page / step-up page / hello-world | $(cat "$work/signin.cpu") / $(cat "$work/session.cpu") / $(cat "$work/invite.cpu") / $(cat "$work/stepup.cpu") / $(cat "$work/hello.cpu") |
| GET /auth/apple / hello-world | $(ratio "$(wrk_rate start)" "$(wrk_rate hello)") |
| callback / hello-world | $(ratio "$(wrk_rate callback)" "$(wrk_rate hello)") |
| CPU of the siwa process (in-process emulator included) per callback, 32 / 8 connections | $(cat "$work/callback.cpu") / $(cat "$work/callback8.cpu") ms |
| siwa callback / peer callback | $( [ -s "$work/peer.txt" ] && awk -v a="$(wrk_rate callback)" -v b="$(wrk_rate peer)" 'BEGIN { if (b > 0) printf "%.1f×", a / b; else print "n/a" }' || echo "n/a") |

| siwa process | value |
|---|---:|
| start to ready (launch → \`GET /readyz\` 200), empty db | ${first_ready_ms} ms |
| resident memory idle after start (VmRSS) | $(mb "$rss_idle") MB |
| of which anonymous (heap, stacks) / file-backed (binary and shared libraries, shared and reclaimable) | $(mb "$rss_idle_anon") / $(mb "$rss_idle_file") MB |
| resident memory, peak during the first callback run | $(mb "$rss_cb_peak") MB |
| resident memory at the end of the first callback run | $(mb "$rss_cb_end") MB |
| SQLite db + WAL at the end | $(mb "${db_size:-0}") MB |
| peer: resident memory of gunicorn master + workers at the end of its run | ${peer_rss_kb:+$(mb "$peer_rss_kb") MB} |

Growth (users + sessions bulk-inserted with sqlite3, siwa restarted on the same db, then a callback run):

| users | sessions (after the run) | callback requests/s | p50 | p99 | start to ready | idle RSS MB | peak RSS MB under callback load |
|---:|---:|---:|---:|---:|---:|---:|---:|
$(printf '%s\n' "${growth_rows[@]}")
OUT
