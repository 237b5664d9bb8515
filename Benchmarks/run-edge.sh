#!/usr/bin/env bash
# Edge benchmark (issue 36): siwa terminating TLS itself, beside nginx terminating TLS with the same certificate and
# proxying the same upstream, in one run. h2load (Debian's nghttp2-client) is the load for every line.
#   (1) a protected page through `siwa serve --upstream` over HTTPS with HTTP/1.1 vs nginx (`listen … ssl`);
#   (2) the same over HTTP/2 (nginx `listen … ssl http2`), MAX_STREAMS streams per connection;
#   (3) new TLS connections per second: `openssl s_time -new` (a full handshake each) against each;
#   (4) siwa's sign-in page over HTTPS vs the same page of a siwa on plain HTTP (HTTP/1.1 kept alive, both), on the
#       shared cores, then again with both siwas on core 0 and h2load on core 1 (taskset), so that h2load's own TLS
#       is not taken from the HTTPS side; and, for reference, nginx serving the page's bytes from a file both ways;
#   and what TLS costs per request: siwa's CPU time per request in (4), over HTTPS less over plain HTTP.
# The certificate is ECDSA P-256 (what siwa obtains by ACME), made by openssl; the upstream is an nginx answering a
# small page from memory (Benchmarks/lib.sh's start_upstream). nginx runs NGINX_WORKERS workers (auto: one per core).
# Release builds under .build-release; everything on loopback, h2load included. A report, not a test: exits 0.
#
# Usage: Benchmarks/run-edge.sh
# Environment: CONNECTIONS (64) MAX_STREAMS (10) ROUNDS (5) ROUND_SECONDS (5) HANDSHAKE_SECONDS (5)
#              NGINX_WORKERS (auto) SCRATCH_PATH (.build-release) LOG_DIR (/tmp/siwa-edge-bench-logs)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS="${CONNECTIONS:-64}"
STREAMS="${MAX_STREAMS:-10}"
ROUNDS="${ROUNDS:-5}"
SECS="${ROUND_SECONDS:-5}"
HANDSHAKE_SECS="${HANDSHAKE_SECONDS:-5}"
NGINX_WORKERS="${NGINX_WORKERS:-auto}"
scratch="${SCRATCH_PATH:-.build-release}"
NGINX=/usr/sbin/nginx
export SESSIONS=1000

. Benchmarks/lib.sh
bench_need_wrk_nginx
command -v h2load >/dev/null || bench_install nghttp2-client
command -v openssl >/dev/null || bench_install openssl

build_release siwa

work="$(mktemp -d /tmp/siwa-edge-bench.XXXXXX)"
chmod 755 "$work"
logs="${LOG_DIR:-/tmp/siwa-edge-bench-logs}"
pids=()
trap bench_cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" -days 2 \
    -subj "/CN=auth.localhost" -addext "subjectAltName=DNS:auth.localhost" 2>/dev/null

start_upstream

# siwa with its own TLS in front of the upstream; its plain port only redirects.
port="$(free_port)"; emport="$(free_port)"; sport="$(free_port)"
db="$work/siwa.sqlite"
start_siwa_tls() {
    SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning "$bin/siwa" serve --port "$port" --emulator-port "$emport" --db "$1" \
        --tls-cert-file "$work/cert.pem" --tls-key-file "$work/key.pem" --tls-domains auth.localhost --https-port "$sport" "${@:2}" >> "$work/siwa.log" 2>&1 &
    siwa_pid=$!; pids+=("$siwa_pid")
    wait_ready "$siwa_pid" "$work/siwa.log" "https://127.0.0.1:$sport/readyz" -k
}
start_siwa_tls "$db" --upstream "http://127.0.0.1:$uport"
seed_sqlite "$db" "$SESSIONS"
# Over siwa's own HTTPS the session cookie has the __Host- prefix.
cookie="__Host-siwa_session=benchsession$(printf '%031d' 1)"

# nginx terminating TLS with the same certificate, proxying the same upstream (kept-alive connections to it), HTTP/2
# on, sessions cached as a tuned nginx does.
nport="$(free_port)"
start_nginx front "$NGINX_WORKERS" "
    upstream app { server 127.0.0.1:$uport; keepalive 64; }
    ssl_session_cache shared:SSL:10m;
    server {
        listen 127.0.0.1:$nport ssl http2;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        keepalive_requests 100000;
        location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
    }"
front_pid="$nginx_pid"

siwa_url="https://127.0.0.1:$sport/"
nginx_url="https://127.0.0.1:$nport/"
[ "$(status_of -k -H "Cookie: $cookie" "$siwa_url")" = 200 ] || { echo "siwa does not pass the session to the upstream" >&2; tail -20 "$work/siwa.log" >&2; exit 1; }
[ "$(status_of -k "$nginx_url")" = 200 ] || { echo "nginx does not answer" >&2; exit 1; }

