#!/usr/bin/env bash
# mcast.sh: UD multicast on rdmafs with Debian's mckey (rdmacm-utils),
# unmodified, through the drop-in librdmacm and libibverbs (rdmafs exec):
# rdma_join_multicast, the MULTICAST_JOIN event's AH, QPN 0xFFFFFF and
# Q_Key, ibv_attach_mcast, and a UD send to the group reaching every
# member. Two receivers in two processes and a sender, first on one local
# mount, then across two mounts on the wire (two loopback addresses: the
# group is an IP multicast group there, which each wire joins), with a
# send-only sender (-o) there; then a flood of junk datagrams to the
# group's address on UDP 4791 (a UDP socket, 3 s): the receiving daemon
# accounts for every datagram (taken, or dropped by its group's socket and
# counted in wire_mcast_overruns), uses at most about one core, and
# afterwards still serves and the group still works. Every program is under timeout and must exit 0 and
# print its result. Before mckey, librdmacm/tests/mcast_api (the calls'
# errors, JOIN events, send-only and full members, leave) on the local
# mount and on A, plainly and built with ASan/UBSan. Needs root (FUSE,
# raw sockets) and rdmacm-utils.
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

A_ADDR=${A_ADDR:-127.0.22.1}
B_ADDR=${B_ADDR:-127.0.22.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
command -v mckey >/dev/null || die "mckey is missing: apt-get install rdmacm-utils"
TMO=${TMO:-30}

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

# rdmafs exec puts the tree's librdmacm/build beside libibverbs/build when
# rdmafs was built from this tree; a binary from elsewhere gets both
# libraries through one directory. (--mount: without it exec looks at
# every rdmafs mount of the host, and waits on one whose daemon hangs.)
if ! "$RDMAFS" exec --mount "$M" -- sh -c 'echo "$LD_LIBRARY_PATH"' | grep -q "$repo/librdmacm/build"; then
	mkdir -p "$work/lib"
	ln -sf "$RDMAFS_LIBDIR/libibverbs.so.1" "$work/lib/libibverbs.so.1"
	ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
	export RDMAFS_LIBDIR=$work/lib
fi

counter() { # MOUNT NAME
	awk -F= -v k="$2" '$1 == k {print $2}' "$1/counters"
}

# round GROUP COUNT "RECV1_MOUNT RECV1_BIND" "RECV2_MOUNT RECV2_BIND"
#   "SENDER_MOUNT SENDER_BIND" [SENDER FLAGS]: two receivers join and
# wait for COUNT messages each; the sender joins once both have, and
# sends COUNT.
round() {
	local grp=$1 n=$2 r1=($3) r2=($4) s=($5) sflags=${6:-}
	local b1=() b2=() bs=()
	[[ -n "${r1[1]:-}" ]] && b1=(-b "${r1[1]}")
	[[ -n "${r2[1]:-}" ]] && b2=(-b "${r2[1]}")
	[[ -n "${s[1]:-}" ]] && bs=(-b "${s[1]}")
	"$RDMAFS" exec --mount "${r1[0]}" -- timeout "$TMO" stdbuf -oL mckey -m "$grp" "${b1[@]}" -C "$n" >"$work/r1.log" 2>&1 &
	local p1=$!
	"$RDMAFS" exec --mount "${r2[0]}" -- timeout "$TMO" stdbuf -oL mckey -m "$grp" "${b2[@]}" -C "$n" >"$work/r2.log" 2>&1 &
	local p2=$!
	for _ in $(seq 400); do
		grep -q "joined dgid" "$work/r1.log" 2>/dev/null &&
			grep -q "joined dgid" "$work/r2.log" 2>/dev/null && break
		sleep 0.05
	done
	local rc=0 rc1=0 rc2=0
	# shellcheck disable=SC2086
	"$RDMAFS" exec --mount "${s[0]}" -- timeout "$TMO" stdbuf -oL mckey -m "$grp" "${bs[@]}" -s -C "$n" $sflags >"$work/s.log" 2>&1 || rc=$?
	wait $p1 || rc1=$?
	wait $p2 || rc2=$?
	if ((rc != 0 || rc1 != 0 || rc2 != 0)); then
		for l in s r1 r2; do echo "--- $l"; cat "$work/$l.log"; done
		die "mckey $grp: sender exit $rc, receivers $rc1 $rc2"
	fi
	for l in s r1 r2; do
		grep -q "joined dgid: " "$work/$l.log" || { cat "$work/$l.log"; die "mckey ($l) printed no join"; }
		grep -q "test complete" "$work/$l.log" || { cat "$work/$l.log"; die "mckey ($l) did not complete"; }
	done
	grep -h "joined dgid" "$work/r1.log"
}

echo "== librdmacm/tests/mcast_api on the local mount (InfiniBand-style) and on A (RoCEv2), plainly and under ASan/UBSan"
make -s -C "$repo/librdmacm" tests >"$work/make.log" 2>&1 || { cat "$work/make.log"; die "make -C librdmacm tests"; }
"$RDMAFS" exec --mount "$M" -- timeout "$TMO" "$repo/librdmacm/build/tests/mcast_api" 224.22.0.9 ||
	die "librdmacm/tests/mcast_api on the local mount failed"
"$RDMAFS" exec --mount "$MA" -- timeout "$TMO" "$repo/librdmacm/build/tests/mcast_api" 224.22.0.9 "$A_ADDR" ||
	die "librdmacm/tests/mcast_api on $MA failed"
# the sanitizers' builds of both libraries and of the test, leaks included
for t in "librdmacm asan" "libibverbs asan" "librdmacm B=build-asan SANITIZE=1 tests"; do
	# shellcheck disable=SC2086
	make -s -C "$repo"/$t >"$work/make.log" 2>&1 || { cat "$work/make.log"; die "make -C $t"; }
done
mkdir -p "$work/asanlib"
ln -sf "$repo/libibverbs/build-asan/libibverbs.so.1" "$work/asanlib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build-asan/librdmacm.so.1" "$work/asanlib/librdmacm.so.1"
for m in "$M" "$MA"; do
	b=()
	[[ $m == "$MA" ]] && b=("$A_ADDR")
	RDMAFS_LIBDIR=$work/asanlib "$RDMAFS" exec --mount "$m" -- timeout "$TMO" \
		"$repo/librdmacm/build-asan/tests/mcast_api" 224.22.0.10 "${b[@]}" >"$work/asan.log" 2>&1 ||
		{ cat "$work/asan.log"; die "mcast_api under ASan on $m failed"; }
	! grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$work/asan.log" || { cat "$work/asan.log"; die "a sanitizer report"; }
	cat "$work/asan.log"
done

echo
echo "== one local mount: a sender and two receivers, three processes"
before=$(counter "$M" multicast_delivered)
round 224.22.0.1 10 "$M" "$M" "$M"
after=$(counter "$M" multicast_delivered)
# the sender is attached too (mckey without -o): three copies a message
((after - before == 30)) || die "multicast_delivered went from $before to $after, want +30"
echo "multicast_delivered +$((after - before)) (10 messages, 3 members)"

echo
echo "== two mounts on the wire ($A_ADDR, $B_ADDR): receivers on both, a send-only sender on A"
ra=$(counter "$MA" multicast_delivered)
rb=$(counter "$MB" multicast_delivered)
round 224.22.0.2 10 "$MA $A_ADDR" "$MB $B_ADDR" "$MA $A_ADDR" -o
ra2=$(counter "$MA" multicast_delivered)
rb2=$(counter "$MB" multicast_delivered)
((ra2 - ra == 10 && rb2 - rb == 10)) || die "delivered on A +$((ra2 - ra)), on B +$((rb2 - rb)), want +10 each (send-only sender not attached)"
((rb2 - rb > 0)) && grep -q "^multicast_packets_recv=[1-9]" "$MB/counters" || die "B received no multicast"
echo "A delivered +$((ra2 - ra)), B +$((rb2 - rb)); wire: A sent $(counter "$MA" wire_packets_sent), B received $(counter "$MB" wire_packets_recv)"

echo
echo "== a flood of junk to the group's address, while two receivers are joined"
"$RDMAFS" exec --mount "$MA" -- timeout "$TMO" stdbuf -oL mckey -m 224.22.0.3 -b "$A_ADDR" -C 5 >"$work/r1.log" 2>&1 &
p1=$!
"$RDMAFS" exec --mount "$MB" -- timeout "$TMO" stdbuf -oL mckey -m 224.22.0.3 -b "$B_ADDR" -C 5 >"$work/r2.log" 2>&1 &
p2=$!
for _ in $(seq 400); do
	grep -q "joined dgid" "$work/r1.log" 2>/dev/null &&
		grep -q "joined dgid" "$work/r2.log" 2>/dev/null && break
	sleep 0.05
done
# B's daemon: its CPU time (utime + stime, in clock ticks) and what it took
# from the wire.
bpid=$(sed -n 's/.*serving .* (pid \([0-9]*\)).*/\1/p' "$work/daemon-b.log" | tail -1)
[[ -n "$bpid" && -r /proc/$bpid/stat ]] || die "no pid of B's daemon in $work/daemon-b.log"
ticks() { awk '{print $14 + $15}' "/proc/$bpid/stat"; }
taken() { echo $(($(counter "$MB" wire_packets_recv) + $(counter "$MB" wire_mcast_overruns))); }
mal=$(($(counter "$MB" malformed_packets) + $(counter "$MB" icrc_errors)))
t0=$(taken) c0=$(ticks) w0=$(date +%s%N)
sent=$(python3 - "$A_ADDR" 224.22.0.3 <<'PY'
import os, random, socket, struct, sys, time
src, grp = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((src, 0))
# by the loopback interface, as the wire of a 127/8 address sends
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, struct.pack("4s4si", b"\0" * 4, socket.inet_aton(src), socket.if_nametoindex("lo")))
rnd = random.Random(22)
pool = []
for _ in range(512):
    n = rnd.choice((0, 1, 11, 12, 40, 60, 300, 1500))
    b = bytearray(rnd.getrandbits(8) for _ in range(min(n, 64))) + bytes(max(0, n - 64))
    if n >= 12 and rnd.random() < 0.5:
        # a BTH of a UD SEND to the multicast QPN, with junk behind it
        b[0], b[4:8] = 0x64, b"\x00\xff\xff\xff"
    pool.append(bytes(b))
sent = 0
end = time.time() + 3
while time.time() < end and sent < 400000:
    for b in pool:
        try:
            s.sendto(b, (grp, 4791))
            sent += 1
        except (BlockingIOError, OSError):
            time.sleep(0.001)
print(sent)
PY
)
# B has taken (or counted as dropped) what it will take of the flood once
# the count stops moving.
t1=-1
for _ in $(seq 100); do
	n=$(taken)
	((n == t1)) && break
	t1=$n
	sleep 0.2
