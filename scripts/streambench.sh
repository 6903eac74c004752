#!/bin/sh
# Throughput and peak memory of streamed AS2 and AS4 messages of 10 MB,
# 100 MB and 1 GB through the real server over loopback, against raw SHA-256 +
# AES-GCM + zlib inflate measured in the same run (server/stream_bench_test.go).
set -e
cd "$(dirname "$0")/.."
GATEWAY_STREAMBENCH=1 go test ./server/ -run '^TestStreamThroughputReport$' -count=1 -v -timeout 30m | grep -E '^(\||raw)'
