#!/usr/bin/env bash
# interop-rxe.sh [ITERS] [SIZE] [MTU]: rdmafs against the Linux kernel's
# Soft-RoCE. The harness in ../shared/interop/rxe-peer boots a Debian kernel
# with rdma_rxe under qemu (TCG) on a bridge in network namespace rxepeer;
# rdmafs runs in that namespace on 10.77.0.1 (mount --addr), and the Go
# rc_pingpong and ud_pingpong examples speak ibv_rc_pingpong's and
# ibv_ud_pingpong's TCP exchange. Four cases:
#   1. the kernel's ibv_rc_pingpong is the client, rdmafs the server;
#   2. the kernel's ibv_rc_pingpong is the server, rdmafs the client;
#   3. the kernel's ibv_ud_pingpong is the client, rdmafs the server;
#   4. the kernel's ibv_ud_pingpong is the server, rdmafs the client
#      (UD datagrams of 1024 bytes, the guest's ibv_ud_pingpong size).
# tshark records the bridge, and the harness's icrc-check.py verifies the
# ICRC of every RoCE packet, rdmafs' and rxe's. The first run builds the
# guest (about 2 minutes and 200 MB from the Debian archive) into /tmp/rxe.
# Needs root. Exits non-zero when anything is wrong.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
H=${RXE_HARNESS:-$repo/../shared/interop/rxe-peer}
ITERS=${1:-200}
SIZE=${2:-4096}
MTU=${3:-1024}
NS=rxepeer
work=$(mktemp -d /tmp/rdmafs-interop.XXXXXX)
M=$work/mnt
mkdir -p "$M"

die() { echo "FAIL: $*" >&2; exit 1; }
[[ -d "$H" ]] || die "no rxe harness at $H (set RXE_HARNESS)"
command -v qemu-system-x86_64 >/dev/null && command -v tshark >/dev/null || bash "$H/host-deps.sh"
[[ -e /tmp/rxe/initrd.cpio && -e /tmp/rxe/vmlinuz ]] || bash "$H/build-guest.sh"
(cd "$repo" && go build -o "$work/rdmafs" ./cmd/rdmafs && go build -o "$work/rc_pingpong" ./examples/rc_pingpong &&
	go build -o "$work/ud_pingpong" ./examples/ud_pingpong)

