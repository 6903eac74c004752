#!/usr/bin/env bash
# Prints the peak heap and RSS growth of the gateway under hostile input
# (decompression bombs, oversized unauthenticated bodies) and, for the
# record, of valid 16 MiB messages: server.TestMemoryBoundedUnderHostileInput
# run through the real HTTP endpoints on loopback, with GATEWAY_MEMREPORT=1.
set -euo pipefail
cd "$(dirname "$0")/.."
GATEWAY_MEMREPORT=1 go test ./server -run '^TestMemoryBoundedUnderHostileInput$' -count=1 -v |
	sed -n '/^peak growth/,/^--- /p' | grep -v '^--- '
