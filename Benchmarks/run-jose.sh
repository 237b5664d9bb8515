#!/usr/bin/env bash
# Issue 16 part 3: the project's JOSE module against vapor/jwt-kit 5 (RS256 and ES256 verify, ES256 sign, JWKS
# parse), swift-crypto's raw operation as the ceiling. Benchmarks/JOSEComparison is a package of its own, so jwt-kit
# never enters the root package; it builds in release mode under .build-jose, leaving .build and .build-release alone.
# Usage: Benchmarks/run-jose.sh [--seconds N] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
package=Benchmarks/JOSEComparison
swift build -c release --package-path "$package" --scratch-path .build-jose --product JOSEComparison
bin="$(swift build -c release --package-path "$package" --scratch-path .build-jose --show-bin-path)"
version="$(grep -A6 '"identity" : "jwt-kit"' "$package/Package.resolved" | sed -n 's/.*"version" : "\(.*\)".*/\1/p')"
echo "jwt-kit ${version:-unknown}, $(swift --version 2>/dev/null | head -1), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/JOSEComparison" "$@"