# h2load_run NAME PIDS URL [h2load args]: one round; the rate and the CPU time per request of PIDS.
h2load_run() {
    local name="$1" watched="$2" url="$3"; shift 3
    local before after
    local load=(h2load)
    case "$name" in pinned-*) load=(taskset -c 1 h2load) ;; esac
    # The CPU time is read after h2load's warm-up second, which its request count leaves out too.
    "${load[@]}" -c "$CONNS" -D "$SECS" --warm-up-time=1 "$@" "$url" > "$work/$name.txt" 2>&1 &
    local load_pid=$!
    sleep 1
    before="$(cpu_ticks $watched)"
    wait "$load_pid" || true
    after="$(cpu_ticks $watched)"
    local done_requests
    done_requests="$(awk '/^requests:/ {print $8; exit}' "$work/$name.txt")"
    awk -v t=$((after - before)) -v n="${done_requests:-0}" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n > 0) printf "%.1f", t / hz / n * 1e6; else print "-" }' > "$work/$name.cpu"
}
rate() { awk '/^finished in/ {gsub(",", "", $4); printf "%.0f", $4; exit}' "$work/$1.txt"; }
failed() { awk '/^requests:/ {print $10; exit}' "$work/$1.txt"; }

# Best of ROUNDS alternating rounds per line.
best() {
    local name="$1" best_rate=0 r
    for r in $(seq 1 "$ROUNDS"); do
        [ -f "$work/$name-$r.txt" ] || continue
        local value; value="$(rate "$name-$r")"
        if [ "${value:-0}" -gt "$best_rate" ]; then best_rate="$value"; cp "$work/$name-$r.txt" "$work/$name.txt"; cp "$work/$name-$r.cpu" "$work/$name.cpu"; fi
    done
    echo "$best_rate"
}

echo "measuring (h2load, $CONNS connections, $ROUNDS rounds of $SECS s) ..." >&2
for r in $(seq 1 "$ROUNDS"); do
    h2load_run "siwa-h1-$r" "$siwa_pid" "$siwa_url" --h1 -H "Cookie: $cookie"
    h2load_run "nginx-h1-$r" "$front_pid" "$nginx_url" --h1
    h2load_run "siwa-h2-$r" "$siwa_pid" "$siwa_url" -m "$STREAMS" -H "Cookie: $cookie"
    h2load_run "nginx-h2-$r" "$front_pid" "$nginx_url" -m "$STREAMS"
done
siwa_h1="$(best siwa-h1)"; nginx_h1="$(best nginx-h1)"; siwa_h2="$(best siwa-h2)"; nginx_h2="$(best nginx-h2)"

# New TLS connections: a full handshake each (s_time -new), TLS 1.3, the same client for both.
handshakes() { openssl s_time -connect "127.0.0.1:$1" -new -time "$HANDSHAKE_SECS" 2>/dev/null | awk '/connections in/ && /real/ {print $1; exit}'; }
siwa_new="$(handshakes "$sport")"; nginx_new="$(handshakes "$nport")"

# The sign-in page: a siwa without an upstream (its / is the sign-in page) over HTTPS, and one on plain HTTP.
stop_siwa
start_siwa_tls "$work/page-tls.sqlite"
plain_port="$(free_port)"; plain_emport="$(free_port)"
SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning "$bin/siwa" serve --port "$plain_port" --emulator-port "$plain_emport" --db "$work/page-plain.sqlite" >> "$work/siwa-plain.log" 2>&1 &
plain_pid=$!; pids+=("$plain_pid")
wait_ready "$plain_pid" "$work/siwa-plain.log" "http://127.0.0.1:$plain_port/readyz"
for r in $(seq 1 "$ROUNDS"); do
    h2load_run "page-tls-$r" "$siwa_pid" "https://127.0.0.1:$sport/" --h1
    h2load_run "page-plain-$r" "$plain_pid" "http://127.0.0.1:$plain_port/" --h1
done
page_tls="$(best page-tls)"; page_plain="$(best page-plain)"
# The same, with the load off siwa's core: both siwas on core 0, h2load on core 1. On two shared cores h2load's own
# TLS (about as much CPU per request as siwa's) comes out of the HTTPS side's budget; pinned, each line measures one
# siwa on one core, so the ratio is siwa's own cost of TLS.
pinned=""
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    pinned=1
    taskset -a -p -c 0 "$siwa_pid" >/dev/null; taskset -a -p -c 0 "$plain_pid" >/dev/null
    for r in $(seq 1 "$ROUNDS"); do
        h2load_run "pinned-tls-$r" "$siwa_pid" "https://127.0.0.1:$sport/" --h1
        h2load_run "pinned-plain-$r" "$plain_pid" "http://127.0.0.1:$plain_port/" --h1
    done
    pinned_tls="$(best pinned-tls)"; pinned_plain="$(best pinned-plain)"