done
c1=$(ticks) w1=$(date +%s%N)
got=$((t1 - t0))
cpu_ms=$(((c1 - c0) * 1000 / $(getconf CLK_TCK))) wall_ms=$(((w1 - w0) / 1000000))
echo "flood: $sent datagrams to 224.22.0.3:4791; B took $got of them ($(counter "$MB" wire_mcast_overruns) dropped by its group socket, counted as wire_mcast_overruns); B's daemon used ${cpu_ms} ms of CPU in ${wall_ms} ms"
# Loopback may drop a few before any socket (its backlog), uncounted.
((got <= sent && got >= sent * 9 / 10)) || die "B accounted for $got of the $sent datagrams of the flood"
# One receive goroutine a group: at most about one core, whatever the flood.
((cpu_ms <= wall_ms * 5 / 4)) || die "B's daemon used ${cpu_ms} ms of CPU in ${wall_ms} ms of flood"
rc=0
"$RDMAFS" exec --mount "$MA" -- timeout "$TMO" stdbuf -oL mckey -m 224.22.0.3 -b "$A_ADDR" -s -C 5 -o >"$work/s.log" 2>&1 || rc=$?
rc1=0 rc2=0
wait $p1 || rc1=$?
wait $p2 || rc2=$?
if ((rc != 0 || rc1 != 0 || rc2 != 0)); then
	for l in s r1 r2; do echo "--- $l"; cat "$work/$l.log"; done
	for m in "$MA" "$MB"; do echo "--- $m/counters"; grep -E "multicast|wire_|icrc|malformed|dropped" "$m/counters"; done
	die "after the flood: sender exit $rc, receivers $rc1 $rc2"
fi
mal2=$(($(counter "$MB" malformed_packets) + $(counter "$MB" icrc_errors)))
((mal2 > mal)) || die "B counted none of the flood as malformed or ICRC errors ($mal -> $mal2)"
echo "B counted $((mal2 - mal)) junk datagrams (malformed or ICRC), and the group still delivered"
for m in "$M" "$MA" "$MB"; do
	[[ -r "$m/device" ]] || die "$m no longer answers"
done
rss=$(ps -o rss= -p "$bpid")
echo "B's daemon RSS after the flood: ${rss} KiB"
((rss < 400000)) || die "B's daemon grew to $rss KiB"
echo
echo "mcast: mckey on one mount and across two, send-only, and a flood: all good"
