#!/usr/bin/env bash
# Core benchmark: id_token verifications per second against swift-crypto's raw RS256 rate, and the client secret
# cached vs freshly signed. Builds in release mode under .build-release so the debug .build is left alone.
# Usage: Benchmarks/run-core.sh [--seconds N] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product VerifyBenchmark --scratch-path .build-release
bin="$(swift build -c release --scratch-path .build-release --show-bin-path)"
"$bin/VerifyBenchmark" "$@"
