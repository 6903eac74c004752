#!/usr/bin/env bash
# Load test of the real gateway binary on loopback.
#
# Builds bin/gateway and bin/gateway-load and, for AS2 and then AS4 (or the
# one protocol named by -protocol), starts `bin/gateway serve` on a
# temporary copy of the demo configuration (its own store, inbox, audit
# file and free ports chosen by the kernel), waits for the admin /readyz,
# runs gateway-load and stops the gateway again. Before each load, with the
# gateway idle, the load tool measures the bound itself: RSA-2048 PKCS#1
# v1.5 signatures per second on every core for OP_TIME; bound = ops/s ÷ 2
# (two private-key operations per message). It prints one line per
# protocol: msgs/s, latency percentiles, failures, the bound, the ratio
# msgs/s ÷ bound, and figures a busy machine disturbs far less: the
# gateway's CPU ms per message (its process_cpu_seconds_total on the admin
# /metrics) and what of it is not the two RSA operations, the gateway
# process's fsync + fdatasync calls per message (with STRACE=1, counted by strace, start-up
# and shutdown included) and, on PostgreSQL with psql at hand, the
# database's commits and the cluster's WAL syncs per message (exact only
# when nothing else uses the database meanwhile).
#
#	scripts/load.sh                                  # SQLite store in the temporary directory
#	scripts/load.sh -protocol as4 -store postgres://127.0.0.1:5432/test?sslmode=disable
#
# Settings (environment): STORE (the served configuration's store URL; the
# -store argument wins; default an SQLite file in the temporary directory;
# memory: serves without a durable store, to measure what durability costs),
# AUDIT_FILE (1: the JSON-lines audit file as in the demo; 0: none), INBOX
# (the dir handler's inbox; default in the temporary directory; a tmpfs
# directory such as /dev/shm/x takes the inbox's syncs away),
# AS2_N (2000), AS4_N (1000), CONCURRENCY (8), SIZE (10240 bytes), DUPLICATES
# (0: fraction resent with identical bytes), OP_TIME (3s), STRACE (0: off;
# 1: count fsyncs with strace; auto: when strace can trace here; a traced
# gateway is slower: on the 2-core machine 86 instead of 135 AS2 msgs/s,
# so take msgs/s and the ratio from an untraced run), PROFILE=1 turns on
# admin.pprof and saves a 10 s CPU profile and allocation profile (the
# allocations of those 10 s) of the gateway taken during each load as
# $PROFILE_DIR/{as2,as4}.{cpu,allocs}.pprof, and a CPU profile of the load
# tool's whole sending phase as $PROFILE_DIR/{as2,as4}.load.cpu.pprof
# (PROFILE_DIR default: the current directory), GATEWAY_BIN (serve this binary instead of building
# bin/gateway, e.g. an earlier version for before/after figures), KEEP=1 keeps the temporary directory (store, inbox, logs).
# Exit status: 0 when every run had no failures.
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
AUDIT_FILE=${AUDIT_FILE:-1}
INBOX=${INBOX:-../var/inbox}
PROTOCOLS=(as2 as4)
while [[ $# -gt 0 ]]; do
	case "$1" in
	-store | --store)
		STORE=$2
		shift 2
		;;
	-protocol | --protocol)
		case "$2" in
		as2 | as4) PROTOCOLS=("$2") ;;
		both) PROTOCOLS=(as2 as4) ;;
		*)
			echo "load.sh: -protocol must be as2, as4 or both" >&2
			exit 2
			;;
		esac
		shift 2
		;;
	*)
		echo "usage: scripts/load.sh [-protocol as2|as4|both] [-store URL]" >&2
		exit 2
		;;
	esac
done
use_strace=0
case "${STRACE:-0}" in
1) use_strace=1 ;;
auto)
	# Only where it can trace (a container may forbid ptrace or seccomp).
	if command -v strace >/dev/null && strace -f -c --seccomp-bpf -e trace=fsync,fdatasync -o /dev/null true 2>/dev/null; then
		use_strace=1
	fi
	;;
