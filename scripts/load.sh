#!/usr/bin/env bash
# Load test of the real gateway binary on loopback.
#
# Builds bin/gateway and bin/gateway-load, starts `bin/gateway serve` on a
# temporary copy of the demo configuration (its own SQLite store, inbox,
# audit file and a free port chosen by the kernel), waits for the admin /readyz, runs
# gateway-load for AS2 and then AS4, stops the server and prints both
# summary lines (msgs/s, latency percentiles, failures, the bound and the
# ratio msgs/s ÷ bound). Before each load, with the gateway idle, the load
# tool measures the bound itself: RSA-2048 PKCS#1 v1.5 signatures per second
# on every core for OP_TIME; bound = ops/s ÷ 2 (two private-key operations
# per message).
#
#	scripts/load.sh                                  # SQLite store in the temporary directory
#	scripts/load.sh -store postgres://127.0.0.1:5432/test?sslmode=disable
#
# Settings (environment): STORE (the served configuration's store URL; the
# -store argument wins; default an SQLite file in the temporary directory),
# AS2_N (2000), AS4_N (1000), CONCURRENCY (8), SIZE (10240 bytes), DUPLICATES
# (0: fraction resent with identical bytes), OP_TIME (3s), PROFILE=1 turns on
# admin.pprof and saves a 10 s CPU profile of the gateway taken during each
# load as $PROFILE_DIR/{as2,as4}.cpu.pprof (PROFILE_DIR default: the current
# directory), GATEWAY_BIN (serve this binary instead of building
# bin/gateway, e.g. an earlier version for before/after figures), KEEP=1 keeps the temporary directory (store, inbox, logs).
# Exit status: 0 when both runs had no failures.
set -euo pipefail

cd "$(dirname "$0")/.."
AS2_N=${AS2_N:-2000}
AS4_N=${AS4_N:-1000}
CONCURRENCY=${CONCURRENCY:-8}
SIZE=${SIZE:-10240}
DUPLICATES=${DUPLICATES:-0}
OP_TIME=${OP_TIME:-3s}
PROFILE=${PROFILE:-0}
PROFILE_DIR=${PROFILE_DIR:-$PWD}
STORE=${STORE:-}
while [[ $# -gt 0 ]]; do
	case "$1" in
	-store | --store)
		STORE=$2
		shift 2
		;;
	*)
		echo "usage: scripts/load.sh [-store URL]" >&2
		exit 2
		;;
	esac
done
STORE=${STORE:-sqlite:../var/gateway.db}
case "$STORE" in
sqlite:* | postgres://* | postgresql://*) ;;
*)
	echo "load.sh: -store must be sqlite:PATH or postgres://…" >&2
	exit 2
	;;
esac

mkdir -p bin
GATEWAY_BIN=${GATEWAY_BIN:-}
if [[ -z "$GATEWAY_BIN" ]]; then
	echo "building bin/gateway and bin/gateway-load" >&2
	go build -o bin/gateway ./cmd/gateway
	GATEWAY_BIN=bin/gateway
else
	echo "building bin/gateway-load; serving with $GATEWAY_BIN" >&2
fi
go build -o bin/gateway-load ./cmd/gateway-load

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gateway-load.XXXXXX")
server_pid=""
cleanup() {
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	if [[ "${KEEP:-0}" == 1 ]]; then
		echo "kept $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

# The demo configuration with every path of run data inside $tmp; relative
# paths in the file resolve against the file's directory.
cp -R testdata/demo "$tmp/demo"
cat >"$tmp/demo/gateway.yaml" <<EOF
listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
  pprof: $([[ "$PROFILE" == 1 ]] && echo true || echo false)
store: "$STORE"
lease: 5m
retention: 2160h
partners: partners
identity:
  as2_id: GATEWAY
  party_id: urn:demo:gateway
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys:
    - cert: keys/gateway.pem
      key: keys/gateway.key
handler:
  type: dir
  inbox: ../var/inbox
audit:
  file: ../var/audit.jsonl
spool_dir: ../var/spool
quarantine_dir: ../var/quarantine
archive_dir: ../var/archive
shutdown_timeout: 10s
EOF
mkdir -p "$tmp/var/spool"

log="$tmp/gateway.log"
"$GATEWAY_BIN" serve -config "$tmp/demo/gateway.yaml" 2>"$log" &
server_pid=$!

# The kernel chose the port: read it from the "gateway listening" log line.
addr=""
for _ in $(seq 1 100); do
	if ! kill -0 "$server_pid" 2>/dev/null; then
		echo "gateway exited:" >&2
		cat "$log" >&2
		exit 1
	fi
	addr=$(sed -n 's/.*"msg":"gateway listening","addr":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
	admin=$(sed -n 's/.*"msg":"gateway listening".*"admin":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
	if [[ -n "$addr" ]] && curl -fsS "http://$admin/readyz" >/dev/null 2>&1; then
		break
	fi
	addr=""
	sleep 0.1
done
if [[ -z "$addr" ]]; then
	echo "gateway did not become healthy in 10 s:" >&2
	cat "$log" >&2
	exit 1
fi
echo "gateway pid $server_pid listening on $addr (run data in $tmp)" >&2

status=0
summaries=()
for run in "as2 $AS2_N" "as4 $AS4_N"; do
	set -- $run
	prof_pid=""
	if [[ "$PROFILE" == 1 ]]; then
		# Starts once the bound is measured (OP_TIME) and the messages are built.
		(
			for _ in $(seq 1 3000); do
				grep -q "gateway-load: RSA" "$tmp/load-$1.err" 2>/dev/null && break
				sleep 0.1
			done
			curl -fsS -o "$PROFILE_DIR/$1.cpu.pprof" "http://$admin/debug/pprof/profile?seconds=10"
		) &
		prof_pid=$!
	fi
	line=$(bin/gateway-load -protocol "$1" -url "http://$addr/$1" -n "$2" -c "$CONCURRENCY" -size "$SIZE" \
		-duplicates "$DUPLICATES" -op-time "$OP_TIME" -timeout 10m 2>"$tmp/load-$1.err") || status=1
	cat "$tmp/load-$1.err" >&2
	if [[ -n "$prof_pid" ]]; then
		wait "$prof_pid" || echo "load.sh: no CPU profile for $1" >&2
		echo "CPU profile of the gateway during the $1 load: $PROFILE_DIR/$1.cpu.pprof" >&2
	fi
	summaries+=("$line")
done

kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=""
echo "gateway stopped; inbox holds $(find "$tmp/var/inbox" -type f | wc -l) payloads" >&2

echo "store: ${STORE%%\?*}"
printf '%s\n' "${summaries[@]}"
exit $status
