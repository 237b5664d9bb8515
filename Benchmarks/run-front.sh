#!/usr/bin/env bash
# Front benchmark (issue 17): siwa in front of a site, next to what it is measured against, in one run.
#   (1) GET /auth/check with a valid session vs the Hummingbird hello-world (the HTTP ceiling);
#   (2) a protected page through `siwa serve --upstream` vs nginx proxying the same upstream with no auth;
#   (3) nginx + auth_request to siwa's /auth/check + the same upstream vs the same nginx direct;
#   (4) resident memory of `siwa serve` with SESSIONS stored sessions, idle and after /auth/check across them
#       (SQLite, and PostgreSQL: a throwaway server when initdb is installed, else SIWA_TEST_POSTGRES_URL).
# The upstream is a separate nginx answering a small page from memory, the same for (2) and (3). The front
# nginx keeps connections to the upstream and to siwa alive (`keepalive`), as a tuned nginx does.
# Release builds under .build-release (the debug .build is left alone); everything on loopback, wrk included,
# so the load generator and the servers share the cores. A report, not a test: exits 0 whatever the figures.
#
# Usage: Benchmarks/run-front.sh
# Environment: WRK_CONNECTIONS (64) WRK_THREADS (2) ROUNDS (3) ROUND_SECONDS (5): the five lines alternate in
#              ROUNDS rounds and each keeps its best round; SESSIONS (100000) MEMORY_SECONDS (20)
#              POSTGRES (1; 0 skips the PostgreSQL memory line) NGINX_WORKERS (auto)
#              SCRATCH_PATH (.build-release) LOG_DIR (/tmp/siwa-front-bench-logs)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS="${WRK_CONNECTIONS:-64}"
export WRK_THREADS="${WRK_THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
SECS="${ROUND_SECONDS:-5}"
export SESSIONS="${SESSIONS:-100000}"
MEMORY_SECS="${MEMORY_SECONDS:-20}"
NGINX_WORKERS="${NGINX_WORKERS:-auto}"
scratch="${SCRATCH_PATH:-.build-release}"
NGINX=/usr/sbin/nginx

command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }; }
[ -x "$NGINX" ] || { apt-get install -y nginx >/dev/null || { apt-get update >/dev/null && apt-get install -y nginx >/dev/null; }; }
command -v curl >/dev/null || apt-get install -y curl >/dev/null

echo "building release binaries (siwa, HelloWorld) under $scratch ..." >&2
swift build -c release --product siwa --scratch-path "$scratch" >&2
swift build -c release --product HelloWorld --scratch-path "$scratch" >&2
bin="$(swift build -c release --scratch-path "$scratch" --show-bin-path)"

