#!/usr/bin/env bash
# verbs-tools.sh: Debian's own RDMA programs, unmodified, on rdmafs through
# the drop-in libibverbs (rdmafs exec): ibv_devices, ibv_devinfo, the four
# ibv_*_pingpong programs (with and without -e, at several sizes),
# ibv_xsrq_pingpong (XRC: one server and three client processes whose
# XRC_RECV QPs share one XRC domain, each message landing in the SRQ its
# sender names, through another client's QP) and the
# perftest tools, first with client and server on one mount, then across
# two mounts that speak RoCEv2 on two loopback addresses (-g 0, the
# ::ffff:IPv4 GID). Every run must exit 0 on both sides and print its
# result line. Needs root (FUSE, raw sockets) and the packages of .ci/run.
#
#   scripts/verbs-tools.sh [quick]    quick: fewer sizes and iterations
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

quick=${1:-}
A_ADDR=${A_ADDR:-127.0.78.1}
B_ADDR=${B_ADDR:-127.0.78.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
for t in ibv_devinfo ibv_rc_pingpong ib_write_bw; do
	command -v $t >/dev/null || die "$t is missing: apt-get install ibverbs-utils perftest"
done

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

show "$RDMAFS exec --mount $M -- ibv_devices"
on "$M" ibv_devices | grep -q rdmafs0 || die "ibv_devices does not list rdmafs0"
on "$M" ibv_devinfo -v >"$work/devinfo.txt" || die "ibv_devinfo -v failed"
for want in "hca_id:	rdmafs0" "PORT_ACTIVE" "link_layer:		InfiniBand" "GID\[  0\]:"; do
	grep -q "$want" "$work/devinfo.txt" || die "ibv_devinfo -v lacks '$want'"
done
# Read whole, then matched: grep -q on a pipe can end ibv_devinfo's later
# writes with SIGPIPE, which pipefail takes for a failure.
on "$MA" ibv_devinfo -v >"$work/devinfo-a.txt" || die "ibv_devinfo -v failed on $MA"
grep -q "link_layer:		Ethernet" "$work/devinfo-a.txt" || die "a mount with --addr is not Ethernet"
grep -q "::ffff:$A_ADDR" "$work/devinfo-a.txt" || die "the RoCEv2 GID is missing"
echo "ibv_devices, ibv_devinfo -v: ok"

port=19000
# pair SERVER_MOUNT CLIENT_MOUNT PROG ARGS...: server in the background, the
# client once the server listens; both must succeed. perftest measures the
# CPU's clock rate before it reports, and gives up ("Correlation
# coefficient r^2 ... < 0.9", "Can't produce a report") when the machine
# is too busy for a straight line; that one failure, which says nothing of
# the device or the data, is retried once.
pair() {
	pair_once "$@" && return
	grep -q "Can't produce a report" "$work/client.log" "$work/server.log" 2>/dev/null || die "$3 failed"
	echo "($3: perftest could not measure the CPU clock on a busy machine; once more)"
	pair_once "$@" || die "$3 failed"
}

pair_once() {
	local sm=$1 cm=$2
	shift 2
	port=$((port + 1))
	on "$sm" timeout 120 "$@" -p $port >"$work/server.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		ss -ltn "sport = :$port" | grep -q LISTEN && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.05
	done
	local rc=0
	on "$cm" timeout 120 "$@" -p $port localhost >"$work/client.log" 2>&1 || rc=$?
	local src=0
	wait $spid || src=$?
	if ((rc != 0 || src != 0)); then
		echo "--- client (exit $rc)"; cat "$work/client.log"
		echo "--- server (exit $src)"; cat "$work/server.log"
		return 1
	fi
}

pingpongs() { # SERVER_MOUNT CLIENT_MOUNT EXTRA...
	local sm=$1 cm=$2
	shift 2
	local sizes="4096 1 65536" iters=200
	[[ -n "$quick" ]] && sizes=4096 iters=50
	for prog in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong; do
		for ev in "" -e; do
			for s in $sizes; do
				# UD messages fit one MTU minus the GRH
				[[ $prog == ibv_ud_pingpong && $s -gt 2048 ]] && s=2048
				[[ $prog == ibv_ud_pingpong && $s == 4096 ]] && s=1024
				pair "$sm" "$cm" $prog -d rdmafs0 -s $s -n $iters $ev "$@"
				grep -q "iters in" "$work/client.log" || die "$prog printed no result"
				printf '%-18s %-3s %6s B: %s\n' $prog "$ev" $s "$(grep 'usec/iter' "$work/client.log")"
			done
		done
	done
}

# xsrq SERVER_MOUNT CLIENT_MOUNT EXTRA...: ibv_xsrq_pingpong, a server for
# three clients (-c 3) and three client processes, polling and with -e.
# The server sends to each client round robin through the send QPs of all
# of them: only a domain the clients share (the file /tmp/xrc_domain the
# program opens, one XRC domain per device) delivers that. Every process
# must print "success".
xsrq() {
	local sm=$1 cm=$2
	shift 2
	local n=100
	[[ -n "$quick" ]] && n=20
	for ev in "" -e; do
		port=$((port + 1))
		on "$sm" timeout 120 ibv_xsrq_pingpong -d rdmafs0 -p $port -c 3 -n $n $ev "$@" >"$work/server.log" 2>&1 &
		local spid=$! pids=() rc=0
		for _ in $(seq 200); do
			ss -ltn "sport = :$port" | grep -q LISTEN && break
			sleep 0.05
		done
		for i in 1 2 3; do
			on "$cm" timeout 120 ibv_xsrq_pingpong -d rdmafs0 -p $port -n $n $ev "$@" localhost \
				>"$work/client$i.log" 2>&1 &
			pids+=($!)
		done
		for p in "${pids[@]}" $spid; do
			wait $p || rc=1
		done
		for l in server client1 client2 client3; do
			if ((rc != 0)) || ! grep -qx success "$work/$l.log"; then
				echo "--- $l"; cat "$work/$l.log"
				die "ibv_xsrq_pingpong $ev $*: $l failed"
			fi
		done
		printf '%-18s %-3s 3 clients x %d messages: success\n' ibv_xsrq_pingpong "$ev" $n
	done
}

perftests() { # SERVER_MOUNT CLIENT_MOUNT EXTRA...
	local sm=$1 cm=$2
	shift 2
	for prog in ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat ib_atomic_bw ib_atomic_lat; do
		# -a: every size from 2 B to 8 MiB (atomics have one size), with
		# 50 iterations a size to keep CI's time
		for flags in "" "-a -n ${AITERS:-50}"; do
			[[ -n "$quick" && -n "$flags" ]] && continue
			[[ $prog == ib_atomic_* && -n "$flags" ]] && continue
			pair "$sm" "$cm" $prog -d rdmafs0 $flags "$@"
			grep -qE '^ +[0-9]+ +[0-9]+ ' "$work/client.log" || die "$prog $flags printed no result"
			printf '%-14s %-3s %s\n' $prog "$flags" "$(grep -E '^ +[0-9]+ +[0-9]+ ' "$work/client.log" | tail -1)"
		done
	done
	pair "$sm" "$cm" ib_write_bw -d rdmafs0 -q 4 "$@"
	printf '%-14s %-3s %s\n' ib_write_bw "-q 4" "$(grep -E '^ +[0-9]+ +[0-9]+ ' "$work/client.log" | tail -1)"
}

echo
echo "== one mount: server and client on $M"
pingpongs "$M" "$M"
xsrq "$M" "$M"
perftests "$M" "$M"

echo
echo "== two mounts over RoCEv2: server on $A_ADDR, client on $B_ADDR"
pingpongs "$MA" "$MB" -g 0
xsrq "$MA" "$MB" -g 0
# The wire is slower than loopback (BENCHMARKS.md): fewer iterations a size
# with -a, so that its 8 MiB messages stay within CI's time.
AITERS=10 perftests "$MA" "$MB"

echo
echo "verbs-tools: every program ran and every result was printed"
