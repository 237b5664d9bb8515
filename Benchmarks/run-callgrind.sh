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
# The upstream is an nginx outside callgrind. A report, not a test: exits 0 whatever the figures. For where the
# instructions go, CALLGRIND_KEEP=1 keeps each dump in LOG_DIR for `callgrind_annotate`.
#
# Usage: Benchmarks/run-callgrind.sh
# Environment: REQUESTS (5000) WARMUP (1000) CLIENTS (16) SCRATCH_PATH (.build-release)
#              LOG_DIR (/tmp/siwa-callgrind-logs) CALLGRIND_KEEP (0) LINES (abcdef: the lines to count, by letter)
#              RULES (0) RULE_GROUPS (20) MEMBERS (1000): siwa with run-front.sh's access configuration (50 there)
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS="${REQUESTS:-5000}"
WARMUP="${WARMUP:-1000}"
CLIENTS="${CLIENTS:-16}"
scratch="${SCRATCH_PATH:-.build-release}"
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

# count NAME PID URL [h2load args...]: instructions per request of PID for REQUESTS requests to URL, in NAME.ir
# (nothing when LINES leaves NAME out).
count() {
    local name="$1" pid="$2" url="$3"; shift 3
    [[ "${LINES:-abcdef}" == *"$name"* ]] || return 0
    h2load -n "$WARMUP" -c "$CLIENTS" "$@" "$url" > "$work/$name-warmup.txt" 2>&1
    callgrind_control -z "$pid" > /dev/null
    h2load -n "$REQUESTS" -c "$CLIENTS" "$@" "$url" > "$work/$name.txt" 2>&1
    callgrind_control --dump="$name" "$pid" > /dev/null
    local dump ok
    dump="$(ls -t "$work"/callgrind.out.* | head -1)"
    ok="$(awk '/^status codes:/ {print $3}' "$work/$name.txt")"
    awk -v n="$REQUESTS" -v ok="$ok" '/^(summary|totals):/ {printf "%.0f %s\n", $2 / n, ok; exit}' "$dump" > "$work/$name.ir"
    mv "$dump" "$work/callgrind.$name"
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
    [[ "${LINES:-abcdef}" == *"$1"* ]] || return 0
    local before; before="$(fast_total)"
    count "$@"
    echo "$(( $(fast_total) - before ))" > "$work/$1.fast"
}
siwa_count b "$siwa_cg" "http://127.0.0.1:$port/auth/check" --h1 "${forwarded[@]}"
siwa_count d "$siwa_cg" "http://127.0.0.1:$port/page" --h1 -H "Cookie: $cookie"
siwa_count e "$siwa_cg" "http://127.0.0.1:$port/envoy.service.auth.v3.Authorization/Check" -m 8 -d "$work/check.bin" \
    -H "content-type: application/grpc" -H "te: trailers"
siwa_count f "$siwa_cg" "http://127.0.0.1:$port/auth/ext-authz/page" --h1 -H "Cookie: $cookie" -H "X-Forwarded-Proto: https" -H ":authority: app.example" -H "Content-Length: 0"

ir() { cut -d' ' -f1 "$work/$1.ir" 2>/dev/null || echo "–"; }
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
echo
echo "(b) / (a): $(ratio "$(ir b)" "$(ir a)")   (d) / (c): $(ratio "$(ir d)" "$(ir c)")"