fi

# For reference, what TLS costs the peer on the same page: nginx serving the sign-in page's bytes (as siwa rendered
# them) from a file, over HTTPS and over plain HTTP, with the same certificate, on the shared cores.
mkdir -p "$work/page"
curl -s -o "$work/page/index.html" "http://127.0.0.1:$plain_port/"
nginx_plain_port="$(free_port)"; nginx_tls_port="$(free_port)"
start_nginx pages "$NGINX_WORKERS" "
    ssl_session_cache shared:SSL:10m;
    server {
        listen 127.0.0.1:$nginx_plain_port;
        listen 127.0.0.1:$nginx_tls_port ssl;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        keepalive_requests 100000;
        root $work/page;
        location = / { try_files /index.html =404; }
    }"
pages_pid="$nginx_pid"
for r in $(seq 1 "$ROUNDS"); do
    h2load_run "nginx-page-tls-$r" "$pages_pid" "https://127.0.0.1:$nginx_tls_port/" --h1
    h2load_run "nginx-page-plain-$r" "$pages_pid" "http://127.0.0.1:$nginx_plain_port/" --h1
done
nginx_page_tls="$(best nginx-page-tls)"; nginx_page_plain="$(best nginx-page-plain)"

pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", 100 * a / b; else print "-" }'; }
echo
echo "Edge benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg), commit $measured"
echo
echo "| line | siwa | peer | siwa / peer | target |"
echo "|---|---|---|---|---|"
echo "| (1) \`--upstream\` GET over HTTPS, HTTP/1.1 (req/s; peer: nginx TLS proxy) | $siwa_h1 | $nginx_h1 | $(pct "$siwa_h1" "$nginx_h1") % | ≥ 60 % |"
echo "| (2) the same over HTTP/2, $STREAMS streams per connection | $siwa_h2 | $nginx_h2 | $(pct "$siwa_h2" "$nginx_h2") % | ≥ 60 % |"
echo "| (3) new TLS connections in ${HANDSHAKE_SECS} s (\`openssl s_time -new\`) | ${siwa_new:-?} | ${nginx_new:-?} | $(pct "${siwa_new:-0}" "${nginx_new:-0}") % | ≥ 60 % |"
echo "| (4) sign-in page over HTTPS (peer: the same page on plain HTTP) | $page_tls | $page_plain | $(pct "$page_tls" "$page_plain") % | ≥ 80 % |"
[ -n "$pinned" ] && echo "| (4) the same, siwa on core 0 and h2load on core 1 | $pinned_tls | $pinned_plain | $(pct "$pinned_tls" "$pinned_plain") % | ≥ 80 % |"
echo "| (4), for reference: nginx serving the same page's bytes from a file, over HTTPS vs plain HTTP | $nginx_page_tls | $nginx_page_plain | $(pct "$nginx_page_tls" "$nginx_page_plain") % | (none) |"
echo
echo "CPU time per request (siwa, µs): --upstream HTTPS/1.1 $(cat "$work/siwa-h1.cpu"), HTTP/2 $(cat "$work/siwa-h2.cpu"); sign-in page HTTPS $(cat "$work/page-tls.cpu"), plain $(cat "$work/page-plain.cpu"): TLS costs $(awk -v a="$(cat "$work/page-tls.cpu")" -v b="$(cat "$work/page-plain.cpu")" 'BEGIN { printf "%.1f", a - b }') µs per kept-alive request"
[ -n "$pinned" ] && echo "Pinned (siwa alone on core 0), CPU time per request (µs): sign-in page HTTPS $(cat "$work/pinned-tls.cpu"), plain $(cat "$work/pinned-plain.cpu")"
echo "nginx CPU time per request (µs): HTTPS/1.1 $(cat "$work/nginx-h1.cpu"), HTTP/2 $(cat "$work/nginx-h2.cpu"); the page's bytes over HTTPS $(cat "$work/nginx-page-tls.cpu"), plain $(cat "$work/nginx-page-plain.cpu")"
echo "failed requests: siwa h1 $(failed siwa-h1), h2 $(failed siwa-h2); nginx h1 $(failed nginx-h1), h2 $(failed nginx-h2); pages $(failed page-tls)/$(failed page-plain)${pinned:+, pinned pages $(failed pinned-tls)/$(failed pinned-plain)}"