cleanup() {
	local rc=$?
	NAME=a bash "$H/stop-guest.sh" a >/dev/null 2>&1 || true
	[[ -n "${cap:-}" ]] && kill "$cap" 2>/dev/null
	ip netns exec $NS "$work/rdmafs" umount "$M" 2>/dev/null || true
	ip netns pids $NS 2>/dev/null | xargs -r kill 2>/dev/null || true
	bash "$H/netns-teardown.sh" >/dev/null 2>&1 || true
	((rc == 0)) || { echo "--- guest log"; tail -n 30 /tmp/rxe/a.log 2>/dev/null; echo "--- rdmafs"; cat "$work"/*.log 2>/dev/null | tail -n 30; }
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
ip netns list | grep -qw $NS && bash "$H/netns-teardown.sh" >/dev/null 2>&1 || true
bash "$H/netns-setup.sh" >/dev/null

# Everything of rdmafs runs inside the namespace (ip netns exec also makes
# a mount namespace of its own, so the mount lives and dies with one shell).
inns() { ip netns exec $NS bash -c "$1"; }

ip netns exec $NS tshark -q -i br0 -f 'udp port 4791' -F pcap -w "$work/br0.pcap" >/dev/null 2>&1 &
cap=$!
sleep 2

echo "== 1. kernel rxe client -> rdmafs server ($ITERS x $SIZE B, MTU $MTU)"
inns "'$work/rdmafs' mount --addr 10.77.0.1 --log '$work/daemon1.log' '$M' &&
      '$work/rc_pingpong' -mount '$M' -server -iters $ITERS -size $SIZE -mtu $MTU -timeout 180s > '$work/server.log' 2>&1;
      rc=\$?; '$work/rdmafs' umount '$M'; exit \$rc" &
srv=$!
NAME=a TAP=tap0 IP=10.77.0.2 MODE=client bash "$H/run-guest.sh" rxe.iters=$ITERS rxe.size=$SIZE rxe.mtu=$MTU rxe.poweroff=1 >/dev/null
wait $srv || die "rdmafs server failed: $(cat "$work/server.log")"
cat "$work/server.log"
for i in $(seq 1 120); do grep -q "ibv_rc_pingpong client rc=" /tmp/rxe/a.log 2>/dev/null && break; sleep 1; done
grep -E "ibv_rc_pingpong client rc=|iters in|bytes in" /tmp/rxe/a.log || true
grep -q "ibv_rc_pingpong client rc=0" /tmp/rxe/a.log || die "the kernel's ibv_rc_pingpong client failed"
NAME=a bash "$H/stop-guest.sh" a >/dev/null

echo "== 2. rdmafs client -> kernel rxe server"
NAME=a TAP=tap0 IP=10.77.0.2 MODE=server bash "$H/run-guest.sh" rxe.iters=$ITERS rxe.size=$SIZE rxe.mtu=$MTU >/dev/null
for i in $(seq 1 120); do grep -q "waiting for a client" /tmp/rxe/a.log 2>/dev/null && break; sleep 1; done
grep -q "waiting for a client" /tmp/rxe/a.log || die "the rxe guest did not come up"
sleep 1
inns "'$work/rdmafs' mount --addr 10.77.0.1 --log '$work/daemon2.log' '$M' &&
      '$work/rc_pingpong' -mount '$M' -connect 10.77.0.2 -iters $ITERS -size $SIZE -mtu $MTU -timeout 180s;
      rc=\$?; '$work/rdmafs' umount '$M'; exit \$rc" || die "rdmafs client failed"
for i in $(seq 1 60); do grep -q "ibv_rc_pingpong server rc=" /tmp/rxe/a.log 2>/dev/null && break; sleep 1; done
grep -E "ibv_rc_pingpong server rc=" /tmp/rxe/a.log | head -1
grep -q "ibv_rc_pingpong server rc=0" /tmp/rxe/a.log || die "the kernel's ibv_rc_pingpong server failed"

NAME=a bash "$H/stop-guest.sh" a >/dev/null

echo "== 3. kernel rxe UD client -> rdmafs UD server ($ITERS x 1024 B)"
inns "'$work/rdmafs' mount --addr 10.77.0.1 --log '$work/daemon3.log' '$M' &&
      '$work/ud_pingpong' -mount '$M' -server -iters $ITERS -size 1024 -timeout 180s > '$work/udserver.log' 2>&1;
      rc=\$?; '$work/rdmafs' umount '$M'; exit \$rc" &
srv=$!
NAME=a TAP=tap0 IP=10.77.0.2 MODE=udclient bash "$H/run-guest.sh" rxe.iters=$ITERS rxe.poweroff=1 >/dev/null
wait $srv || die "rdmafs UD server failed: $(cat "$work/udserver.log")"
cat "$work/udserver.log"
for i in $(seq 1 120); do grep -q "ibv_ud_pingpong client rc=" /tmp/rxe/a.log 2>/dev/null && break; sleep 1; done
grep -E "ibv_ud_pingpong client rc=" /tmp/rxe/a.log || true
grep -q "ibv_ud_pingpong client rc=0" /tmp/rxe/a.log || die "the kernel's ibv_ud_pingpong client failed"
NAME=a bash "$H/stop-guest.sh" a >/dev/null

echo "== 4. rdmafs UD client -> kernel rxe UD server"
NAME=a TAP=tap0 IP=10.77.0.2 MODE=udserver bash "$H/run-guest.sh" rxe.iters=$ITERS >/dev/null
for i in $(seq 1 120); do grep -q "ibv_ud_pingpong server" /tmp/rxe/a.log 2>/dev/null && break; sleep 1; done
sleep 2
inns "'$work/rdmafs' mount --addr 10.77.0.1 --log '$work/daemon4.log' '$M' &&
      '$work/ud_pingpong' -mount '$M' -connect 10.77.0.2 -iters $ITERS -size 1024 -timeout 180s;
      rc=\$?; '$work/rdmafs' umount '$M'; exit \$rc" || die "rdmafs UD client failed"
for i in $(seq 1 60); do grep -q "ibv_ud_pingpong server rc=" /tmp/rxe/a.log 2>/dev/null && break; sleep 1; done
grep -E "ibv_ud_pingpong server rc=" /tmp/rxe/a.log | head -1
grep -q "ibv_ud_pingpong server rc=0" /tmp/rxe/a.log || die "the kernel's ibv_ud_pingpong server failed"

sleep 1
kill "$cap"; wait "$cap" 2>/dev/null || true
cap=
echo "== ICRC of every RoCE packet on the bridge (rdmafs is 10.77.0.1)"
python3 "$H/icrc-check.py" "$work/br0.pcap" || die "ICRC check failed"
echo "interop-rxe: all checks passed"