esac
STORE=${STORE:-sqlite:../var/gateway.db}
case "$STORE" in
memory: | sqlite:* | postgres://* | postgresql://*) ;;
*)
	echo "load.sh: -store must be sqlite:PATH, postgres://… or memory:" >&2
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
gateway_pid=""
cleanup() {
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "${gateway_pid:-$server_pid}" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	if [[ "${KEEP:-0}" == 1 ]]; then
		echo "kept $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

# The tests' copy of the demo (testdata/fixture: a partner an operator adds
# to testdata/demo does not change the run) with every path of run data
# inside $tmp; relative paths in the file resolve against the file's
# directory.
cp -R testdata/fixture "$tmp/demo"
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
  inbox: $INBOX
$([[ "$AUDIT_FILE" == 1 ]] && printf 'audit:\n  file: ../var/audit.jsonl' || echo "# no audit file (AUDIT_FILE=0)")
spool_dir: ../var/spool
quarantine_dir: ../var/quarantine
archive_dir: ../var/archive
shutdown_timeout: 10s
EOF
mkdir -p "$tmp/var/spool"

# start_gateway starts `gateway serve` (under strace counting its fsync and
# fdatasync calls, when strace is used) and waits until it answers /readyz;
# it sets gateway_pid, addr and admin.
start_gateway() {
	local log=$1 trace=$2
	# Created before the gateway starts: on a busy machine the loop below
	# read it before the background job's redirection made it (set -e).
	: >"$log"
	if [[ -n "$trace" ]]; then
		# --seccomp-bpf stops the gateway only at the traced calls, so the
		# count costs little beside the fsyncs themselves.
		strace -f -c --seccomp-bpf -e trace=fsync,fdatasync -o "$trace" \
			"$GATEWAY_BIN" serve -config "$tmp/demo/gateway.yaml" 2>"$log" &
		server_pid=$!
		gateway_pid="" # strace's child, once the gateway answers (strace may fork helpers first)
	else
		"$GATEWAY_BIN" serve -config "$tmp/demo/gateway.yaml" 2>"$log" &
		server_pid=$!
		gateway_pid=$server_pid
	fi
	# The kernel chose the ports: read them from the "gateway listening" line.
	addr=""
	for _ in $(seq 1 300); do
		if ! kill -0 "$server_pid" 2>/dev/null; then
			echo "gateway exited:" >&2
			cat "$log" >&2
			exit 1
		fi
		addr=$(sed -n 's/.*"msg":"gateway listening","addr":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
		admin=$(sed -n 's/.*"msg":"gateway listening".*"admin":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
		if [[ -n "$addr" ]] && curl -fsS "http://$admin/readyz" >/dev/null 2>&1; then
			if [[ -z "$gateway_pid" ]]; then
				gateway_pid=$(pgrep -P "$server_pid" -f " serve -config $tmp/demo/gateway.yaml" | head -n 1 || true)
			fi
			break
		fi
		addr=""
		sleep 0.1
	done
	if [[ -z "$addr" || -z "$gateway_pid" ]]; then
		echo "gateway did not become healthy in 30 s:" >&2
		cat "$log" >&2
		exit 1
	fi
	echo "gateway pid $gateway_pid listening on $addr (run data in $tmp)" >&2
}

# stop_gateway stops it with SIGTERM (a graceful shutdown) and waits for it
# (and for strace, which then writes its count).
stop_gateway() {
	kill -TERM "$gateway_pid" 2>/dev/null || true
	for _ in $(seq 1 300); do
		kill -0 "$gateway_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$gateway_pid" 2>/dev/null; then
		echo "load.sh: the gateway did not stop in 30 s after SIGTERM; killed" >&2
		kill -KILL "$gateway_pid" 2>/dev/null || true
	fi
	wait "$server_pid" || true
	server_pid=""
}

# pg_counters prints the PostgreSQL database's committed transactions and
# the cluster's WAL syncs (pg_stat_wal), when the store is PostgreSQL and
# psql is there; else nothing. Read while no gateway runs: a backend's
# counts are published when it ends.
pg_counters() {
	[[ "$STORE" == postgres* ]] && command -v psql >/dev/null || return 0
	local dsn
	dsn=$(sed -e 's/\([?&]\)schema=[^&]*&\?/\1/' -e 's/[?&]$//' <<<"$STORE")
	psql "$dsn" -XAtc "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), (SELECT wal_sync FROM pg_stat_wal)" 2>/dev/null |
		tail -n 1 | tr '|' ' ' || true
}

status=0
summaries=()
for proto in "${PROTOCOLS[@]}"; do
	n=$AS2_N
	[[ "$proto" == as4 ]] && n=$AS4_N
	trace=""
	[[ "$use_strace" == 1 ]] && trace="$tmp/fsyncs-$proto.txt"
	pg0=$(pg_counters)
	start_gateway "$tmp/gateway-$proto.log" "$trace"
	prof_pid=""
	if [[ "$PROFILE" == 1 ]]; then
		# Starts once the bound is measured (OP_TIME) and the messages are built.
		(
			for _ in $(seq 1 3000); do
				grep -q "gateway-load: RSA" "$tmp/load-$proto.err" 2>/dev/null && break
				sleep 0.1
			done
			curl -fsS -o "$PROFILE_DIR/$proto.allocs.pprof" "http://$admin/debug/pprof/allocs?seconds=10" &
			curl -fsS -o "$PROFILE_DIR/$proto.cpu.pprof" "http://$admin/debug/pprof/profile?seconds=10"
			wait
		) &
		prof_pid=$!
	fi
	loadprof=()
	[[ "$PROFILE" == 1 ]] && loadprof=(-cpuprofile "$PROFILE_DIR/$proto.load.cpu.pprof")
	line=$(bin/gateway-load -protocol "$proto" -url "http://$addr/$proto" -metrics "http://$admin/metrics" -n "$n" \
		-c "$CONCURRENCY" -size "$SIZE" -duplicates "$DUPLICATES" -op-time "$OP_TIME" -timeout 10m "${loadprof[@]}" 2>"$tmp/load-$proto.err") || status=1
	cat "$tmp/load-$proto.err" >&2
	if [[ -n "$prof_pid" ]]; then
		wait "$prof_pid" || echo "load.sh: no CPU profile for $proto" >&2
		echo "CPU and allocation profiles of the gateway during the $proto load: $PROFILE_DIR/$proto.{cpu,allocs}.pprof; the load tool's: $PROFILE_DIR/$proto.load.cpu.pprof" >&2
	fi
	stop_gateway
	msgs=$(sed -n 's/.* messages=\([0-9]*\) .*/\1/p' <<<"$line")
	if [[ -n "$trace" && -n "$msgs" && "$msgs" -gt 0 ]]; then
		# Every fsync and fdatasync of the gateway process, start-up and
		# shutdown included.
		syncs=$(awk '$NF == "fsync" || $NF == "fdatasync" { n += ($4 ~ /^[0-9]+$/ ? $4 : $3) } END { print n + 0 }' "$trace")
		line+=$(awk -v s="$syncs" -v m="$msgs" 'BEGIN { printf " gateway_fsyncs/msg=%.2f", s / m }')
	fi
	pg1=$(pg_counters)
	if [[ -n "$pg0" && -n "$pg1" && -n "$msgs" && "$msgs" -gt 0 ]]; then
		# The whole database's commits and the cluster's WAL syncs: exact
		# only when nothing else uses them meanwhile.
		line+=$(awk -v a="$pg0" -v b="$pg1" -v m="$msgs" 'BEGIN { split(a, x, " "); split(b, y, " ");
			printf " pg_commits/msg=%.2f pg_wal_syncs/msg=%.2f", (y[1] - x[1]) / m, (y[2] - x[2]) / m }')
	fi
	summaries+=("$line")
done
echo "gateway stopped; inbox holds $(find "$tmp/var/inbox" -type f ! -name '*.meta.json' | wc -l) payloads" >&2

echo "store: ${STORE%%\?*}"
printf '%s\n' "${summaries[@]}"
exit $status
