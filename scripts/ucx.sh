#!/usr/bin/env bash
# ucx.sh: Debian's unmodified UCX (ucx-utils 1.13) on rdmafs through the
# drop-in libibverbs (rdmafs exec): ucx_info -d must list rdmafs0 with its
# rc_verbs and ud_verbs transports, then ucx_perftest server and client
# (two processes) run put, get, active-message, tag and atomic tests over
# UCX_TLS=rc_v (rc_verbs, its wireup on ud_verbs) and UCX_TLS=ud_v, at the
# UCP and at the UCT layer, and over UCX's own transport selection (no
# UCX variable: rdmafs exec's view); first on one mount, then across two mounts
# that speak RoCEv2 on two loopback addresses. Every run must exit 0 on
# both sides and print its result line; for comparison the same tests run
# over UCX's tcp and shared-memory transports, and perftest's ib_send_lat
# on rdmafs itself. TESTING.md ("UCX on rdmafs")
# says what each setting below is for. Needs root (FUSE, raw sockets).
#
#   scripts/ucx.sh [quick]    quick: fewer tests and iterations
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

quick=${1:-}
A_ADDR=${A_ADDR:-127.0.84.1}
B_ADDR=${B_ADDR:-127.0.84.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
command -v ucx_perftest >/dev/null || die "ucx_perftest is missing: apt-get install ucx-utils"
N=${UCX_ITERS:-2000}
[[ -n "$quick" ]] && N=500

# UCX lists an IB device only if "/dev/infiniband/" + its dev_name is a
# character device it may open: rdmafs exec gives each program its own
# /dev/infiniband/uverbsN (and /sys/class/infiniband), so nothing is made
# on the machine and no UCX_NET_DEVICES names the device.
unset $(compgen -e | grep -E '^UCX_') 2>/dev/null || true

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

# on MOUNT PROG ARGS: run an unmodified program on MOUNT's device.
on() {
	local mnt=$1
	shift
	"$RDMAFS" exec --mount "$mnt" -- "$@"
}

# Both ucx_perftest processes take UCX_* from the environment; each test
# sets its own. Warm-up is kept short: UCP's get over ud_v is slow.

for m in "$M" "$MA"; do
	show "$RDMAFS exec --mount $m -- ucx_info -d"
	on "$m" timeout 60 ucx_info -d >"$work/ucx_info.txt" 2>&1 || die "ucx_info -d failed"
	grep -q "Memory domain: rdmafs0" "$work/ucx_info.txt" || die "ucx_info -d does not list rdmafs0"
	for tl in rc_verbs ud_verbs; do
		grep -A1 "Transport: $tl" "$work/ucx_info.txt" | grep -q "Device: rdmafs0:1" ||
			die "ucx_info -d has no $tl on rdmafs0:1"
	done
done
echo "ucx_info -d: rdmafs0 with rc_verbs and ud_verbs, on the InfiniBand and the RoCE mount"

port=19600
# pair SERVER_MOUNT CLIENT_MOUNT PERFTEST_ARGS...: the server in the
# background, the client once the server listens; both must exit 0, and the
# client's result line is left in $result.
result=
pair() {
	local sm=$1 cm=$2
	shift 2
	port=$((port + 1))
	on "$sm" timeout 120 ucx_perftest -p $port >"$work/server.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		ss -ltn "sport = :$port" | grep -q LISTEN && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.05
	done
	local rc=0 src=0
	on "$cm" timeout 120 ucx_perftest 127.0.0.1 -p $port -w 200 -n $N -f "$@" >"$work/client.log" 2>&1 || rc=$?
	wait $spid || src=$?
	# (ucx_perftest prints "inf" for an average over an interval it timed
	# as zero: slow tests, UD's emulated GET, end with one)
	result=$(grep -E '^ +[0-9]+ +[0-9.]+ +([0-9.]+|inf) ' "$work/client.log" | tail -1 || true)
	if ((rc != 0 || src != 0)) || [[ -z "$result" ]]; then
		echo "--- client (exit $rc)"; tail -n 30 "$work/client.log"
		echo "--- server (exit $src)"; tail -n 30 "$work/server.log"
		die "ucx_perftest $* (UCX_TLS=${UCX_TLS:-default}) failed"
	fi
}

# run LABEL SERVER_MOUNT CLIENT_MOUNT ARGS...: one pair, one line: the
# test, then ucx_perftest's columns (iterations; 50th percentile, average,
# overall latency in us; average and overall MB/s; average and overall
# messages/s).
run() {
	local label=$1 sm=$2 cm=$3
	shift 3
	pair "$sm" "$cm" "$@"
	printf '%-9s %-30s %s\n' "$label" "$*" "$(tr -s ' ' <<<"$result")"
}

# The UCP tests: sizes 8 B (latency, rate) and 64 KiB (bandwidth; past
# UCX's rendezvous threshold, so tag and am go zero-copy).
ucp_tests=(
	"-t ucp_put_lat" "-t ucp_put_bw -s 65536" "-t ucp_get -s 65536"
	"-t tag_lat" "-t tag_bw -s 65536" "-t ucp_am_lat" "-t ucp_am_bw -s 65536"
)
[[ -n "$quick" ]] && ucp_tests=("-t ucp_put_lat" "-t ucp_get -s 65536" "-t tag_lat" "-t tag_bw -s 65536")

suite() { # SERVER_MOUNT CLIENT_MOUNT
	local sm=$1 cm=$2 t
	for t in "${ucp_tests[@]}" "-t ucp_fadd"; do
		UCX_TLS=rc_v run rc_v "$sm" "$cm" $t
	done
	# UCT, the transport alone (zero-copy put/get, bcopy AM, atomics)
	for t in "-t put_lat" "-t put_bw -s 65536 -D zcopy" "-t get -s 65536 -D zcopy" \
		"-t am_lat" "-t am_bw -s 4096 -D bcopy" "-t add_lat"; do
		[[ -n "$quick" && $t != "-t put_lat" && $t != "-t am_lat" ]] && continue
		run uct "$sm" "$cm" -x rc_verbs -d rdmafs0:1 $t
	done
	for t in "${ucp_tests[@]}"; do
		UCX_TLS=ud_v run ud_v "$sm" "$cm" $t
	done
	# UD datagrams hold one MTU (4096) less UCT's 8-byte header.
	for t in "-t am_lat" "-t am_bw -s 4000 -D bcopy"; do
		run uct-ud "$sm" "$cm" -x ud_verbs -d rdmafs0:1 $t
	done
}

echo
echo "== one mount: server and client on $M (InfiniBand port)"
suite "$M" "$M"

# UCX's own choice of transports and devices (no variable at all), and its
# own allocators, which put ucx_perftest's buffers in SysV and
# POSIX shared memory (registered as they are: libibverbs/mem.c). UCX
# uses shared memory for small tag messages and rc_verbs for RMA and
# rendezvous; the check is that rc_verbs is in the endpoint's lanes.
for t in "-t ucp_put_bw -s 65536" "-t tag_bw -s 65536"; do
	UCX_LOG_LEVEL=info run default "$M" "$M" $t
	grep -q "ep_cfg.*rc_verbs/rdmafs0:1" "$work/client.log" || die "UCX's own selection did not use rc_verbs"
done

echo
echo "== for comparison, the same machine and moment: UCX over tcp (lo) and shared memory"
for t in "-t tag_lat" "-t ucp_put_bw -s 65536" "-t tag_bw -s 65536"; do
	UCX_TLS=tcp UCX_NET_DEVICES=lo run tcp "$M" "$M" $t
	UCX_TLS=posix,sysv,cma,self UCX_NET_DEVICES=all run shm "$M" "$M" $t
done

# and the device's own latency at this moment, for scale: perftest's
# ib_send_lat on the same mount (a SEND ping-pong, as tag_lat is)
port=$((port + 1))
on "$M" timeout 120 ib_send_lat -d rdmafs0 -n $N -p $port >"$work/server.log" 2>&1 &
spid=$!
for _ in $(seq 200); do
	ss -ltn "sport = :$port" | grep -q LISTEN && break
	sleep 0.05
done
on "$M" timeout 120 ib_send_lat -d rdmafs0 -n $N -p $port localhost >"$work/client.log" 2>&1 ||
	die "ib_send_lat failed: $(tail -n 5 "$work/client.log")"
wait $spid || die "ib_send_lat's server failed: $(tail -n 5 "$work/server.log")"
line=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$work/client.log" | tail -1) || die "ib_send_lat printed no result"
printf '%-9s %-30s %s\n' perftest "ib_send_lat (B iters min max typical avg ...)" "$(tr -s ' \t' ' ' <<<"$line")"

echo
echo "== two mounts over RoCEv2: server on $A_ADDR, client on $B_ADDR"
# UCX 1.13 takes a UD receive's IP version from wc.sl as mlx5 reports it;
# rxe, irdma and rdmafs leave it 0, so UCX compares a 16-byte GID where
# RoCEv2 over IPv4 puts 4 bytes and drops every datagram (UD wireup times
# out). UCX checks no destination GID with this (later UCX reads the
# version from the GRH instead: openucx/ucx#10209).
export UCX_UD_ETH_DGID_CHECK=n
suite "$MA" "$MB"

echo
echo "ucx: every ucx_perftest pair ran and printed its result"
