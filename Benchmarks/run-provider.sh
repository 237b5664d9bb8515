#!/usr/bin/env bash
# Provider benchmark (issue 18): siwa as an OpenID Provider, next to what it is measured against, in one run.
#   (1) POST /oauth2/token, each request a real code exchange (a code inserted into the store beforehand, used
#       once; Basic client authentication; an RS256 id_token, an access and a refresh token stored), the same for
#       a client whose id_tokens are ES256 (what the RSA signature costs), vs the Hummingbird hello-world sent the
#       same headers and body (the HTTP ceiling) and GET /auth/check (for scale);
#   (2) a protected page behind Apache httpd + Debian's mod_auth_openidc with siwa as its provider (by discovery),
#       signed in once by a scripted code flow, vs the same page behind `siwa serve --upstream`, and vs the same
#       Apache with no authentication; the same upstream for all three (a small nginx page, as run-front.sh).
# Release builds under .build-release (the debug .build is left alone); everything on free loopback ports, wrk
# included, so the load generator and the servers share the cores. A report, not a test: exits 0 whatever the
# figures; it stops only if a line does not answer what it should before the timing.
#
# Usage: Benchmarks/run-provider.sh
# Environment: WRK_CONNECTIONS (32) WRK_THREADS (2) ROUNDS (3) ROUND_SECONDS (5): the seven lines alternate in
#              ROUNDS rounds and each keeps its best round; CODES (150000: authorization codes inserted per client;
#              each token run, the warm-up's and the profile's too, gets CODES / (ROUNDS + 2) of them)
#              PROFILE (0; 1 adds perf profiles of siwa during code exchanges, RS256 and ES256, and of Apache
#              during the protected page, in LOG_DIR) NGINX_WORKERS (auto) SCRATCH_PATH (.build-release)
#              LOG_DIR (/tmp/siwa-provider-bench-logs)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS="${WRK_CONNECTIONS:-32}"
export WRK_THREADS="${WRK_THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
SECS="${ROUND_SECONDS:-5}"
CODES="${CODES:-150000}"
PROFILE="${PROFILE:-0}"
NGINX_WORKERS="${NGINX_WORKERS:-auto}"
scratch="${SCRATCH_PATH:-.build-release}"
NGINX=/usr/sbin/nginx
APACHE=/usr/sbin/apache2
APACHE_MODULES=/usr/lib/apache2/modules

. Benchmarks/lib.sh
need=()
command -v wrk >/dev/null || need+=(wrk)
[ -x "$NGINX" ] || need+=(nginx)
command -v curl >/dev/null || need+=(curl)
[ -x "$APACHE" ] || need+=(apache2)
[ -f "$APACHE_MODULES/mod_auth_openidc.so" ] || need+=(libapache2-mod-auth-openidc)
[ "$PROFILE" = 1 ] && ! command -v perf >/dev/null && need+=(linux-perf)
bench_install "${need[@]}"

build_release siwa HelloWorld

