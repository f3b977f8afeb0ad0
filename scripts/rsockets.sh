#!/usr/bin/env bash
# rsockets.sh: rdma-core's rsocket programs (rdmacm-utils), unmodified, on
# rdmafs's own rsockets (librdmacm/rsocket*.c) through the drop-in
# librdmacm and libibverbs (rdmafs exec): rstream at every size of its
# table in its blocking, non-blocking and asynchronous (rpoll) modes with
# its data check (-T v); riostream (riomap/riowrite); rcopy, the file
# compared byte for byte; udpong (datagram rsockets over UD) in its four
# modes after junk datagrams to its server, on one mount only (udpong's
# client does not bind, and the kernel's source address for another
# loopback address is 127.0.0.1, which no --addr mount answers for); then
# librdmacm/tests/rs_dgram (datagrams with both ends bound, every byte
# checked; also across the two mounts); then plain socket programs moved
# onto rsockets by Debian's librspreload.so: our tests/sock_echo (every
# byte checked both ways, through read/recv/readv/write/send, poll and
# select) and iperf3,
# with the mount's counters showing the bytes went over the device (the
# preload falls back to TCP silently otherwise); then librdmacm/tests/
# rs_badpeer, a peer that breaks the protocol (a fuzz of the control
# messages and connection data, a peer that stops granting credits, one
# that disconnects in the middle of a riowrite). First on one local mount
# over 127.0.0.1, then across two mounts on the wire (two loopback
# addresses); last, rstream, riostream, udpong and rs_badpeer against the ASan/UBSan
# builds. Every program is under timeout and must exit 0 and print its
# result. Needs root (FUSE, raw sockets), rdmacm-utils and iperf3.
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

