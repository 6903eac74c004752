#!/bin/sh
# Throughput and peak memory of streamed AS2 and AS4 messages of 10 MB,
# 100 MB and 1 GB through the real server over loopback, against raw SHA-256 +
# AES-GCM + zlib inflate measured in the same run (server/stream_bench_test.go).
# GATEWAY_STREAMBENCH_SIZES=1000 (MB, comma-separated) and
# GATEWAY_STREAMBENCH_PROTOCOLS=as2 (or as4) run part of the table.
set -e
cd "$(dirname "$0")/.."
GATEWAY_STREAMBENCH=1 go test ./server/ -run '^TestStreamThroughputReport$' -count=1 -v -timeout 30m | grep -E '^(\||raw)'
