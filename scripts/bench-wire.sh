#!/usr/bin/env bash
# bench-wire.sh: rdmafs between two devices over RoCEv2 (UDP 4791 through
# the kernel, here on two loopback addresses) against UCX over TCP on the
# same loopback, in one go.
#
# Builds rdmafs, mounts two devices with --addr A_ADDR and --addr B_ADDR,
# installs UCX's ucx_perftest (Debian package ucx-utils) if it is missing,
# then runs ROUNDS rounds, each alternating
#   - rdmafs bench --peer (requesters on device a, partners on device b):
#     WRITE bw 64 KiB, READ bw 64 KiB, SEND lat 8 B, WRITE bw 8 B,
#   - ucx_perftest with UCX_TLS=tcp (server and client on 127.0.0.1):
#     ucp_put_bw 64 KiB, ucp_get 64 KiB, tag_lat 8 B, ucp_put_bw 8 B,
# and prints the medians and the ratios rdmafs/UCX, the packets per second
# and the daemons' CPU of each rdmafs run, the floor (an 8-byte UDP
# ping-pong over lo) and each daemon's CPU over IDLE seconds (default 10)
# of a quiet link. Then it profiles both daemons
# (perf, when it is there) during a WRITE bw 64 KiB run and counts their
# system calls per packet.
#
#   sudo scripts/bench-wire.sh              # ROUNDS=5 DUR=2: under 3 minutes
#   ROUNDS=3 DUR=1 sudo scripts/bench-wire.sh
#
# tag_lat is the latency peer of SEND lat: a two-sided message into a
# receive posted beforehand, ping-pong, half the round trip, as ib_send_lat
# (ucp_am_lat hands the message to a callback, with no receive posted).
# 8 B, not perftest's default 2 B, because that is UCX's smallest default.
# Results and raw outputs stay in $KEEP if set (a directory).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DUR=${DUR:-2}
A_ADDR=${A_ADDR:-127.0.78.1}
B_ADDR=${B_ADDR:-127.0.78.2}
UCX_PORT=${UCX_PORT:-13458}
UCX_TLS_LIST=${UCX_TLS_LIST:-tcp}
UCX_TIMEOUT=${UCX_TIMEOUT:-20}
# ucx_perftest iterations (a second or two each over TCP on a 2-core Xeon).
UCX_N_PUT64K=${UCX_N_PUT64K:-8000}
UCX_N_GET64K=${UCX_N_GET64K:-1000}
UCX_N_LAT=${UCX_N_LAT:-30000}
UCX_N_PUT8=${UCX_N_PUT8:-400000}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
source "$here/bench-lib.sh"
work=$(mktemp -d /tmp/rdmafs-bench-wire.XXXXXX)
MA=$work/mnt-a
MB=$work/mnt-b
mkdir -p "$MA" "$MB"
results=$work/results.tsv
: >"$results"
ucx_srv=""
mounted=()

