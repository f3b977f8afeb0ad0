#!/usr/bin/env bash
# bench-c.sh: the C path against the Go path, in one run on one mount.
# perftest (Debian's binaries, unmodified, on the drop-in libibverbs) beside
# `rdmafs bench` (the Go library) with the same operation, size, depth and
# CQ moderation (perftest's defaults: tx depth 128, CQ moderation 100 for
# WRITE and 1 for READ, 128 outstanding READs), alternating, ROUNDS rounds each; then the system calls per
# work request of the C path in steady state (perf's syscall tracepoint on
# the perftest client: a long run minus a short one, over the extra WRs).
# By hand (BENCHMARKS.md); not part of the tests.
#
#   scripts/bench-c.sh [ROUNDS]
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"
rounds=${1:-3}
pp "$RDMAFS" mount --log "$work/daemon.log" "$M"

port=19500
# perftest PROG ARGS: client and server on the mount; prints the client's
# result line.
perftest() {
	local prog=$1
	shift
	port=$((port + 1))
	"$RDMAFS" exec --mount "$M" -- $prog -d rdmafs0 -p $port "$@" >"$work/srv.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		ss -ltn "sport = :$port" | grep -q LISTEN && break
		sleep 0.05
	done
	"$RDMAFS" exec --mount "$M" -- $prog -d rdmafs0 -p $port "$@" localhost >"$work/cli.log" 2>&1
	wait $spid || true
	grep -E '^ +[0-9]+ +[0-9]+ ' "$work/cli.log" | tail -1
}

# case NAME PERFTEST_ARGS -- BENCH_ARGS: ROUNDS rounds of each.
declare -a rows
bench_case() {
	local name=$1 pt=$2 gb=$3 kind=$4
	local c=() g=()
	for r in $(seq "$rounds"); do
		local line
		line=$(perftest $pt)
		if [[ $kind == bw ]]; then
			# BW average MB/s (field 4), Mpps (field 5)
			c+=("$(awk '{printf "%.1f %.3f", $4, $5}' <<<"$line")")
		else
			# t_typical us (field 5)
			c+=("$(awk '{printf "%.2f", $5}' <<<"$line")")
		fi
		line=$("$RDMAFS" bench --json $gb "$M" | tail -1)
		if [[ $kind == bw ]]; then
			g+=("$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("%.1f %.3f" % (j["bw_avg_mbs"], j["msg_rate_mpps"]))' "$line")")
		else
			g+=("$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("%.2f" % j["t_typical_us"])' "$line")")
		fi
	done
	printf '%-22s C (perftest): %s\n%-22s Go (rdmafs bench): %s\n' "$name" "${c[*]}" "" "${g[*]}"
}

echo
echo "== $rounds rounds each, alternating; bw: MB/s Mpps per round; lat: t_typical us per round"
bench_case "WRITE bw 8 B" "ib_write_bw -s 8 -n 200000" "--op write -s 8 -n 200000 -Q 100" bw
bench_case "WRITE bw 64 KiB" "ib_write_bw -s 65536 -n 20000" "--op write -s 65536 -n 20000 -Q 100" bw
bench_case "READ bw 64 KiB" "ib_read_bw -s 65536 -n 20000" "--op read -s 65536 -n 20000 -Q 1" bw
bench_case "WRITE lat 2 B" "ib_write_lat -s 2 -n 20000" "--op write --mode lat -s 2 -n 20000" lat

echo
echo "== system calls of the perftest client per WR in steady state (ib_write_bw -s 8)"
if perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
	calls() { # ITERS -> syscalls of the client
		port=$((port + 1))
		"$RDMAFS" exec --mount "$M" -- ib_write_bw -d rdmafs0 -p $port -s 8 -n "$1" >/dev/null 2>&1 &
		local spid=$!
		for _ in $(seq 200); do
			ss -ltn "sport = :$port" | grep -q LISTEN && break
			sleep 0.05
		done
		perf stat -x, -e raw_syscalls:sys_enter -o "$work/perf.txt" \
			"$RDMAFS" exec --mount "$M" -- ib_write_bw -d rdmafs0 -p $port -s 8 -n "$1" localhost >/dev/null 2>&1
		wait $spid || true
		grep raw_syscalls "$work/perf.txt" | cut -d, -f1
	}
	short=$(calls 10000)
	long=$(calls 1010000)
	awk -v s="$short" -v l="$long" 'BEGIN { printf "  10,000 WRs: %d calls; 1,010,000 WRs: %d calls; %.6f calls per extra WR\n", s, l, (l - s) / 1000000 }'
else
	echo "  perf's syscall tracepoint is not available here"
fi
