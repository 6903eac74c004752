#!/usr/bin/env bash
# Sending load test: two real gateways on loopback, one sending to the other.
#
# Builds bin/gateway and bin/gateway-load, starts a receiving gateway (the
# demo identity GATEWAY, as scripts/load.sh serves it) and a sending gateway
# (the demo partner's identity DEMO, its one partner "gw" the receiving
# gateway, AS2 with a signed synchronous MDN and AS4 with a signed receipt),
# each on its own store, inbox and ports of the kernel's choice, and runs
# `gateway-load -mode send` for AS2 and then AS4 (or the one protocol named
# by -protocol): N messages submitted through the sending gateway's
# submission API, polled until every one is final. It prints one line per
# protocol: sent msgs/s (first submission to the last message final), the
# sending gateway's CPU ms per message beside the receiving gateway's.
#
#	scripts/load-send.sh
#	scripts/load-send.sh -protocol as4 -store postgres://127.0.0.1:5432/test?sslmode=disable
#
# Settings (environment): STORE (the sending gateway's store; -store wins;
# default an SQLite file), RECV_STORE (the receiving gateway's; default an
# SQLite file), AS2_N (1000), AS4_N (1000), CONCURRENCY (8: concurrent
# submissions), WORKERS (the sending gateway's outbound.workers, default
# its default, 4), SIZE
# (10240 bytes), GATEWAY_BIN (serve this binary instead of building
# bin/gateway), KEEP=1 keeps the temporary directory (stores, inboxes, logs).
# Exit status: 0 when every message was delivered.
set -euo pipefail

cd "$(dirname "$0")/.."
AS2_N=${AS2_N:-1000}
AS4_N=${AS4_N:-1000}
CONCURRENCY=${CONCURRENCY:-8}
SIZE=${SIZE:-10240}
WORKERS=${WORKERS:-4}
STORE=${STORE:-}
RECV_STORE=${RECV_STORE:-}
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
			echo "load-send.sh: -protocol must be as2, as4 or both" >&2
			exit 2
			;;
		esac
		shift 2
		;;
	*)
		echo "usage: scripts/load-send.sh [-protocol as2|as4|both] [-store URL]" >&2
		exit 2
		;;
	esac
done

mkdir -p bin
GATEWAY_BIN=${GATEWAY_BIN:-}
if [[ -z "$GATEWAY_BIN" ]]; then
	echo "building bin/gateway and bin/gateway-load" >&2
	go build -o bin/gateway ./cmd/gateway
	GATEWAY_BIN=bin/gateway
fi
go build -o bin/gateway-load ./cmd/gateway-load

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gateway-load-send.XXXXXX")
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ "${KEEP:-0}" == 1 ]]; then
		echo "kept $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

fixture=$PWD/testdata/fixture
STORE=${STORE:-sqlite:$tmp/send/gw.db}
RECV_STORE=${RECV_STORE:-sqlite:$tmp/recv/gw.db}
mkdir -p "$tmp/recv" "$tmp/send/partners"

# start NAME: serves $tmp/NAME/gateway.yaml and waits for /readyz; sets
# addr and admin from its "gateway listening" line.
start() {
	local name=$1 log="$tmp/$1/serve.log"
	"$GATEWAY_BIN" serve -config "$tmp/$name/gateway.yaml" 2>"$log" &
	pids+=($!)
	for _ in $(seq 1 300); do
		addr=$(sed -n 's/.*"msg":"gateway listening","addr":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
		admin=$(sed -n 's/.*"msg":"gateway listening".*"admin":"\([^"]*\)".*/\1/p' "$log" | head -n 1)
		if [[ -n "$addr" ]] && curl -fsS "http://$admin/readyz" >/dev/null 2>&1; then
			echo "$name gateway listening on $addr, admin $admin" >&2
			return 0
		fi
		sleep 0.1
	done
	echo "the $name gateway did not become ready in 30 s:" >&2
	cat "$log" >&2
	exit 1
}

# The receiving gateway: the fixture's (partner demo = DEMO).
cat >"$tmp/recv/gateway.yaml" <<EOF
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
store: "$RECV_STORE"
partners: $fixture/partners
identity:
  as2_id: GATEWAY
  party_id: urn:demo:gateway
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys: [{cert: $fixture/keys/gateway.pem, key: $fixture/keys/gateway.key}]
handler: {type: dir, inbox: $tmp/recv/inbox}
audit: {file: $tmp/recv/audit.jsonl}
spool_dir: $tmp/recv
shutdown_timeout: 10s
EOF
start recv
recv_addr=$addr recv_admin=$admin

# The sending gateway: the demo partner's identity, its partner the
# receiving gateway.
cp "$fixture/keys/gateway.pem" "$tmp/send/partners/gateway.pem"
cat >"$tmp/send/partners/gw.yaml" <<EOF
id: gw
as2:
  as2_id: GATEWAY
  certificates: [gateway.pem]
  send: {url: "http://$recv_addr/as2"}
as4:
  party_id: urn:demo:gateway
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  certificates: [gateway.pem]
  pmodes: [{id: inv, service: "urn:demo:invoicing", action: Deliver}]
  send: {url: "http://$recv_addr/as4", pmode: {id: inv}}
EOF
cat >"$tmp/send/gateway.yaml" <<EOF
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
store: "$STORE"
partners: $tmp/send/partners
identity:
  as2_id: DEMO
  party_id: urn:demo:partner
  party_type: urn:oasis:names:tc:ebcore:partyid-type:unregistered
  keys: [{cert: $fixture/partners/demo-partner.pem, key: $fixture/keys/demo-partner.key}]
handler: {type: dir, inbox: $tmp/send/inbox}
outbound: {workers: $WORKERS}
spool_dir: $tmp/send
shutdown_timeout: 10s
EOF
start send
send_admin=$admin

status=0
summaries=()
for proto in "${PROTOCOLS[@]}"; do
	n=$AS2_N
	[[ "$proto" == as4 ]] && n=$AS4_N
	line=$(bin/gateway-load -mode send -protocol "$proto" -submit-url "http://$send_admin" -partner gw \
		-metrics "http://$send_admin/metrics" -recv-metrics "http://$recv_admin/metrics" \
		-n "$n" -c "$CONCURRENCY" -size "$SIZE" -unb-sender DEMO -unb-recipient GATEWAY -timeout 30m) || status=1
	summaries+=("$line")
done
echo "the receiving gateway's inbox holds $(find "$tmp/recv/inbox" -type f ! -name '*.meta.json' | wc -l) payloads" >&2
echo "sending store: ${STORE%%\?*}; receiving store: ${RECV_STORE%%\?*}"
printf '%s\n' "${summaries[@]}"
exit $status
