#!/usr/bin/env bash
# rdmacm-tools.sh: Debian's own RDMA CM programs, unmodified, on rdmafs
# through the drop-in librdmacm and libibverbs (rdmafs exec): rping (also
# -q), ucmatose (also -m -t -a, and against no listener), udaddy (UD),
# rdma_server/rdma_client (the synchronous API), cmtime, perftest with -R
# (connections by rdma_cm), and librdmacm/tests/cm_api and fabric_api (the
# calls libfabric makes) for what those do not check; first with client and server on one local mount over
# 127.0.0.1, then across two mounts that speak RoCEv2 (and the CM's MADs
# on QP1) on two loopback addresses; last, rping, ucmatose, udaddy and
# cm_api against the ASan/UBSan builds. Every run is under timeout, must
# exit 0 on both sides and print its result. Needs root (FUSE, raw
# sockets) and the packages of scripts/setup.sh.
#
#   scripts/rdmacm-tools.sh [quick]    quick: one mount, no perftest
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

quick=${1:-}
A_ADDR=${A_ADDR:-127.0.82.1}
B_ADDR=${B_ADDR:-127.0.82.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
for t in rping ucmatose udaddy rdma_server rdma_client cmtime ib_write_bw; do
	command -v $t >/dev/null || die "$t is missing: apt-get install rdmacm-utils perftest"
done
TMO=${TMO:-60}

# rdmafs exec puts the tree's librdmacm/build beside libibverbs/build when
# rdmafs was built from this tree; a binary from elsewhere (RDMAFS=...)
# gets both libraries through one directory.
if ! "$RDMAFS" exec -- sh -c 'echo "$LD_LIBRARY_PATH"' | grep -q "$repo/librdmacm/build"; then
	mkdir -p "$work/lib"
	ln -sf "$RDMAFS_LIBDIR/libibverbs.so.1" "$work/lib/libibverbs.so.1"
	ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
	export RDMAFS_LIBDIR=$work/lib
fi

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
[[ -d "$M/cm" ]] || die "the daemon has no cm/ directory (the CM agent, issue #12)"
if [[ -z "$quick" ]]; then
	pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
	pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
fi
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

on() { # MOUNT PROG ARGS: an unmodified program on MOUNT's device
	local mnt=$1
	shift
	"$RDMAFS" exec --mount "$mnt" -- timeout "$TMO" "$@"
}


# perftest 4.5-0.17 (Debian's) sets up its test connection right after a
# handshake on its first one: the server then makes and binds a listener
# while the client resolves, makes its QP and connects. A REQ that arrives
# first is rejected with reason 8 (invalid service ID), as the kernel's CM
# does; the client's retry then uses the ids it has just freed and dies of
# SIGSEGV (perftest 3d9d8d0, "Fix crashes ... in RDMA CM connection retry",
# 26.04.17). A loaded host lets the client win now and then, so that one
# outcome, and only when the server's daemon counted the REQ as rejected
# for want of a listener, is run again.
lost_perftest_race() { # SERVER_MOUNT
	local now
	grep -q "RDMA_CM_EVENT_REJECTED; error: 8" "$work/client.log" || return 1
	now=$(awk -F= '/^rejected_no_listener=/{print $2}' "$1/cm/counters" 2>/dev/null)
	[[ -n "$now" && "$now" != "${NO_LISTENER_BEFORE:-0}" ]]
}

expect() { # LOG PATTERN WHAT
	grep -qE "$2" "$work/$1.log" || { cat "$work/$1.log"; die "$3"; }
}

port=19100
cmtools() { # SERVER_MOUNT CLIENT_MOUNT SERVER_ADDR
	local sm=$1 cm=$2 sa=$3
	port=$((port + 1))
	cm_pair "$sm" "$cm" $port "rping -s -a $sa -C 10 -v -p $port" "rping -c -a $sa -C 10 -v -p $port"
	n=$(grep -c "ping data: rdma-ping-" "$work/client.log" || true)
	((n == 10)) || { cat "$work/client.log"; die "rping client printed $n pings, want 10"; }
	expect server "server ping data: rdma-ping-9" "rping server saw no 10th ping"
	echo "rping -C 10 -v: 10 pings"

	# -q: the programs create and move their QPs themselves
	# (rdma_init_qp_attr, rdma_establish)
	port=$((port + 1))
	cm_pair "$sm" "$cm" $port "rping -s -q -a $sa -C 10 -v -p $port" "rping -c -q -a $sa -C 10 -v -p $port"
	expect client "ping data: rdma-ping-9" "rping -q client printed no 10th ping"
	echo "rping -q -C 10 -v: 10 pings"

	port=$((port + 1))
	cm_pair "$sm" "$cm" $port "ucmatose -p $port" "ucmatose -s $sa -p $port"
	expect client "^return status 0" "ucmatose client: no 'return status 0'"
	expect server "^return status 0" "ucmatose server: no 'return status 0'"
	echo "ucmatose: return status 0"

	port=$((port + 1))
	cm_pair "$sm" "$cm" $port "ucmatose -p $port -c 4 -C 20 -S 512" "ucmatose -s $sa -p $port -c 4 -C 20 -S 512"
	expect client "^return status 0" "ucmatose -c 4 client failed"
	echo "ucmatose -c 4 -C 20 -S 512: return status 0"

	# -m: rdma_migrate_id to a new channel; -t/-a: TOS and ACK timeout
	port=$((port + 1))
	cm_pair "$sm" "$cm" $port "ucmatose -p $port -m" "ucmatose -s $sa -p $port -m -t 32 -a 16"
	expect client "migrating to new event channel" "ucmatose -m did not migrate"
	expect client "^return status 0" "ucmatose -m -t -a client failed"
	echo "ucmatose -m -t 32 -a 16: return status 0"

	# no listener: the REQ is rejected (reason 8, invalid service ID)
	port=$((port + 1))
	local rc=0
	on "$cm" ucmatose -s $sa -p $port >"$work/client.log" 2>&1 || rc=$?
	((rc != 0)) || die "ucmatose to a port without a listener succeeded"
	expect client "REJECTED" "ucmatose without a listener: no REJECTED event"
	echo "ucmatose without a listener: $(grep -m1 REJECTED "$work/client.log")"

	# udaddy's port is fixed (7174)
	cm_pair "$sm" "$cm" 7174 "udaddy" "udaddy -s $sa"
	expect client "^return status 0" "udaddy client: no 'return status 0'"
	expect server "^return status 0" "udaddy server: no 'return status 0'"
	echo "udaddy: return status 0"

	port=$((port + 1))
	cm_pair "$sm" "$cm" $port "rdma_server -p $port" "rdma_client -s $sa -p $port"
	expect client "rdma_client: end 0" "rdma_client: no 'end 0'"
	expect server "rdma_server: end 0" "rdma_server: no 'end 0'"
	echo "rdma_server/rdma_client: end 0"

	port=$((port + 1))
	FOREVER=1 cm_pair "$sm" "$cm" $port "cmtime -p $port" "cmtime -s $sa -p $port -c 20"
	expect client "^connect +:" "cmtime printed no timings"
	echo "cmtime -c 20: $(grep -E '^connect +:' "$work/client.log")"
}

perftests() { # SERVER_MOUNT CLIENT_MOUNT SERVER_ADDR
	local sm=$1 cm=$2 sa=$3
	for prog in ib_write_bw ib_send_lat ib_read_bw; do
		port=$((port + 1))
		for try in 1 2 3; do
			NO_LISTENER_BEFORE=$(awk -F= '/^rejected_no_listener=/{print $2}' "$sm/cm/counters")
			local rc=0
			PAIR_RETRY=lost_perftest_race cm_pair "$sm" "$cm" $port "$prog -R -p $port" "$prog -R -p $port $sa" || rc=$?
			((rc == 75)) || break
			echo "$prog -R: the client's REQ beat the server's listener (perftest's race, try $try); again"
			port=$((port + 1))
		done
		((rc != 75)) || die "$prog -R lost perftest's listener race 3 times"
		grep -qE '^ +[0-9]+ +[0-9]+ ' "$work/client.log" || { cat "$work/client.log"; die "$prog -R printed no result"; }
		printf '%-12s -R %s\n' $prog "$(grep -E '^ +[0-9]+ +[0-9]+ ' "$work/client.log" | tail -1)"
	done
}

echo
echo "== one mount: server and client on $M over 127.0.0.1"
make -s -C "$repo/librdmacm" tests >/dev/null
on "$M" "$repo/librdmacm/build/tests/cm_api" 19390 || die "librdmacm/tests/cm_api failed"
on "$M" "$repo/librdmacm/build/tests/fabric_api" 19393 || die "librdmacm/tests/fabric_api failed"
cmtools "$M" "$M" 127.0.0.1
[[ -z "$quick" ]] && perftests "$M" "$M" 127.0.0.1

if [[ -z "$quick" ]]; then
	echo
	echo "== two mounts over RoCEv2: server on $A_ADDR, client on $B_ADDR"
	on "$MA" "$repo/librdmacm/build/tests/fabric_api" 19380 "$A_ADDR" || die "librdmacm/tests/fabric_api on $MA failed"
	cmtools "$MA" "$MB" "$A_ADDR"
	perftests "$MA" "$MB" "$A_ADDR"

	echo
	echo "== the same wire losing 5% of its packets both ways (MADs too: the CM retries)"
	echo 'drop=0.05 seed=7' >"$MA/faults"
	echo 'drop=0.05 seed=9' >"$MB/faults"
	port=$((port + 1))
	cm_pair "$MA" "$MB" $port "rping -s -a $A_ADDR -C 50 -v -p $port" "rping -c -a $A_ADDR -C 50 -v -p $port"
	expect client "ping data: rdma-ping-49" "rping with loss: no 50th ping"
	port=$((port + 1))
	cm_pair "$MA" "$MB" $port "ucmatose -p $port -c 4" "ucmatose -s $A_ADDR -p $port -c 4"
	expect client "^return status 0" "ucmatose with loss failed"
	echo "rping -C 50, ucmatose -c 4 with 5% loss: ok ($(grep -h '^fault_drops=' "$MA/faults" "$MB/faults" | tr '\n' ' '))"
	echo off >"$MA/faults"
	echo off >"$MB/faults"
fi

echo
echo "== rping, ucmatose, udaddy and cm_api on the ASan/UBSan builds of librdmacm and libibverbs"
# (both: libibverbs's re-backing copies whole heap pages, which only its
# ASan build keeps out of the sanitizer's view)
make -s -C "$repo/librdmacm" asan >/dev/null
make -s -C "$repo/libibverbs" asan >/dev/null
mkdir -p "$work/asanlib"
ln -sf "$repo/libibverbs/build-asan/libibverbs.so.1" "$work/asanlib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build-asan/librdmacm.so.1" "$work/asanlib/librdmacm.so.1"
san="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)"
nosan() { # LOG: no sanitizer report in it
	! grep -qE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$work/$1.log" || { cat "$work/$1.log"; die "a sanitizer report ($1)"; }
}
port=$((port + 1))
RDMAFS_LIBDIR=$work/asanlib LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 \
	cm_pair "$M" "$M" $port "rping -s -a 127.0.0.1 -C 10 -v -p $port" "rping -c -a 127.0.0.1 -C 10 -v -p $port"
nosan client
nosan server
n=$(grep -c "ping data: rdma-ping-" "$work/client.log" || true)
((n == 10)) || die "rping under ASan printed $n pings"
echo "rping under ASan/UBSan: 10 pings, no report"
port=$((port + 1))
RDMAFS_LIBDIR=$work/asanlib LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 \
	cm_pair "$M" "$M" $port "ucmatose -p $port" "ucmatose -s 127.0.0.1 -p $port"
nosan client
nosan server
expect client "^return status 0" "ucmatose under ASan failed"
RDMAFS_LIBDIR=$work/asanlib LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 cm_pair "$M" "$M" 7174 "udaddy" "udaddy -s 127.0.0.1"
nosan client
nosan server
expect client "^return status 0" "udaddy under ASan failed"
echo "ucmatose, udaddy under ASan/UBSan: return status 0, no report"
# the API test built with the sanitizers, leaks included
make -s -C "$repo/librdmacm" B=build-asan SANITIZE=1 tests >/dev/null
RDMAFS_LIBDIR=$work/asanlib on "$M" "$repo/librdmacm/build-asan/tests/cm_api" 19395 >"$work/client.log" 2>&1 ||
	{ cat "$work/client.log"; die "cm_api under ASan failed"; }
nosan client
echo "cm_api under ASan/UBSan (leak checking on): ok"

echo
echo "rdmacm-tools: every program ran and every result was printed"
