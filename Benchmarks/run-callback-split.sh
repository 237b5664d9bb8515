#!/usr/bin/env bash
# Where a sign-in's CPU goes (issue 8): the callback of run-web.sh, but with the emulator ("Apple") in its own
# process, so the CPU time of siwa and of the emulator can be read apart from /proc. siwa runs in Apple mode
# with the emulator's test team and key, SQLite store. Builds release binaries under .build-release.
#
# Usage: Benchmarks/run-callback-split.sh
# Environment: CALLBACKS (9000) WRK_SECONDS (5: must end before the callbacks run out) WRK_CONNECTIONS (32) WRK_THREADS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${CALLBACKS:-9000}"
SECS="${WRK_SECONDS:-5}"
CONNS="${WRK_CONNECTIONS:-32}"
export WRK_THREADS="${WRK_THREADS:-2}"
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null

swift build -c release --product siwa --scratch-path .build-release >&2
bin="$(swift build -c release --scratch-path .build-release --show-bin-path)"
work="$(mktemp -d /tmp/siwa-split.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
up() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ]; }

port="$(free_port)"; emport="$(free_port)"
"$bin/siwa" emulator --print-config > "$work/emulator.base.json"
python3 - "$work/emulator.base.json" "$port" "$work/AuthKey.p8" > "$work/emulator.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
for client in c["clients"]:
    if client["redirectURIs"]:
        client["redirectURIs"] = [f"http://127.0.0.1:{sys.argv[2]}/auth/apple/callback"]
open(sys.argv[3], "w").write(c["clients"][0]["privateKeyPEM"] + "\n")
print(json.dumps(c))
PY
"$bin/siwa" emulator --config "$work/emulator.json" --port "$emport" > "$work/emulator.log" 2>&1 &
emu_pid=$!; pids+=("$emu_pid")
until up "http://127.0.0.1:$emport/auth/keys"; do sleep 0.05; done

SIWA_TEAM_ID=EMU0TEAM01 SIWA_KEY_ID=EMU0KEY001 SIWA_KEY_FILE="$work/AuthKey.p8" SIWA_SERVICES_ID=com.example.siwa.web \
SIWA_RETURN_URL="http://127.0.0.1:$port/auth/apple/callback" SIWA_APPLE_BASE_URL="http://127.0.0.1:$emport" \
SIWA_DATA_KEY="$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())')" \
SIWA_RATE_LIMIT_PER_MINUTE=0 SIWA_LOG_LEVEL=warning "$bin/siwa" serve --port "$port" --db "$work/siwa.sqlite" > "$work/siwa.log" 2>&1 &
siwa_pid=$!; pids+=("$siwa_pid")
until up "http://127.0.0.1:$port/readyz"; do kill -0 "$siwa_pid" || { cat "$work/siwa.log" >&2; exit 1; }; sleep 0.05; done

python3 Benchmarks/web/gen_callbacks.py "$port" "$N" "$work/tuples" --workers 4
s0="$(cpu_ticks "$siwa_pid")"; e0="$(cpu_ticks "$emu_pid")"
CALLBACKS="$work/tuples" wrk -t"$WRK_THREADS" -c"$CONNS" -d"${SECS}s" --latency -s Benchmarks/lua/callback.lua \
    "http://127.0.0.1:$port/auth/apple/callback" > "$work/wrk.txt" 2>&1 || true
s1="$(cpu_ticks "$siwa_pid")"; e1="$(cpu_ticks "$emu_pid")"
n="$(awk '/requests in/ {print $1; exit}' "$work/wrk.txt")"
hz="$(getconf CLK_TCK)"
ms() { awk -v t="$1" -v hz="$hz" -v n="$n" 'BEGIN { printf "%.2f", 1000 * t / hz / n }'; }
cat <<OUT

## Callback CPU split: siwa and the emulator in separate processes

$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; wrk $WRK_THREADS threads, $CONNS connections; $N pre-generated callbacks.

| measure | value |
|---|---:|
| callbacks completed | $n in $(awk '/requests in/ {sub(",", "", $4); print $4; exit}' "$work/wrk.txt") |
| rate | $(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")/s |
| p50 / p99 | $(awk '$1 == "50%" {print $2}' "$work/wrk.txt") / $(awk '$1 == "99%" {print $2}' "$work/wrk.txt") |
| siwa CPU per callback | $(ms $((s1 - s0))) ms |
| emulator ("Apple") CPU per callback (client-secret check, code redemption, RS256 id_token signature) | $(ms $((e1 - e0))) ms |
| non-2xx/3xx | $(awk '/Non-2xx or 3xx responses:/ {print $5}' "$work/wrk.txt") |
OUT
