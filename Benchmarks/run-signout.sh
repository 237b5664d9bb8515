#!/usr/bin/env bash
# Sign-out benchmark (issue 28): what back-channel logout adds to the person's sign-out. SESSIONS sessions are
# signed out one after another (POST /auth/signout with the page's CSRF token, as the session page's button does),
# half of them with tokens of CLIENTS OpenID clients issued in them (each client registered with a
# backchannel_logout_uri), half with none, alternating, on the same siwa; the two lines' latencies side by side.
# The clients' endpoint is a small HTTP server answering 200; its deliveries are counted at the end, to show the
# Logout Tokens did go out (after the answers, from the queue). Release build under .build-release; loopback only.
#
# Usage: Benchmarks/run-signout.sh
# Environment: SESSIONS (400) CLIENTS (5) SCRATCH_PATH (.build-release) LOG_DIR (/tmp/siwa-signout-bench-logs)
set -euo pipefail
cd "$(dirname "$0")/.."
SESSIONS="${SESSIONS:-400}"
CLIENTS="${CLIENTS:-5}"
scratch="${SCRATCH_PATH:-.build-release}"
source Benchmarks/lib.sh
build_release siwa
bin="$(swift build -c release --scratch-path "$scratch" --show-bin-path)"

work="$(mktemp -d /tmp/siwa-signout-bench.XXXXXX)"
logs="${LOG_DIR:-/tmp/siwa-signout-bench-logs}"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    mkdir -p "$logs" && cp "$work"/*.log "$logs"/ 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The clients' back-channel logout endpoint: 200 to every POST, counted.
rport="$(free_port)"
python3 - "$rport" "$work/received.log" > "$work/receiver.log" 2>&1 <<'PY' &
import http.server, sys
port, log = int(sys.argv[1]), sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keeps siwa's connections alive
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(log, "a") as f: f.write("1\n")
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 256   # the default backlog of 5 drops connections siwa opens at once (1 s SYN retries)
Server(("127.0.0.1", port), Handler).serve_forever()
PY
pids+=($!)

clients="$(python3 -c "
import json, sys
print(json.dumps([{'client_id': f'app{i}', 'client_secret': 'secret-of-app%d' % i, 'redirect_uris': ['https://app%d.example.com/cb' % i],
                   'backchannel_logout_uri': 'http://127.0.0.1:$rport/bc%d' % i} for i in range($CLIENTS)]))")"
port="$(free_port)"; emport="$(free_port)"; db="$work/siwa.sqlite"
start() {
    SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning SIWA_OIDC_CLIENTS="$clients" "$bin/siwa" serve --port "$port" --emulator-port "$emport" \
        --db "$db" >> "$work/siwa.log" 2>&1 &
    siwa_pid=$!; pids+=("$siwa_pid")
    until [ "$(status_of "http://127.0.0.1:$port/readyz")" = 200 ]; do
        kill -0 "$siwa_pid" 2>/dev/null || { cat "$work/siwa.log" >&2; exit 1; }
        sleep 0.02
    done
}
start

# Sessions as siwa stores them (the cookie's SHA-256), odd ones with an access token of each client issued in them
# (its sid: the session's public id, SessionRecord.publicID).
python3 - "$db" "$SESSIONS" "$CLIENTS" <<'PY'
import hashlib, sqlite3, sys, time
path, n, clients = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
now = time.time()
h = lambda s: hashlib.sha256(s.encode()).hexdigest()
c = sqlite3.connect(path, timeout=30)
with c:
    for i in range(n):
        sub = f"000777.signoutbench{i:020d}.0001"
        c.execute("INSERT INTO users (sub, email, is_private_email, created_at, last_sign_in_at) VALUES (?, ?, 0, ?, ?)", (sub, f"u{i}@example.com", now, now))
        id_hash = h(f"signoutsession{i:030d}")
        c.execute("INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)", (id_hash, sub, f"csrf{i}", now, now + 86400))
        if i % 2 == 1:
            sid = h("siwa-sid:" + id_hash)[:32]
            for k in range(clients):
                c.execute("INSERT INTO provider_tokens (token_hash, kind, client_id, sub, scope, auth_time, family_id, created_at, expires_at, sid) "
                          "VALUES (?, 'access', ?, ?, 'openid', ?, ?, ?, ?, ?)", (h(f"t{i}-{k}"), f"app{k}", sub, now, f"f{i}-{k}", now, now + 3600, sid))
PY

# The sign-outs, alternating, timed from the request's first byte to the answer's last (one kept-alive connection).
python3 - "$port" "$SESSIONS" > "$work/times.txt" <<'PY'
import http.client, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port)
for i in range(n):
    body = f"csrf_token=csrf{i}"
    started = time.perf_counter()
    conn.request("POST", "/auth/signout", body=body, headers={"Cookie": f"siwa_session=signoutsession{i:030d}", "Content-Type": "application/x-www-form-urlencoded"})
    answer = conn.getresponse(); answer.read()
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status != 303: sys.exit(f"sign-out {i} answered {answer.status}")
    print("with" if i % 2 else "without", f"{elapsed:.3f}")
PY

# Wait for the queue to drain (deliveries go out after the answers, from the queue), at most a minute; how long it
# took after the last sign-out is the delivery rate's measure.
drain_start="$(date +%s%N)"
for _ in $(seq 1 600); do
    [ "$(python3 -c "import sqlite3; print(sqlite3.connect('$db').execute('SELECT COUNT(*) FROM logout_deliveries').fetchone()[0])")" = 0 ] && break
    sleep 0.1
done
drained_ms=$(( ($(date +%s%N) - drain_start) / 1000000 ))
received="$(wc -l < "$work/received.log" 2>/dev/null || echo 0)"

stats() { awk -v line="$1" '$1 == line {print $2}' "$work/times.txt" | sort -n | awk '{a[NR]=$1} END {printf "%.2f ms | %.2f ms | %.2f ms", a[int(NR*0.5)], a[int(NR*0.9)], a[int(NR*0.99)]}'; }
median() { awk -v line="$1" '$1 == line {print $2}' "$work/times.txt" | sort -n | awk '{a[NR]=$1} END {print a[int(NR*0.5)]}'; }
added="$(awk -v a="$(median with)" -v b="$(median without)" 'BEGIN {printf "%.2f", a - b}')"
cat <<REPORT

## siwa sign-out benchmark

$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, measured: $measured. $SESSIONS sign-outs (POST /auth/signout), alternating
sessions with tokens of $CLIENTS OpenID clients (each with a backchannel_logout_uri) and sessions with none; SQLite.

| sessions | p50 | p90 | p99 |
|---|---:|---:|---:|
| with $CLIENTS clients to notify | $(stats with) |
| with none | $(stats without) |

Added by the clients (p50 with − p50 without): **$added ms** (target ≤ 5 ms). Logout Tokens received by the clients'
endpoint: $received of $(( SESSIONS / 2 * CLIENTS )) expected, the last $drained_ms ms after the last sign-out's answer (each
delivery signs an RS256 Logout Token, posts it and removes it from the queue; the endpoint is a Python server).
REPORT