cleanup() {
	local rc=$? m
	for m in "${mounted[@]}"; do
		"$RDMAFS" umount "$m" 2>/dev/null || true
	done
	if ((rc != 0)); then
		for m in a b; do
			[[ -s "$work/daemon-$m.log" ]] || continue
			echo "--- daemon $m log" >&2
			tail -n 20 "$work/daemon-$m.log" >&2
		done
	fi
	bench_teardown
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the machine, the tools -------------------------------------------------

tools_and_machine

# mount_at NAME ADDR MOUNTPOINT: a daemon on the wire; prints its pid.
mount_at() {
	local id pid
	"$RDMAFS" mount --log "$work/daemon-$1.log" --addr "$2" "$3" >/dev/null
	mounted+=("$3")
	id=$(printf '%s' "$3" | sed 's:^/*::; s:/*$::; s:/:_:g')
	pid=$(head -n 1 "/run/rdmafs/$id.pid")
	kill -0 "$pid" || die "no daemon pid for $3"
	echo "  daemon $1: pid $pid on $2 ($(grep -E '^(gid|active_mtu)=' "$3/port" | tr '\n' ' '))" >&2
	PID_OUT=$pid
}
mount_at a "$A_ADDR" "$MA"
DPID_A=$PID_OUT
mount_at b "$B_ADDR" "$MB"
DPID_B=$PID_OUT
DPID="$DPID_A $DPID_B"

# --- measurements -------------------------------------------------------------

# rw ROUND NAME KEY ARGS...: rb across the wire, plus what the run cost:
# wire packets per second (device a's, sent and received), each daemon's
# and the bench's CPU as a share of a core, retransmissions.
rw() {
	local round=$1 name=$2 o size=0 prev="" a
	for a in "$@"; do
		[[ $prev == -s ]] && size=$a
		prev=$a
	done
	rb "$@" --peer "$MB" "$MA"
	o=$RB_OUT
	awk -v p="$(jnum wire_packets <<<"$o")" -v s="$(jnum seconds <<<"$o")" -v a="$(jnum daemon_cpu_s <<<"$o")" \
		-v b="$(jnum peer_daemon_cpu_s <<<"$o")" -v u="$(jnum cpu_user_s <<<"$o")" -v y="$(jnum cpu_sys_s <<<"$o")" \
		-v r="$(jnum retransmits <<<"$o")" -v n="$(jnum wrs <<<"$o")" -v rd="$round" -v k="$name" -v sz="$size" 'BEGIN {
		if (sz >= 65536) printf "%s\t%s.cpu_per_gb\t%.3f\n", rd, k, (a + b + u + y) / (n * sz / 1e9)
		printf "%s\t%s.kpps\t%.3f\n", rd, k, p / s / 1e3
		printf "%s\t%s.pkts_per_wr\t%.3f\n", rd, k, p / (n > 0 ? n : 1)
		printf "%s\t%s.cpu_a\t%.0f\n", rd, k, 100 * a / s
		printf "%s\t%s.cpu_b\t%.0f\n", rd, k, 100 * b / s
		printf "%s\t%s.cpu_bench\t%.0f\n", rd, k, 100 * (u + y) / s
		printf "%s\t%s.retransmits\t%d\n", rd, k, r }' >>"$results"
}

echo
echo "# $ROUNDS rounds, alternating; rdmafs runs take ${DUR}s each, ucx_perftest UCX_TLS=$UCX_TLS_LIST"
for r in $(seq 1 "$ROUNDS"); do
	others_mark
	printf '  round %d (CPUs %s busy before it) ' "$r" "$(busy)"
	rw "$r" rdmafs_write_bw_64k bw_avg_mbs --op write -s 65536 -D "${DUR}s"
	ru "$r" ucx_put_bw_64k 6 ucp_put_bw 65536 "$UCX_N_PUT64K"
	printf '.'
	rw "$r" rdmafs_read_bw_64k bw_avg_mbs --op read -s 65536 -D "${DUR}s"
	ru "$r" ucx_get_64k 6 ucp_get 65536 "$UCX_N_GET64K"
	printf '.'
	rw "$r" rdmafs_send_lat_8 t_typical_us --op send --mode lat -s 8 -D "${DUR}s"
	ru "$r" ucx_tag_lat_8 2 tag_lat 8 "$UCX_N_LAT"
	printf '.'
	rw "$r" rdmafs_write_bw_8 msg_rate_mpps --op write -s 8 -D "${DUR}s"
	ru "$r" ucx_put_bw_8 8 ucp_put_bw 8 "$UCX_N_PUT8"
	others_since
	echo ". done; other processes used $OTHERS of the CPUs meanwhile"
done

echo
echo "# medians over $ROUNDS rounds (min..max in brackets); MB = 2^20 bytes; lat is one way"
printf '  %-34s %14s %24s\n' "measurement" "median" "range"
for k in rdmafs_write_bw_64k ucx_put_bw_64k rdmafs_read_bw_64k ucx_get_64k rdmafs_send_lat_8 ucx_tag_lat_8 \
	rdmafs_write_bw_8 ucx_put_bw_8; do
	case $k in
	*_64k) unit="MB/s" ;;
	*lat*) unit="us" ;;
	*) unit="Mpps" ;;
	esac
	printf '  %-34s %14.3f %24s\n' "$k [$unit]" "$(median "$k")" "[$(range "$k")]"
done