work="$(mktemp -d /tmp/siwa-front-bench.XXXXXX)"
chmod 755 "$work"   # PostgreSQL runs as another user when this runs as root and must reach its directory
logs="${LOG_DIR:-/tmp/siwa-front-bench-logs}"   # server logs, nginx configurations and wrk outputs end up here
pids=()
PGBIN=""; PGDATA="$work/pg"; PGRUN=()
pg_ctl() { "${PGRUN[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" "$@"; }
pg_url=""; pg_shared=0
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    [ "$pg_shared" = 1 ] && psql_q "DELETE FROM users WHERE sub LIKE '000999.frontbench%'" >/dev/null 2>&1 || true
    [ -n "$PGBIN" ] && [ -d "$PGDATA/base" ] && { pg_ctl -m immediate stop >/dev/null 2>&1 || true; }
    mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$logs"/ 2>/dev/null || true
    for conf in "$work"/*/nginx.conf; do [ -f "$conf" ] && cp "$conf" "$logs/nginx-$(basename "$(dirname "$conf")").conf"; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
status_of() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true; }
kb() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$2/status"; }   # kb VmRSS PID
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
# CPU time (utime + stime, clock ticks) of the given pids and their children (nginx's workers).
cpu_ticks() {
    local p
    for p in "$@"; do echo "$p"; pgrep -P "$p" || true; done | sort -u |
        while read -r p; do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || true; done | awk '{s += $1} END {print s + 0}'
}

# ---------------------------------------------------------------------------------------------------------
# nginx, one instance per directory: start_nginx NAME WORKERS HTTP-BLOCK; sets nginx_pid.
start_nginx() {
    local name="$1" workers="$2" http="$3" dir="$work/$1" user=""
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && user="user root;"   # as in Tests/TestSupport/Nginx.swift: nobody may not enter $dir
    cat > "$dir/nginx.conf" <<CONF
# Written by Benchmarks/run-front.sh for one run ($name); deleted with its directory.
daemon off;
worker_processes $workers;
$user
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/client_body_temp;
    proxy_temp_path $dir/proxy_temp;
    fastcgi_temp_path $dir/fastcgi_temp;
    uwsgi_temp_path $dir/uwsgi_temp;
    scgi_temp_path $dir/scgi_temp;
$http
}
CONF
    "$NGINX" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" > "$work/nginx-$name.log" 2>&1 &
    nginx_pid=$!; pids+=("$nginx_pid")
    until [ -s "$dir/nginx.pid" ]; do
        kill -0 "$nginx_pid" 2>/dev/null || { cat "$work/nginx-$name.log" "$dir/error.log" >&2; echo "nginx $name exited" >&2; exit 1; }
        sleep 0.02
    done
}

# The upstream: a small page answered from memory, so that what is measured is the front, not the site.
uport="$(free_port)"
start_nginx upstream "$NGINX_WORKERS" "
    server {
        listen 127.0.0.1:$uport;
        keepalive_requests 100000;
        location / {
            default_type text/html;
            return 200 '<!doctype html><html><head><title>App</title></head><body><h1>The protected app</h1><p>A small page, the same for every front.</p></body></html>\n';
        }
    }"
upstream_pid="$nginx_pid"

# siwa serve, local mode (emulator in process), SQLite, no rate limit, warnings only, with the upstream.
port="$(free_port)"; emport="$(free_port)"
db="$work/siwa.sqlite"
# start_siwa DB: sets siwa_pid once /readyz answers 200.
start_siwa() {
    SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning "$bin/siwa" serve --port "$port" --emulator-port "$emport" \
        --db "$1" --upstream "http://127.0.0.1:$uport" >> "$work/siwa.log" 2>&1 &
    siwa_pid=$!; pids+=("$siwa_pid")
    until [ "$(status_of "http://127.0.0.1:$port/readyz")" = 200 ]; do
        kill -0 "$siwa_pid" 2>/dev/null || { cat "$work/siwa.log" >&2; echo "siwa serve exited" >&2; exit 1; }
        sleep 0.01
    done
}
stop_siwa() { kill "$siwa_pid"; wait "$siwa_pid" 2>/dev/null || true; }
start_siwa "$db"

# Sessions: SESSIONS users with one session each, inserted as siwa would store them: the cookie value is
# "benchsession" + 31 digits and the store keeps its SHA-256 in hex (SignInFlow.hash).
echo "seeding $SESSIONS users and sessions into SQLite ..." >&2
python3 - "$db" "$SESSIONS" <<'PY'
import hashlib, os, sqlite3, sys, time
path, n = sys.argv[1], int(sys.argv[2])
now = time.time()
sub = lambda i: f"000999.frontbench{i:027d}.{i % 10000:04d}"
c = sqlite3.connect(path, timeout=30)
with c:
    c.executemany("INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at) "
                  "VALUES (?, ?, 0, 'Bench', ?, ?, ?)",
                  ((sub(i), f"user{i}@example.com", f"User {i}", now, now) for i in range(1, n + 1)))
    c.executemany("INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                  ((hashlib.sha256(f"benchsession{i:031d}".encode()).hexdigest(), sub(i), os.urandom(16).hex(), now, now + 7 * 86400)
                   for i in range(1, n + 1)))
PY
export SESSION_COOKIE="siwa_session=benchsession$(printf '%031d' 1)"

# The HTTP ceiling.
hport="$(free_port)"
"$bin/HelloWorld" "$hport" > "$work/hello.log" 2>&1 &
hello_pid=$!; pids+=("$hello_pid")
until [ "$(status_of "http://127.0.0.1:$hport/")" = 200 ]; do sleep 0.01; done

# The front nginx: one server proxying straight to the upstream, one asking siwa first (the README's
# configuration, with keepalive to both).
nport="$(free_port)"; aport="$(free_port)"
keep='proxy_http_version 1.1; proxy_set_header Connection "";'
start_nginx front "$NGINX_WORKERS" "
    upstream app { server 127.0.0.1:$uport; keepalive 64; }
    upstream siwa { server 127.0.0.1:$port; keepalive 64; }
    server {
        listen 127.0.0.1:$nport;
        keepalive_requests 100000;
        location / { proxy_pass http://app; $keep }
    }
    server {
        listen 127.0.0.1:$aport;
        keepalive_requests 100000;
        location = /_siwa_check {
            internal;
            proxy_pass http://siwa/auth/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length \"\";
            $keep
        }
        location / {
            auth_request /_siwa_check;
            auth_request_set \$siwa_user \$upstream_http_x_auth_request_user;
            auth_request_set \$siwa_email \$upstream_http_x_auth_request_email;
            auth_request_set \$siwa_private \$upstream_http_x_siwa_private_email;
            proxy_set_header X-Auth-Request-User \$siwa_user;
            proxy_set_header X-Auth-Request-Email \$siwa_email;
            proxy_set_header X-Siwa-Private-Email \$siwa_private;
            proxy_pass http://app;
            $keep
        }
    }"
front_pid="$nginx_pid"
until [ "$(status_of "http://127.0.0.1:$nport/app/page")" = 200 ]; do sleep 0.02; done

# Each line answers what it should before anything is timed.
hello_url="http://127.0.0.1:$hport/"
check_url="http://127.0.0.1:$port/auth/check"
proxy_url="http://127.0.0.1:$port/app/page"
direct_url="http://127.0.0.1:$nport/app/page"
authreq_url="http://127.0.0.1:$aport/app/page"
expect() {
    local got
    got="$(status_of "${@:3}" "$2")"
    [ "$got" = "$1" ] || { echo "$2 answered $got, expected $1" >&2; cat "$work/siwa.log" >&2; exit 1; }
}
expect 202 "$check_url" -H "Cookie: $SESSION_COOKIE"
expect 401 "$check_url"
expect 200 "$proxy_url" -H "Cookie: $SESSION_COOKIE"
expect 401 "$proxy_url"
expect 200 "$direct_url"
expect 200 "$authreq_url" -H "Cookie: $SESSION_COOKIE"
expect 401 "$authreq_url"
expect 202 "$check_url" -H "Cookie: siwa_session=benchsession$(printf '%031d' "$SESSIONS")"
page_bytes="$(curl -s "$direct_url" | wc -c)"

# wrk_run NAME URL PIDS [wrk args...]: wrk's output in $work/NAME.txt, the PIDS' CPU per request in NAME.cpu.
wrk_run() {
    local name="$1" url="$2" who="$3" c0 c1; shift 3
    c0="$(cpu_ticks $who)"
    wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECS}s" --latency "$@" "$url" > "$work/$name.txt" 2>&1 || true
    c1="$(cpu_ticks $who)"
    awk -v t="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v n="$(wrk_requests "$name")" \
        'BEGIN { if (n > 0) printf "%.0f", 1e6 * t / hz / n; else print "n/a" }' > "$work/$name.cpu"
}
wrk_rate() { awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$work/$1.txt"; }
wrk_pct() { awk -v p="$2%" '$1 == p {print $2; exit}' "$work/$1.txt"; }
wrk_requests() { awk '/requests in/ {print $1; exit}' "$work/$1.txt"; }
wrk_errors() {
    local bad sock
    bad="$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$work/$1.txt")"
    sock="$(awk '/Socket errors:/ {print}' "$work/$1.txt")"
    echo "${bad:-0}${sock:+ ($sock)}"
}
# wrk's latency ("850.00us", "3.21ms", "1.05s") in milliseconds.
in_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.2f", n }'; }
best_round() {
    local name="$1" best="" best_rate=0 f r
    for f in "$work/$name".r*.txt; do
        r="$(awk '/^Requests\/sec:/ {print $2}' "$f")"
        if awk -v a="${r:-0}" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then best="$f"; best_rate="$r"; fi
    done
    cp "$best" "$work/$name.txt"; cp "${best%.txt}.cpu" "$work/$name.cpu"
}

echo "warm-up ..." >&2
for url in "$hello_url" "$direct_url" "$check_url" "$proxy_url" "$authreq_url"; do
    wrk -t"$WRK_THREADS" -c"$CONNS" -d2s -s Benchmarks/lua/session.lua "$url" > /dev/null 2>&1 || true
done

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round of $ROUNDS: hello-world, /auth/check, nginx direct, siwa --upstream, nginx + auth_request" >&2
    wrk_run "hello.r$round" "$hello_url" "$hello_pid" -s Benchmarks/lua/session.lua
    wrk_run "check.r$round" "$check_url" "$siwa_pid" -s Benchmarks/lua/session.lua
    wrk_run "direct.r$round" "$direct_url" "$front_pid" -s Benchmarks/lua/session.lua
    wrk_run "proxy.r$round" "$proxy_url" "$siwa_pid" -s Benchmarks/lua/session.lua
    wrk_run "authreq.r$round" "$authreq_url" "$front_pid $siwa_pid" -s Benchmarks/lua/session.lua
done
for name in hello check direct proxy authreq; do best_round "$name"; done
kill "$hello_pid" 2>/dev/null || true
stop_siwa

# ---------------------------------------------------------------------------------------------------------
# (4) Memory: siwa restarted on a store holding SESSIONS sessions; RSS idle, then after MEMORY_SECONDS of
# /auth/check, each request with the cookie of a random one of them (so most miss any cache).
mem_rows=()
memory_run() {
    local label="$1" dbarg="$2" idle name="mem-$3" sessions_stored="$4"
    start_siwa "$dbarg"
    expect 202 "$check_url" -H "Cookie: $SESSION_COOKIE"
    sleep 2
    idle="$(kb VmRSS "$siwa_pid")"
    echo "(4) $label: /auth/check across $SESSIONS sessions for $MEMORY_SECS s" >&2
    SECS_SAVED="$SECS"; SECS="$MEMORY_SECS"
    wrk_run "$name" "$check_url" "$siwa_pid" -s Benchmarks/lua/check_many.lua
    SECS="$SECS_SAVED"
    mem_rows+=("| $label | $sessions_stored | $(mb "$idle") MB | $(mb "$(kb VmRSS "$siwa_pid")") MB | $(mb "$(kb VmHWM "$siwa_pid")") MB | $(wrk_rate "$name") | $(wrk_pct "$name" 99) | $(cat "$work/$name.cpu") µs | $(wrk_errors "$name") |")
    stop_siwa
}
memory_run SQLite "$db" sqlite "$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM sessions").fetchone()[0])' "$db")"

psql_q() { "${PSQL[@]}" -X -q -At -c "$1"; }
if [ "${POSTGRES:-1}" = 1 ]; then
    if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        PGBIN="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
        mkdir -p "$PGDATA"
        if [ "$(id -u)" -eq 0 ]; then   # initdb refuses root: run the server as postgres (as run-soak.sh does)
            id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
            chown postgres "$PGDATA"; PGRUN=(runuser -u postgres --)
        fi
        pgport="$(free_port)"
        "${PGRUN[@]}" "$PGBIN/initdb" -D "$PGDATA" -U siwa --auth=trust >/dev/null
        pg_ctl -o "-h 127.0.0.1 -p $pgport -k $PGDATA" -l "$PGDATA/server.log" -w start >/dev/null
        "${PGRUN[@]}" "$PGBIN/createdb" -h 127.0.0.1 -p "$pgport" -U siwa siwa_front
        pg_url="postgres://siwa@127.0.0.1:$pgport/siwa_front"
        PSQL=("$PGBIN/psql" -h 127.0.0.1 -p "$pgport" -U siwa -d siwa_front)
        pg_label="PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') (throwaway, loopback)"
    elif [ -n "${SIWA_TEST_POSTGRES_URL:-}" ] && command -v psql >/dev/null; then
        pg_url="$SIWA_TEST_POSTGRES_URL"; pg_shared=1   # its bench rows are deleted at exit
        PSQL=(psql "$pg_url")
        pg_label="PostgreSQL (SIWA_TEST_POSTGRES_URL)"
    fi
fi
if [ -n "$pg_url" ]; then
    start_siwa "$pg_url"; stop_siwa   # creates the schema
    echo "seeding $SESSIONS users and sessions into PostgreSQL ..." >&2
    psql_q "
        INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at)
        SELECT '000999.frontbench' || lpad(i::text, 27, '0') || '.' || lpad((i % 10000)::text, 4, '0'), 'user' || i || '@example.com',
               false, 'Bench', 'User ' || i, extract(epoch FROM now()), extract(epoch FROM now())
        FROM generate_series(1, $SESSIONS) i;
        INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at)
        SELECT encode(sha256(convert_to('benchsession' || lpad(i::text, 31, '0'), 'UTF8')), 'hex'),
               '000999.frontbench' || lpad(i::text, 27, '0') || '.' || lpad((i % 10000)::text, 4, '0'),
               md5(random()::text), extract(epoch FROM now()), extract(epoch FROM now()) + 7 * 86400
        FROM generate_series(1, $SESSIONS) i;" >/dev/null
    psql_q "VACUUM ANALYZE users" >/dev/null; psql_q "VACUUM ANALYZE sessions" >/dev/null
    memory_run "$pg_label" "$pg_url" pg "$(psql_q "SELECT count(*) FROM sessions")"
fi

# ---------------------------------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f %%", 100 * a / b; else print "n/a" }'; }
verdict() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { if (b > 0 && 100 * a / b >= t) print "met"; else print "**not met**" }'; }
p99_check="$(in_ms "$(wrk_pct check 99)")"
row() { echo "| $1 | $(wrk_rate "$2") | $(wrk_pct "$2" 50) | $(wrk_pct "$2" 99) | $(cat "$work/$2.cpu") µs | $(wrk_requests "$2") | $(wrk_errors "$2") |"; }

cat <<OUT

## siwa front benchmark

$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(uname -m)), load average at the start of the rounds $load_start,
$(swift --version 2>/dev/null | head -1), nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'), wrk ${WRK_THREADS} threads,
${CONNS} connections, --latency, best of ${ROUNDS} alternating rounds of ${SECS} s; everything on loopback, so wrk,
the fronts and the upstream share the cores. siwa: \`siwa serve --upstream\` local mode, SQLite with ${SESSIONS}
sessions stored, SIWA_RATE_LIMIT_PER_MINUTE=0, SIWA_LOG_LEVEL=warning; every line sends the same valid session
cookie (the lines without siwa pass it on as it is).
nginx: worker_processes ${NGINX_WORKERS}, access log off, keepalive to the upstream and to siwa. Upstream: a
second nginx answering a page of ${page_bytes} bytes from memory (\`return 200\`).

| line | requests/s | p50 | p99 | CPU per request (front) | requests | non-2xx/3xx |
|---|---:|---:|---:|---:|---:|---|
$(row "(1) Hummingbird hello-world \`GET /\` (HTTP ceiling)" hello)
$(row "(1) \`GET /auth/check\`, valid session (202)" check)
$(row "(2)(3) nginx → upstream, no auth" direct)
$(row "(2) \`siwa serve --upstream\` → upstream, valid session" proxy)
$(row "(3) nginx + \`auth_request\` → siwa \`/auth/check\`, then → upstream" authreq)

"CPU per request (front)": user + system time of the process answering wrk (siwa; nginx's master and workers;
both for (3)) over the round, divided by its requests; the upstream's and wrk's own time are not in it.

| target | measured | |
|---|---:|---|
| (1) \`/auth/check\` ≥ 80 % of hello-world | $(ratio "$(wrk_rate check)" "$(wrk_rate hello)") | $(verdict "$(wrk_rate check)" "$(wrk_rate hello)" 80) |
| (1) \`/auth/check\` p99 ≤ 5 ms at ${CONNS} connections | ${p99_check} ms | $(awk -v p="$p99_check" 'BEGIN { print (p <= 5 ? "met" : "**not met**") }') |
| (2) \`siwa --upstream\` ≥ 60 % of nginx direct | $(ratio "$(wrk_rate proxy)" "$(wrk_rate direct)") | $(verdict "$(wrk_rate proxy)" "$(wrk_rate direct)" 60) |
| (3) nginx + \`auth_request\` + siwa ≥ 50 % of nginx direct | $(ratio "$(wrk_rate authreq)" "$(wrk_rate direct)") | $(verdict "$(wrk_rate authreq)" "$(wrk_rate direct)" 50) |

(4) Resident memory of \`siwa serve --upstream\` (restarted on the store), idle 2 s after start, then after
${MEMORY_SECS} s of \`GET /auth/check\` at ${CONNS} connections, each request with the cookie of a random one of the
stored sessions:

| store | sessions stored | VmRSS idle | VmRSS after the load | VmHWM (peak) | /auth/check requests/s | p99 | CPU per request | non-2xx/3xx |
|---|---:|---:|---:|---:|---:|---:|---:|---|
$(printf '%s\n' "${mem_rows[@]}")
OUT
