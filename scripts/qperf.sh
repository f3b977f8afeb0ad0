#!/usr/bin/env bash
# qperf.sh: Debian's unmodified qperf 0.4.11 on rdmafs through rdmafs exec
# (the drop-in libibverbs and librdmacm): rc_bw, rc_lat, rc_rdma_write_bw,
# rc_rdma_read_bw, rc_compare_swap_mr, uc_bw, ud_lat and ud_bw, server
# and client on one local mount with and without -cm1 (connections by
# rdma_cm; qperf's server binds 0.0.0.0 port 0, reads its port with
# rdma_get_src_port before rdma_listen and sends it to the client, so the
# port must be chosen at the bind, as the kernel's rdma_cm does), then the
# RC tests with -cm1 across two --addr mounts that speak RoCEv2. qperf uses
# rdma_cm for RC only (it sets -cm1 aside for UC and UD with "set but not
# used"); without it it exchanges LIDs and builds AHs without a GRH, which a
# RoCE port refuses (rxe, mlx5 and rdmafs alike), so uc_bw, ud_lat and ud_bw
# run only on the InfiniBand-style local mount. Every run is under timeout;
# the client must exit 0 and print its result, and the server must report
# no error. Needs root (FUSE, raw sockets) and scripts/setup.sh's packages.
#
#   scripts/qperf.sh
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

command -v qperf >/dev/null || die "qperf is missing: apt-get install qperf"
A_ADDR=${A_ADDR:-127.0.88.1}
B_ADDR=${B_ADDR:-127.0.88.2}
PORT=${PORT:-19871}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
tests=(rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw rc_compare_swap_mr uc_bw ud_lat ud_bw)
rc_tests=(rc_bw rc_lat rc_rdma_write_bw rc_rdma_read_bw rc_compare_swap_mr)

# a directory with both libraries whatever binary RDMAFS is
mkdir -p "$work/lib"
ln -sf "$(cd "$RDMAFS_LIBDIR" && pwd)/libibverbs.so.1" "$work/lib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
export RDMAFS_LIBDIR=$work/lib

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
spid=
stop_server() {
	[[ -n $spid ]] || return 0
	kill -TERM "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	spid=
}
at_exit 'stop_server; "$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

# server MOUNT: a qperf server on MOUNT's device, listening on PORT (TCP,
# its own control connection), until stop_server
server() {
	stop_server
	"$RDMAFS" exec --mount "$1" -- timeout 600 qperf -lp "$PORT" >"$work/server.log" 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . && return 0
		sleep 0.05
	done
	cat "$work/server.log"
	die "the qperf server did not listen on port $PORT"
}

# client MOUNT HOST TEST [FLAGS]: one test, checked
client() {
	local mnt=$1 host=$2 t=$3 rc=0
	shift 3
	printf '%-20s %-5s ' "$t" "$*"
	timeout 60 "$RDMAFS" exec --mount "$mnt" -- qperf -lp "$PORT" "$@" -t 1 "$host" "$t" >"$work/client.log" 2>&1 || rc=$?
	# qperf warns of -cm1 on UC and UD, where it uses none; anywhere
	# else a warning is a failure
	local warn='warning'
	[[ $t == rc_* ]] || warn='warning: (?!-cm1 set but not used)'
	if ((rc != 0)) || ! grep -qE '^ +(bw|send_bw|latency|msg_rate) += +[0-9.]+ ' "$work/client.log" ||
		grep -qiP "fail|error|$warn" "$work/client.log"; then
		echo
		cat "$work/client.log"
		echo "--- server"
		cat "$work/server.log"
		die "qperf $* $t: exit $rc"
	fi
	grep -E '=|warning' "$work/client.log" | sed 's/^[a-z_]*: //' | tr -s ' ' | tr '\n' ' '
	echo
	if grep -qiE 'fail|error' "$work/server.log"; then
		cat "$work/server.log"
		die "qperf $* $t: the server reported an error"
	fi
}

echo "== one local mount (InfiniBand link layer), 127.0.0.1, without rdma_cm"
server "$M"
for t in "${tests[@]}"; do client "$M" 127.0.0.1 "$t"; done
echo "== the same with -cm1 (RC through rdma_cm; UC and UD as before, qperf says)"
for t in "${tests[@]}"; do client "$M" 127.0.0.1 "$t" -cm1; done
echo "== across two --addr mounts over RoCEv2 ($B_ADDR -> $A_ADDR), -cm1"
server "$MA"
for t in "${rc_tests[@]}"; do client "$MB" "$A_ADDR" "$t" -cm1; done
stop_server
grep -qE '^wire_packets_sent=[1-9]' "$MB/counters" || die "nothing went over the wire"
echo "qperf: all checks passed"