echo
echo "# ratios rdmafs/UCX (median of the per-round ratios, [min..max]; for latency lower is better)"
printf '  %-48s %8s %18s %10s %8s\n' "ratio" "median" "range" "target" "result"
# The targets of issue 11.
row "WRITE 64K bw / ucp_put_bw 64K" rdmafs_write_bw_64k ucx_put_bw_64k ">=" 1.0
row "READ 64K bw / ucp_get 64K" rdmafs_read_bw_64k ucx_get_64k ">=" 1.0
row "SEND 8B t_typical / tag_lat 8B (50%)" rdmafs_send_lat_8 ucx_tag_lat_8 "<=" 1.5
row "WRITE 8B msg rate / ucp_put_bw 8B" rdmafs_write_bw_8 ucx_put_bw_8 ">=" 1.0
echo "  and in absolute terms (target >= 1 GB/s = 953.7 MB/s, above published Soft-RoCE):"
for k in rdmafs_write_bw_64k rdmafs_read_bw_64k; do
	awk -v k="$k" -v m="$(median "$k")" 'BEGIN { printf "    %-30s %10.1f MB/s = %5.2f GB/s  %s\n", k, m, m * 1048576 / 1e9, (m * 1048576 >= 1e9 ? "met" : "MISSED") }'
done

echo
echo "# what each rdmafs run cost (medians): wire packets of device a per second (sent+received)"
echo "# and per WR, CPU as % of one core of daemon a (requester), daemon b (responder), the bench,"
echo "# doorbells both devices counted per WR"
printf '  %-22s %10s %10s %8s %8s %8s %12s %10s\n' "run" "kpps" "pkts/WR" "cpu a" "cpu b" "bench" "retransmits" "bells/WR"
for k in rdmafs_write_bw_64k rdmafs_read_bw_64k rdmafs_send_lat_8 rdmafs_write_bw_8; do
	printf '  %-22s %10s %10s %7s%% %7s%% %7s%% %12s %10s\n' "$k" "$(median "$k.kpps")" "$(median "$k.pkts_per_wr")" \
		"$(median "$k.cpu_a")" "$(median "$k.cpu_b")" "$(median "$k.cpu_bench")" "$(median "$k.retransmits")" \
		"$(median "$k.doorbells_per_wr")"
done

echo
echo "# CPU seconds per GB (1e9 bytes) moved (medians): rdmafs both daemons and the bench, UCX both"
echo "# ucx_perftest processes (a server that waited for its client included)"
printf '  %-22s %10s %10s\n' "run" "rdmafs" "UCX"
printf '  %-22s %10s %10s\n' "WRITE / put 64 KiB" "$(median rdmafs_write_bw_64k.cpu_per_gb)" "$(median ucx_put_bw_64k.cpu_per_gb)"
printf '  %-22s %10s %10s\n' "READ / get 64 KiB" "$(median rdmafs_read_bw_64k.cpu_per_gb)" "$(median ucx_get_64k.cpu_per_gb)"

# --- the floor and the idle link ---------------------------------------------

# The kernel's UDP loopback round trip on this host, now: the floor under
# SEND 8 B latency (two threads blocked in recvfrom, as the wire's receive
# goroutine sleeps; link.BenchmarkUDPPingPong8).
echo
echo "# the floor: an 8-byte UDP ping-pong over lo (go test -bench UDPPingPong8 ./link/), one way"
floor=$(cd "$repo" && go test -run '^$' -bench UDPPingPong8 -benchtime 20000x ./link/ 2>/dev/null |
	awk '/^BenchmarkUDPPingPong8/ { printf "%.3f", $3 / 2000 }')
printf '  %-34s %14s\n' "udp_pingpong_8 one way [us]" "${floor:-n/a}"
if [[ -n "$floor" ]]; then
	awk -v r="$(median rdmafs_send_lat_8)" -v f="$floor" 'BEGIN { printf "  rdmafs SEND 8 B latency is %.1fx the floor (%.1f us above it)\n", r / f, r - f }'
fi

# Each daemon's CPU while the link is quiet (utime+stime from
# /proc/PID/stat over IDLE seconds, after the runs): a quiet link must cost
# nothing.
IDLE=${IDLE:-10}
echo
echo "# the daemons idle for ${IDLE}s (CPU as % of one core, from /proc/PID/stat)"
hz=$(getconf CLK_TCK)
for p in "$DPID_A" "$DPID_B"; do
	t0=$(DPID=$p daemon_ticks)
	eval "t0_$p=$t0"