work="$(mktemp -d /tmp/siwa-provider-bench.XXXXXX)"
chmod 755 "$work"   # Apache's children run as www-data when this runs as root
logs="${LOG_DIR:-/tmp/siwa-provider-bench-logs}"   # server logs, configurations and wrk outputs end up here
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$logs"/ 2>/dev/null || true
    cp "$work"/*.perf "$logs"/ 2>/dev/null || true   # PROFILE=1: for perf report -i, e.g. with --children
    for conf in "$work"/*/nginx.conf "$work"/*/httpd.conf; do [ -f "$conf" ] && cp "$conf" "$logs/$(basename "$(dirname "$conf")")-$(basename "$conf")"; done
    [ -f "$work/apache/error.log" ] && cp "$work/apache/error.log" "$logs/apache-error.log"
    rm -rf "$work"
}
trap cleanup EXIT

start_upstream

# siwa serve, local mode, SQLite, with the upstream and two clients: "bench" for the code exchanges and "apache"
# for mod_auth_openidc (its redirect URI names Apache's port, so that port is taken first).
port="$(free_port)"; emport="$(free_port)"; aport="$(free_port)"; hport="$(free_port)"
db="$work/siwa.sqlite"
bench_secret="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
es_secret="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
apache_secret="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
redirect_uri="https://app.example/cb"
apache_redirect="http://127.0.0.1:$aport/protected/redirect_uri"
clients="[{\"client_id\":\"bench\",\"client_secret\":\"$bench_secret\",\"redirect_uris\":[\"$redirect_uri\"]},
          {\"client_id\":\"bench-es256\",\"client_secret\":\"$es_secret\",\"redirect_uris\":[\"$redirect_uri\"],\"id_token_signed_response_alg\":\"ES256\"},
          {\"client_id\":\"apache\",\"client_secret\":\"$apache_secret\",\"redirect_uris\":[\"$apache_redirect\"]},
          {\"client_id\":\"bench-device\",\"public\":true,\"device\":true},
          {\"client_id\":\"bench-service\",\"client_secret\":\"$bench_secret\",\"service\":true}]"
# In the environment: siwa 0addf72 takes `--oidc-clients` on the command line but ignores it (config file and
# environment work).
SIWA_OIDC_CLIENTS="$clients" start_siwa "$db"

# One person with one siwa session (cookie value "benchsession" + 31 digits, stored as its SHA-256 in hex, as
# run-front.sh seeds them), and CODES authorization codes of each client, "bench" then "bench-es256", for that person, stored as siwa stores
# them (ProviderSQL.save: the SHA-256 in hex of "benchcode" + 34 digits), valid for a day instead of 60 s so that
# none expires during the run.
echo "seeding a user, a session and 2 × $CODES authorization codes into SQLite ..." >&2
python3 - "$db" "$CODES" "$redirect_uri" <<'PY'
import hashlib, os, sqlite3, sys, time
path, n, redirect = sys.argv[1], int(sys.argv[2]), sys.argv[3]
now = time.time()
sub = "000999.providerbench000000000000000001.0001"
sha = lambda s: hashlib.sha256(s.encode()).hexdigest()
c = sqlite3.connect(path, timeout=30)
with c:
    c.execute("INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at) "
              "VALUES (?, 'bench@example.com', 0, 'Bench', 'User', ?, ?)", (sub, now, now))
    c.execute("INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
              (sha(f"benchsession{1:031d}"), sub, os.urandom(16).hex(), now, now + 7 * 86400))
    c.executemany("INSERT INTO authorization_codes (code_hash, client_id, redirect_uri, sub, scope, nonce, code_challenge, "
                  "auth_time, created_at, expires_at) VALUES (?, ?, ?, ?, 'openid email profile', ?, NULL, ?, ?, ?)",
                  ((sha(f"benchcode{i:034d}"), "bench" if i < n else "bench-es256", redirect, sub, f"nonce{i}", now, now, now + 86400)
                   for i in range(2 * n)))
    # Device grants the person approved, each polled once for its tokens (issue 35): "benchdevice" + 34 digits.
    c.executemany("INSERT INTO device_grants (device_code_hash, user_code, client_id, scope, created_at, expires_at, interval_seconds, status, sub, auth_time) "
                  "VALUES (?, ?, 'bench-device', 'openid profile', ?, ?, 5, 'approved', ?, ?)",
                  ((sha(f"benchdevice{i:034d}"), f"U{i:011d}", now, now + 86400, sub, now) for i in range(n)))
PY
codes_used() { python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM authorization_codes WHERE used_at IS NOT NULL").fetchone()[0])' "$db"; }
siwa_cookie="siwa_session=benchsession$(printf '%031d' 1)"
rs_basic="$(printf 'bench:%s' "$bench_secret" | base64 -w0)"
es_basic="$(printf 'bench-es256:%s' "$es_secret" | base64 -w0)"
export CLIENT_BASIC="$rs_basic"
export REDIRECT_URI="https%3A%2F%2Fapp.example%2Fcb"

# The HTTP ceiling.
"$bin/HelloWorld" "$hport" > "$work/hello.log" 2>&1 &
hello_pid=$!; pids+=("$hello_pid")
until [ "$(status_of "http://127.0.0.1:$hport/")" = 200 ]; do sleep 0.01; done

# Apache httpd with mod_auth_openidc, configured as Tests/TestSupport/ApacheOIDC.swift does (Debian's modules loaded
# one by one, /etc/apache2 not read; the provider by its discovery document only), with Debian's mpm_event
# settings, no access log, and keep-alive without a request limit (as the nginx lines have). /protected needs a
# signed-in person; /open is the same Apache and upstream with no authentication.
adir="$work/apache"; mkdir -p "$adir"
{
    cat <<CONF
# Written by Benchmarks/run-provider.sh for one run; deleted with its directory.
ServerRoot "$adir"
ServerName 127.0.0.1
Listen 127.0.0.1:$aport
PidFile "$adir/httpd.pid"
DefaultRuntimeDir "$adir"
ErrorLog "$adir/error.log"
LogLevel warn
CONF
    for m in mpm_event:mod_mpm_event authn_core:mod_authn_core authz_core:mod_authz_core authz_user:mod_authz_user \
             proxy:mod_proxy proxy_http:mod_proxy_http auth_openidc:mod_auth_openidc; do
        echo "LoadModule ${m%%:*}_module \"$APACHE_MODULES/${m#*:}.so\""
    done
    [ "$(id -u)" -eq 0 ] && printf 'User www-data\nGroup www-data\n'
    cat <<CONF
StartServers 2
MinSpareThreads 25
MaxSpareThreads 75
ThreadLimit 64
ThreadsPerChild 25
MaxRequestWorkers 150
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30

OIDCProviderMetadataURL "http://127.0.0.1:$port/.well-known/openid-configuration"
OIDCClientID apache
OIDCClientSecret "$apache_secret"
OIDCProviderTokenEndpointAuth client_secret_basic
OIDCRedirectURI "$apache_redirect"
OIDCCryptoPassphrase "$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
OIDCScope "openid email profile"
OIDCPKCEMethod S256
OIDCRemoteUserClaim sub
OIDCStateInputHeaders none

ProxyPass / "http://127.0.0.1:$uport/"
<Location /protected>
    AuthType openid-connect
    Require valid-user
</Location>
CONF
} > "$adir/httpd.conf"
"$APACHE" -f "$adir/httpd.conf" -DFOREGROUND > "$work/apache.log" 2>&1 &
apache_pid=$!; pids+=("$apache_pid")
until [ -s "$adir/httpd.pid" ] && [ "$(status_of "http://127.0.0.1:$aport/open/page")" = 200 ]; do
    kill -0 "$apache_pid" 2>/dev/null || { cat "$work/apache.log" "$adir/error.log" >&2; echo "apache2 exited" >&2; exit 1; }
    sleep 0.05
done

# A signed-in mod_auth_openidc session without a browser: the protected page sends curl to siwa's authorize
# endpoint (setting its state cookie), siwa, seeing the seeded siwa session, sends it back with a code at once, and
# Apache, given the code and its state cookie, exchanges the code at siwa's token endpoint and sets its session
# cookie.
jar="$work/apache-cookies.txt"
apache_url="http://127.0.0.1:$aport/protected/page"
hop() { curl -s -o "$work/hop.html" -m 10 -w '%{http_code} %{redirect_url}' -H 'Accept: text/html' "$@"; }
step() {
    [ "${1%% *}" = "$2" ] || { echo "sign-in through Apache: $3 answered '$1', expected $2" >&2; head -c 2000 "$work/hop.html" >&2; cat "$adir/error.log" "$work/siwa.log" >&2; exit 1; }
}
answer="$(hop -c "$jar" -b "$jar" "$apache_url")"; step "$answer" 302 "the protected page"
authorize="${answer#* }"
case "$authorize" in "http://127.0.0.1:$port/oauth2/authorize?"*) ;; *) echo "Apache redirected to $authorize, not to siwa" >&2; exit 1 ;; esac
answer="$(hop -H "Cookie: $siwa_cookie" "$authorize")"; step "$answer" 302 "siwa's authorize endpoint"
callback="${answer#* }"
case "$callback" in "$apache_redirect?"*code=*) ;; *) echo "siwa redirected to $callback, not with a code to Apache" >&2; exit 1 ;; esac
answer="$(hop -c "$jar" -b "$jar" "$callback")"; step "$answer" 302 "Apache's redirect URI"
apache_cookie="mod_auth_openidc_session=$(awk '$6 == "mod_auth_openidc_session" {print $7}' "$jar")"
[ "$apache_cookie" != "mod_auth_openidc_session=" ] || { echo "Apache set no mod_auth_openidc_session cookie" >&2; cat "$jar" >&2; exit 1; }

# Each line answers what it should before anything is timed.
hello_url="http://127.0.0.1:$hport/"
check_url="http://127.0.0.1:$port/auth/check"
token_url="http://127.0.0.1:$port/oauth2/token"
proxy_url="http://127.0.0.1:$port/app/page"
open_url="http://127.0.0.1:$aport/open/page"
expect 200 "$hello_url" -H "Authorization: Basic $CLIENT_BASIC" --data-binary "grant_type=authorization_code" -X GET
expect 202 "$check_url" -H "Cookie: $siwa_cookie"
expect 200 "$proxy_url" -H "Cookie: $siwa_cookie"
expect 401 "$proxy_url"
expect 200 "$apache_url" -H "Cookie: $apache_cookie"
expect 302 "$apache_url"
expect 200 "$open_url"
expect 400 "$token_url" -H "Authorization: Basic $CLIENT_BASIC" --data "grant_type=authorization_code&code=nonesuch&redirect_uri=$REDIRECT_URI"
[ "$(curl -s "$apache_url" -H "Cookie: $apache_cookie")" = "$(curl -s "$proxy_url" -H "Cookie: $siwa_cookie")" ] ||
    { echo "Apache and siwa --upstream answer different pages" >&2; exit 1; }
page_bytes="$(curl -s "$open_url" | wc -c)"

# Token runs: each takes the next slice of its client's codes (bench: 0 to CODES - 1; bench-es256: CODES to
# 2 × CODES - 1), split between wrk's threads. token_run NAME rs|es
per_run=$((CODES / (ROUNDS + 2)))
export CODES_PER_THREAD=$((per_run / WRK_THREADS))
next_rs=0; next_es="$CODES"; next_dev=0
svc_basic="$(printf 'bench-service:%s' "$bench_secret" | base64 -w0)"
# A Lua format string: its percent signs doubled, but for the number's.
device_form="grant_type=urn%%3Aietf%%3Aparams%%3Aoauth%%3Agrant-type%%3Adevice_code&client_id=bench-device&device_code=benchdevice%034d"
token_run() {
    if [ "$2" = device ]; then
        CODE_FIRST="$next_dev" CLIENT_BASIC="" TOKEN_FORM="$device_form" wrk_run "$1" "$token_url" "$siwa_pid" -s Benchmarks/lua/token.lua
        next_dev=$((next_dev + per_run))
        return
    fi
    if [ "$2" = service ]; then
        CLIENT_BASIC="$svc_basic" wrk_run "$1" "$token_url" "$siwa_pid" -s Benchmarks/lua/service.lua
        return
    fi
    if [ "$2" = es ]; then
        CODE_FIRST="$next_es" CLIENT_BASIC="$es_basic" wrk_run "$1" "$token_url" "$siwa_pid" -s Benchmarks/lua/token.lua
        next_es=$((next_es + per_run))
    else
        CODE_FIRST="$next_rs" CLIENT_BASIC="$rs_basic" wrk_run "$1" "$token_url" "$siwa_pid" -s Benchmarks/lua/token.lua
        next_rs=$((next_rs + per_run))
    fi
}
tally() { awk -v n="$2:" '$1 == n {print $2; exit}' "$work/$1.txt"; }   # tally NAME unexpected|sent|overrun
pages() {   # pages NAME-SUFFIX: the three page lines
    SESSION_COOKIE="$apache_cookie" wrk_run "apache$1" "$apache_url" "$apache_pid" -s Benchmarks/lua/page.lua
    SESSION_COOKIE="$siwa_cookie" wrk_run "proxy$1" "$proxy_url" "$siwa_pid" -s Benchmarks/lua/page.lua
    wrk_run "open$1" "$open_url" "$apache_pid" -s Benchmarks/lua/page.lua
}

echo "warm-up ..." >&2
SECS_SAVED="$SECS"; SECS=2
wrk_run hello.w "$hello_url" "$hello_pid" -s Benchmarks/lua/form.lua
SESSION_COOKIE="$siwa_cookie" EXPECT_STATUS=202 wrk_run check.w "$check_url" "$siwa_pid" -s Benchmarks/lua/page.lua
token_run token.w rs
token_run tokenes.w es
token_run device.w device
token_run service.w service
pages .w
SECS="$SECS_SAVED"

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round of $ROUNDS: hello-world, /auth/check, code exchange RS256 and ES256, Apache + mod_auth_openidc, siwa --upstream, Apache open" >&2
    wrk_run "hello.r$round" "$hello_url" "$hello_pid" -s Benchmarks/lua/form.lua
    SESSION_COOKIE="$siwa_cookie" EXPECT_STATUS=202 wrk_run "check.r$round" "$check_url" "$siwa_pid" -s Benchmarks/lua/page.lua
    token_run "token.r$round" rs
    token_run "tokenes.r$round" es
    token_run "device.r$round" device
    token_run "service.r$round" service
    pages ".r$round"
done
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
for name in hello check token tokenes device service apache proxy open; do best_round "$name"; done

# Every token run's answers, the warm-up's included: the codes the store marked used, and the answers other than 200.
token_sent=0; token_bad=0; token_overrun=0; token_done=0
for f in "$work"/token.w.txt "$work"/token.r*.txt "$work"/tokenes.w.txt "$work"/tokenes.r*.txt; do
    name="$(basename "$f" .txt)"
    token_sent=$((token_sent + $(tally "$name" sent))); token_bad=$((token_bad + $(tally "$name" unexpected)))
    token_overrun=$((token_overrun + $(tally "$name" overrun))); token_done=$((token_done + $(wrk_requests "$name")))
done
consumed="$(codes_used)"
tokens_stored="$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM provider_tokens").fetchone()[0])' "$db")"

# Optional profiles (perf record -g) of siwa during a code-exchange run and of Apache during a protected-page run.
if [ "$PROFILE" = 1 ]; then
    profile() {   # profile NAME PIDS -- the run to profile
        local name="$1" who="$2" perf_pid; shift 3
        perf record -g -o "$work/$name.perf" -p "$(echo $who | tr ' ' ',')" -- sleep "$((SECS + 1))" > /dev/null 2>&1 &
        perf_pid=$!
        sleep 0.5; "$@"; wait "$perf_pid" || true
        perf report -i "$work/$name.perf" --no-children --sort dso,symbol -g none --percent-limit 0.3 --stdio 2>/dev/null | grep -v '^$' | sed -E 's/ {3,}/  /g; s/[ -]+$//' | head -150 > "$work/$name-report.txt" || true
        perf report -i "$work/$name.perf" --no-children --sort dso -g none --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -E 's/ +$//' | head -20 > "$work/$name-dso.txt" || true
    }
    echo "profiles ..." >&2
    profile perf-token "$siwa_pid" -- token_run token.p rs
    profile perf-token-es256 "$siwa_pid" -- token_run tokenes.p es
    export SESSION_COOKIE="$apache_cookie"
    profile perf-apache "$apache_pid $(pgrep -P "$apache_pid" | tr '\n' ' ')" -- wrk_run apache.p "$apache_url" "$apache_pid" -s Benchmarks/lua/page.lua
fi

# ---------------------------------------------------------------------------------------------------------
unexpected() { tally "$1" unexpected; }
cat <<OUT

## siwa provider benchmark

$(date -u '+%Y-%m-%d %H:%M UTC'), commit $measured, $(nproc) cores ($(uname -m)), load average at the start of the
rounds $load_start, at their end $load_end; $(swift --version 2>/dev/null | head -1), $("$APACHE" -v | sed -n 's/^Server version: //p'),
mod_auth_openidc $(dpkg-query -W -f '${Version}' libapache2-mod-auth-openidc 2>/dev/null || echo '?'), nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///'),
wrk ${WRK_THREADS} threads, ${CONNS} connections, --latency, best of ${ROUNDS} alternating rounds of ${SECS} s; everything on
loopback, so wrk, the servers and the upstream share the cores. siwa: \`siwa serve --upstream\` local mode, SQLite,
SIWA_RATE_LIMIT_PER_MINUTE=0, SIWA_LOG_LEVEL=warning. Upstream: an nginx answering a page of ${page_bytes} bytes from memory.
"other answers": answers other than 200 (202 for /auth/check), counted by the wrk script.

(1) The token endpoint

| line | requests/s | p50 | p99 | CPU per request (server) | requests | other answers |
|---|---:|---:|---:|---:|---:|---:|
$(row "Hummingbird hello-world, the token request's headers and body (HTTP ceiling)" hello "$(unexpected hello)")
$(row "\`GET /auth/check\`, valid session (202)" check "$(unexpected check)")
$(row "\`POST /oauth2/token\`, authorization_code, client_secret_basic (RS256 id_token)" token "$(unexpected token)")
$(row "the same, a client with \`id_token_signed_response_alg\` ES256" tokenes "$(unexpected tokenes)")
$(row "\`POST /oauth2/token\`, device_code, an approved grant polled once (public client; RS256 id_token)" device "$(unexpected device)")
$(row "\`POST /oauth2/token\`, client_credentials, a service by client_secret_basic (no id_token)" service)

Code exchanges over all ${ROUNDS} rounds and the warm-ups, both clients: ${token_sent} codes sent (${token_done} answered within the runs),
${consumed} codes marked used in the store, ${tokens_stored} tokens stored (an access and a refresh token per exchange),
${token_bad} answers other than 200, ${token_overrun} codes sent past a thread's slice; 2 × ${CODES} codes were inserted.

(2) A protected page

| line | requests/s | p50 | p99 | CPU per request (front) | requests | other answers |
|---|---:|---:|---:|---:|---:|---:|
$(row "Apache → upstream, no authentication" open "$(unexpected open)")
$(row "Apache + mod_auth_openidc (siwa the provider), signed-in session → upstream" apache "$(unexpected apache)")
$(row "\`siwa serve --upstream\`, valid session → upstream" proxy "$(unexpected proxy)")

"CPU per request": user + system time of the process answering wrk (siwa; Apache's parent and children; the
hello-world) over the round, divided by its requests; the upstream's and wrk's own time are not in it.
OUT
if [ "$PROFILE" = 1 ]; then
    echo; echo "Profiles (perf record -g, ${SECS} s): $logs/perf-token-report.txt, $logs/perf-token-es256-report.txt, $logs/perf-apache-report.txt"
    echo; echo '```'; echo "siwa during code exchanges (RS256), by shared object:"; cat "$work/perf-token-dso.txt"
    echo; echo "siwa during code exchanges (ES256), by shared object:"; cat "$work/perf-token-es256-dso.txt"
    echo; echo "Apache during the protected page, by shared object:"; cat "$work/perf-apache-dso.txt"; echo '```'
fi