A_ADDR=${A_ADDR:-127.0.47.1}
B_ADDR=${B_ADDR:-127.0.47.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
for t in rstream riostream rcopy udpong iperf3 ss; do
	command -v $t >/dev/null || die "$t is missing: apt-get install rdmacm-utils iperf3"
done
PRELOAD=${PRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
[[ -f "$PRELOAD" ]] || die "$PRELOAD is missing: apt-get install rdmacm-utils"
TMO=${TMO:-60}

# both libraries through one directory: this tree's librdmacm beside the
# libibverbs lib.sh chose (rdmafs exec without --mount is not used: it
# scans every mount of the machine)
mkdir -p "$work/lib"
ln -sf "$RDMAFS_LIBDIR/libibverbs.so.1" "$work/lib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
export RDMAFS_LIBDIR=$work/lib
make -s -C "$repo/librdmacm" tests >/dev/null
T=$repo/librdmacm/build/tests

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

counter() { # MOUNT NAME
	awk -F= -v k="$2" '$1 == k {print $2}' "$1/counters"
}


# rstream's sizes (its -S all table), each with a few transfers (-S all
# itself runs 100,000 round trips at the small sizes: minutes here). The
# modes rotate over the sizes, so that each mode meets small, odd and
# large sizes and each size one mode, in about a second a run.
SIZES="64 128 192 256 384 512 768 1024 1536 2048 3072 4096 6144 8192 12288 16384 24576 32768 49152 65536 98304 131072 196608 262144 393216 524288 786432 1048576 1572864 2097152 3145728 4194304 6291456"
MODES=("-T b" "-T n" "-T a" "-T a -T b")

# streams SERVER_MOUNT CLIENT_MOUNT SERVER_ADDR CLIENT_BIND PORT SIZES
streams() {
	local sm=$1 cm=$2 sa=$3 cb=$4 port=$5 sizes=$6 line i=0
	local bind=()
	[[ -n "$cb" ]] && bind=(-b "$cb")
	for s in $sizes; do
		local mode=${MODES[i % 4]} c=10
		i=$((i + 1))
		((s >= 1048576)) && c=3
		cm_pair "$sm" "$cm" "$port" "rstream -b $sa -p $port $mode -T v -S $s -C $c" \
			"rstream -s $sa ${bind[*]} -p $port $mode -T v -S $s -C $c"
		line=$(grep "^custom" "$work/client.log") || { cat "$work/client.log"; die "rstream $mode -S $s printed no result"; }
		printf 'rstream %-10s -T v: %s\n' "$mode" "$line"
	done
	i=0
	for s in 64 100000 4194304; do
		local mode=${MODES[i % 3]}
		i=$((i + 1))
		cm_pair "$sm" "$cm" "$port" "riostream -b $sa -p $port $mode -T v -S $s -C 10" \
			"riostream -s $sa ${bind[*]} -p $port $mode -T v -S $s -C 10"
		line=$(grep "^custom" "$work/client.log") || { cat "$work/client.log"; die "riostream $mode -S $s printed no result"; }
		printf 'riostream %-8s -T v: %s\n' "$mode" "$line"
	done
}

# rcopy SERVER_MOUNT CLIENT_MOUNT SERVER_ADDR PORT: rcopy's server never
# exits by itself; it is stopped once the file is checked.
copy() {
	local sm=$1 cm=$2 sa=$3 port=$4
	head -c 7654321 /dev/urandom >"$work/src.bin"
	rm -f "$work/dst.bin"
	"$RDMAFS" exec --mount "$sm" -- timeout "$TMO" rcopy -p "$port" >"$work/rcopy-server.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		grep -q " port=$port " "$sm/cm/listeners" 2>/dev/null && break
		sleep 0.05
	done
	"$RDMAFS" exec --mount "$cm" -- timeout "$TMO" rcopy "$work/src.bin" "$sa:$work/dst.bin" -p "$port" ||
		{ cat "$work/rcopy-server.log"; die "rcopy failed"; }
	for _ in $(seq 100); do
		grep -q "closing...done" "$work/rcopy-server.log" && break
		sleep 0.05
	done
	kill -TERM $spid 2>/dev/null || true
	wait $spid || true
	cmp "$work/src.bin" "$work/dst.bin" || die "rcopy: the copy differs from the file"
	echo "rcopy: 7654321 bytes, the copy is byte for byte the file"
}

# preloaded SERVER_MOUNT CLIENT_MOUNT SERVER_ADDR PORT: plain socket
# programs under librspreload.so; the server mount's counters must show
# the bytes.
preloaded() {
	local sm=$1 cm=$2 sa=$3 port=$4 bytes=30000000
	local b0 b1
	b0=$(counter "$sm" bytes_recv)
	cm_pair "$sm" "$cm" "$port" "env LD_PRELOAD=$PRELOAD $T/sock_echo server $sa $port $bytes" \
		"env LD_PRELOAD=$PRELOAD $T/sock_echo client $sa $port $bytes"
	b1=$(counter "$sm" bytes_recv)
	cat "$work/server.log" "$work/client.log"
	((b1 - b0 >= bytes)) || die "sock_echo: the server's device received $((b1 - b0)) bytes, want >= $bytes (did the preload fall back to TCP?)"
	echo "sock_echo under librspreload.so: the server's device received +$((b1 - b0)) bytes"

	b0=$(counter "$sm" bytes_recv)
	cm_pair "$sm" "$cm" "$port" "env LD_PRELOAD=$PRELOAD iperf3 -s -1 -B $sa -p $port" \
		"env LD_PRELOAD=$PRELOAD iperf3 -c $sa -p $port -t 2"
	b1=$(counter "$sm" bytes_recv)
	local got
	got=$(grep -E "receiver$" "$work/client.log" | tail -1)
	[[ -n "$got" ]] || { cat "$work/client.log"; die "iperf3 printed no receiver line"; }
	((b1 - b0 >= 10000000)) || die "iperf3: the server's device received $((b1 - b0)) bytes (did the preload fall back to TCP?)"
	echo "iperf3 under librspreload.so: $got; the server's device received +$((b1 - b0)) bytes"
}

# pong MOUNT PORT: udpong (datagram rsockets over UD) in its four modes;
# its server never exits by itself. Before the first, junk datagrams to
# the server's UDP socket (not rsockets' header): ignored.
pong() {
	local m=$1 port=$2 mode
	for mode in "-T b" "-T n" "-T a" "-T e"; do
		# shellcheck disable=SC2086
		"$RDMAFS" exec --mount "$m" -- timeout "$TMO" udpong -b 127.0.0.1 -p $port $mode >"$work/server.log" 2>&1 &
		local spid=$!
		for _ in $(seq 100); do
			ss -Huln "sport = :$port" | grep -q . && break
			sleep 0.05
		done
		if [[ $mode == "-T b" ]]; then
			python3 -c '
import random, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r = random.Random(47)
for i in range(2000):
    n = r.choice((0, 1, 15, 16, 17, 40, 1000, 2100))
    b = bytearray(r.getrandbits(8) for _ in range(n))
    if n >= 16 and i % 2:
        b[0:4] = b"\x55\x55\x55\x55"
    s.sendto(bytes(b), ("127.0.0.1", int(sys.argv[1])))
' "$port"
		fi
		local rc=0
		# shellcheck disable=SC2086
		"$RDMAFS" exec --mount "$m" -- timeout "$TMO" udpong -s 127.0.0.1 -p $port $mode -C 200 -S 1000 >"$work/client.log" 2>&1 || rc=$?
		kill -TERM $spid 2>/dev/null || true
		wait $spid || true
		((rc == 0)) && grep -q "^custom" "$work/client.log" || { cat "$work/client.log" "$work/server.log"; die "udpong $mode failed ($rc)"; }
		printf 'udpong %s: %s\n' "$mode" "$(grep "^custom" "$work/client.log")"
	done
}

# dgrams SERVER_MOUNT CLIENT_MOUNT SERVER_ADDR CLIENT_ADDR PORT:
# librdmacm/tests/rs_dgram, both ends bound: 2000 datagrams of 4..2000
# bytes echoed, every byte checked; all but the first (the UDP first
# contact) must reach the server's device.
dgrams() {
	local sm=$1 cm=$2 sa=$3 ca=$4 port=$5 p0 p1
	p0=$(counter "$sm" packets_recv)
	"$RDMAFS" exec --mount "$sm" -- timeout "$TMO" "$T/rs_dgram" server "$sa" "$port" 2000 >"$work/server.log" 2>&1 &
	local spid=$! rc=0 src=0
	for _ in $(seq 100); do
		ss -Huln "sport = :$port" | grep -q . && break
		sleep 0.05
	done
	"$RDMAFS" exec --mount "$cm" -- timeout "$TMO" "$T/rs_dgram" client "$ca" "$port" 2000 "$sa" >"$work/client.log" 2>&1 || rc=$?
	wait $spid || src=$?
	((rc == 0 && src == 0)) || { cat "$work/client.log" "$work/server.log"; die "rs_dgram: client exit $rc, server $src"; }
	p1=$(counter "$sm" packets_recv)
	((p1 - p0 >= 1999)) || die "rs_dgram: the server's device received $((p1 - p0)) packets, want >= 1999"
	echo "rs_dgram: $(cat "$work/client.log"); the server's device received +$((p1 - p0)) packets"
}

echo "== one local mount, 127.0.0.1"
streams "$M" "$M" 127.0.0.1 "" 7471 "$SIZES"
copy "$M" "$M" 127.0.0.1 7472
pong "$M" 7475
dgrams "$M" "$M" 127.0.0.1 127.0.0.1 7476
preloaded "$M" "$M" 127.0.0.1 7473
pp timeout "$TMO" "$RDMAFS" exec --mount "$M" -- "$T/rs_badpeer" 127.0.0.1 7474 ||
	die "rs_badpeer failed"

echo
echo "== two mounts on the wire ($A_ADDR, $B_ADDR): servers on B, clients on A"
wa=$(counter "$MA" wire_packets_sent)
streams "$MB" "$MA" "$B_ADDR" "$A_ADDR" 7481 "64 1000 4096 65536 100000 1048576 6291456"
copy "$MB" "$MA" "$B_ADDR" 7482
dgrams "$MB" "$MA" "$B_ADDR" "$A_ADDR" 7484
preloaded "$MB" "$MA" "$B_ADDR" 7483
wa2=$(counter "$MA" wire_packets_sent)
((wa2 > wa)) || die "A sent nothing on the wire"
echo "A sent $((wa2 - wa)) packets on the wire"

echo
echo "== rstream, riostream, udpong and rs_badpeer on the ASan/UBSan builds of librdmacm and libibverbs"
make -s -C "$repo/librdmacm" asan >/dev/null
make -s -C "$repo/libibverbs" asan >/dev/null
make -s -C "$repo/librdmacm" B=build-asan SANITIZE=1 tests >/dev/null
mkdir -p "$work/asanlib"
ln -sf "$repo/libibverbs/build-asan/libibverbs.so.1" "$work/asanlib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build-asan/librdmacm.so.1" "$work/asanlib/librdmacm.so.1"
san="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)"
nosan() { # LOG: no sanitizer report in it
	! grep -qE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$work/$1.log" || { cat "$work/$1.log"; die "a sanitizer report ($1)"; }
}
for args in "rstream -T b -T v -S 100000 -C 10" "rstream -T a -T v -S 1000 -C 20" "riostream -T n -T v -S 300000 -C 5"; do
	set -- $args
	prog=$1
	shift
	RDMAFS_LIBDIR=$work/asanlib LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 \
		cm_pair "$M" "$M" 7491 "$prog -b 127.0.0.1 -p 7491 $*" "$prog -s 127.0.0.1 -p 7491 $*"
	nosan client
	nosan server
	grep -q "^custom" "$work/client.log" || { cat "$work/client.log"; die "$args under ASan printed no result"; }
	echo "$args under ASan/UBSan: $(grep "^custom" "$work/client.log")"
done
# udpong: its server never exits by itself
RDMAFS_LIBDIR=$work/asanlib "$RDMAFS" exec --mount "$M" -- timeout "$TMO" env LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 \
	udpong -b 127.0.0.1 -p 7493 -T b >"$work/server.log" 2>&1 &
spid=$!
for _ in $(seq 100); do
	ss -Huln "sport = :7493" | grep -q . && break
	sleep 0.05
done
rc=0
RDMAFS_LIBDIR=$work/asanlib "$RDMAFS" exec --mount "$M" -- timeout "$TMO" env LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 \
	udpong -s 127.0.0.1 -p 7493 -T b -C 100 -S 1000 >"$work/client.log" 2>&1 || rc=$?
kill -TERM $spid 2>/dev/null || true
wait $spid || true
nosan client
nosan server
((rc == 0)) && grep -q "^custom" "$work/client.log" || { cat "$work/client.log"; die "udpong under ASan failed ($rc)"; }
echo "udpong -T b under ASan/UBSan: $(grep "^custom" "$work/client.log")"
# the hostile peer with the sanitizers, leaks included
RDMAFS_LIBDIR=$work/asanlib timeout "$TMO" "$RDMAFS" exec --mount "$M" -- "$repo/librdmacm/build-asan/tests/rs_badpeer" 127.0.0.1 7492 >"$work/client.log" 2>&1 ||
	{ cat "$work/client.log"; die "rs_badpeer under ASan failed"; }
nosan client
echo "rs_badpeer under ASan/UBSan (leak checking on): ok"

echo
echo "PASS: rsockets (rstream, riostream, rcopy, udpong, rs_dgram, librspreload.so with sock_echo and iperf3, rs_badpeer)"