done
sleep "$IDLE"
for p in "$DPID_A" "$DPID_B"; do
	t1=$(DPID=$p daemon_ticks)
	eval "t0=\$t0_$p"
	awk -v p="$p" -v d="$((t1 - t0))" -v hz="$hz" -v s="$IDLE" \
		'BEGIN { printf "  daemon pid %-8s %5d ticks in %ds = %.2f%% of a core\n", p, d, s, 100 * d / hz / s }'
done

# --- where the daemons' time goes ---------------------------------------------

if command -v perf >/dev/null 2>&1 && perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
	echo
	echo "# the daemons during WRITE bw 64 KiB (${DUR}s): system calls per wire packet, then a profile"
	# Counted (perf stat: no events lost, little slow-down) in one run and
	# sampled in another, so the profiler's cost does not inflate the counts.
	ev=raw_syscalls:sys_enter
	for c in sendto recvfrom sendmmsg recvmmsg futex nanosleep read epoll_pwait; do ev+=,syscalls:sys_enter_$c; done
	perf stat -x, -e "$ev" -o "$work/perf-stat.txt" -p "$DPID_A,$DPID_B" sleep "$((DUR + 1))" >/dev/null 2>&1 &
	ps_=$!
	sleep 0.3
	"$RDMAFS" bench --json --warmup 0 --peer "$MB" --op write -s 65536 -D "${DUR}s" "$MA" >"$work/perf-bench.txt"
	wait "$ps_" || true
	awk -F, -v p="$(jnum wire_packets <"$work/perf-bench.txt")" '$3 ~ /sys_enter/ {
		n = $3; sub(/.*sys_enter_?/, "", n); if (n == "") n = "all"
		printf "  %-10s %9d calls = %6.3f per wire packet (%d packets, sent+received by device a)\n", n, $1, $1 / (p > 0 ? p : 1), p }' "$work/perf-stat.txt"
	# The hand-overs of a round trip: the same counters during SEND lat
	# 8 B, per round trip (two WRs), both daemons together.
	echo "  during SEND lat 8 B (${DUR}s), per round trip, both daemons:"
	perf stat -x, -e "$ev,context-switches" -o "$work/perf-stat-lat.txt" -p "$DPID_A,$DPID_B" sleep "$((DUR + 1))" >/dev/null 2>&1 &
	ps_=$!
	sleep 0.3
	"$RDMAFS" bench --json --warmup 0 --peer "$MB" --op send --mode lat -s 8 -D "${DUR}s" "$MA" >"$work/perf-bench-lat.txt"
	wait "$ps_" || true
	awk -F, -v w="$(jnum wrs <"$work/perf-bench-lat.txt")" '$3 ~ /sys_enter|context-switches/ {
		n = $3; sub(/.*sys_enter_?/, "", n); if (n == "") n = "all"
		printf "  %-16s %9d = %6.3f per round trip (%d round trips)\n", n, $1, $1 / (w > 0 ? w / 2 : 1), w / 2 }' "$work/perf-stat-lat.txt"
	perf record -q -F 999 -g -o "$work/perf.data" -p "$DPID_A,$DPID_B" -- sleep "$((DUR + 1))" >/dev/null 2>&1 &
	pr_=$!
	sleep 0.3
	"$RDMAFS" bench --json --warmup 0 --peer "$MB" --op write -s 65536 -D "${DUR}s" "$MA" >/dev/null
	wait "$pr_" || true
	# To a file first: head closing a pipe from perf would end the script
	# (pipefail).
	perf report -i "$work/perf.data" --no-children --sort symbol --stdio 2>/dev/null |
		grep -E '^ +[0-9.]+%' | sed 's/ *- *- *$//' >"$work/perf-report.txt" || true
	echo "  the daemons' top functions (self time, both daemons):"
	sed -n '1,18s/^/    /p' "$work/perf-report.txt"
	echo "  by area (self time): ICRC (crc32), kernel (system calls, network stack, scheduler), Go runtime, rest:"
	awk '{ p = $1; sub("%", "", p); s = $0
			if (s ~ /crc32|ieeeCLMUL|castagnoli|[Cc]rc/) c += p
			else if (s ~ /\[k\]/) k += p
			else if (s ~ /runtime\./) r += p
			else o += p }
		END { printf "    crc %.1f%%  kernel %.1f%%  runtime %.1f%%  other %.1f%%\n", c, k, r, o }' "$work/perf-report.txt"
fi
echo
echo "  CPUs busy at the end: $(busy)"
