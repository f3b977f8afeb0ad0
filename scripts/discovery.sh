#!/usr/bin/env bash
# discovery.sh: programs that look for an RDMA device the way the kernel
# shows one find rdmafs's, through rdmafs exec and no variable: ibstat and
# ibstatus (infiniband-diags, which read /sys/class/infiniband),
# ibv_devinfo -v, ucx_info -d (which lists a device only where
# /dev/infiniband/uverbsN is a character device it may open) and fi_info -p
# verbs; on one local mount (InfiniBand link layer) and on two --addr
# mounts (RoCE) at once; the view's counters are live, the view's files
# agree with libibverbs, a user other than root sees the same with its own
# uid, and RDMAFS_EXEC_SYSFS=0 turns the view off. Every run is under
# timeout. Needs root (FUSE, raw sockets, a tap interface) and the
# packages of scripts/setup.sh.
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

A_ADDR=${A_ADDR:-127.0.89.1}
B_ADDR=${B_ADDR:-127.0.89.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
chmod 755 "$work" # the user other than root reaches the mounts
for t in ibstat ibstatus ibv_devinfo ucx_info fi_info unshare; do
	command -v $t >/dev/null || die "$t is missing: scripts/setup.sh"
done
mkdir -p "$work/lib"
ln -sf "$(cd "$RDMAFS_LIBDIR" && pwd)/libibverbs.so.1" "$work/lib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
export RDMAFS_LIBDIR=$work/lib
# the environment a new user has: no UCX_*, FI_*, RDMAFS_EXEC_SYSFS
unset $(compgen -e | grep -E '^(UCX_|FI_|RDMAFS_EXEC_SYSFS|RDMAFS_DEVICE_MOUNT)') 2>/dev/null || true

# The --addr mounts' addresses on an interface of their own, as a RoCE
# device's address is on its Ethernet interface: device/net names it, and
# libfabric's verbs provider looks for the address on an interface that is
# not loopback (TESTING.md, libfabric). Traffic to them still goes through lo.
ifname=rdisc$$
ip tuntap add dev "$ifname" mode tap || die "cannot create a tap interface for $A_ADDR and $B_ADDR"
at_exit 'ip link del "$ifname" 2>/dev/null'
ip link set "$ifname" up
ip addr add "$A_ADDR/32" dev "$ifname"
ip addr add "$B_ADDR/32" dev "$ifname"

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

# run MOUNTS CMD...: CMD through rdmafs exec on the devices of MOUNTS
# (colon-separated), its output in $work/out
run() {
	local mounts=$1
	shift
	if ! RDMAFS_DEVICE_MOUNT=$mounts timeout 60 "$RDMAFS" exec -- "$@" >"$work/out" 2>&1; then
		cat "$work/out"
		die "$* on $mounts failed"
	fi
}
has() { # PATTERN WHAT
	grep -qE -- "$1" "$work/out" || {
		cat "$work/out"
		die "$2: no /$1/ in the output"
	}
}
hasnt() {
	! grep -qE -- "$1" "$work/out" || {
		cat "$work/out"
		die "$2: /$1/ in the output"
	}
}

# check MOUNTS LINK_LAYER NAMES...: every tool sees each device
check() {
	local mounts=$1 ll=$2
	shift 2
	run "$mounts" ibstat
	for d in "$@"; do has "^CA '$d'" "ibstat ($d)"; done
	has "State: Active" ibstat
	has "Physical state: LinkUp" ibstat
	has "Link layer: $ll" ibstat
	has "Rate: 100" ibstat
	run "$mounts" ibstatus
	for d in "$@"; do has "^Infiniband device '$d' port 1 status:" "ibstatus ($d)"; done
	has "state:.*4: ACTIVE" ibstatus
	has "rate:.*100 Gb/sec \(4X EDR\)" ibstatus
	run "$mounts" ibv_devinfo -v
	for d in "$@"; do has "hca_id:.$d" "ibv_devinfo ($d)"; done
	has "state:.*PORT_ACTIVE" ibv_devinfo
	run "$mounts" ucx_info -d
	for d in "$@"; do
		has "Memory domain: $d\$" "ucx_info -d ($d)"
		has "Device: $d:1" "ucx_info -d ($d)"
	done
	has "Transport: rc_verbs" "ucx_info -d"
	has "Transport: ud_verbs" "ucx_info -d"
	hasnt "gid_attrs|failed to|DIAG" "ucx_info -d"
	run "$mounts" fi_info -p verbs
	for d in "$@"; do has "domain: $d\$" "fi_info -p verbs ($d)"; done
	has "type: FI_EP_MSG" "fi_info -p verbs"
	has "type: FI_EP_DGRAM" "fi_info -p verbs"
	echo "  ibstat, ibstatus, ibv_devinfo -v, ucx_info -d, fi_info -p verbs: $* ($ll)"
}

echo "== one local mount"
check "$M" InfiniBand rdmafs0
echo "== two --addr mounts ($A_ADDR, $B_ADDR)"
check "$MA:$MB" Ethernet rdmafs0 rdmafs1

echo "== the view agrees with libibverbs, and its counters are live"
# ibv_devinfo's LID, GID and GUID against the view's files (local mount)
run "$M" sh -c 'ibv_devinfo -v; d=/sys/class/infiniband/rdmafs0; echo "lid=$(cat $d/ports/1/lid) gid=$(cat $d/ports/1/gids/0) guid=$(cat $d/node_guid)"'
lid=$(sed -n 's/.*port_lid:[[:space:]]*//p' "$work/out")
gid=$(sed -n 's/.*GID\[  0\]:[[:space:]]*//p' "$work/out")
guid=$(sed -n 's/.*node_guid:[[:space:]]*//p' "$work/out")
has "lid=$(printf '0x%x' "$lid") gid=$gid guid=$guid" "the view against ibv_devinfo (lid $lid, gid $gid, guid $guid)"
run "$MA" sh -c 'd=/sys/class/infiniband/rdmafs0/ports/1; cat $d/gid_attrs/types/0 $d/gid_attrs/ndevs/0 $d/link_layer; ls /sys/class/infiniband/rdmafs0/device/net; readlink /sys/class/infiniband/rdmafs0/device/driver; cat /sys/class/infiniband_verbs/uverbs0/ibdev; test -c /dev/infiniband/uverbs0 && echo chardev'
for p in "^RoCE v2\$" "^$ifname\$" "^Ethernet\$" "/rdmafs\$" "^rdmafs0\$" "^chardev\$"; do has "$p" "the RoCE mount's view"; done
c=/sys/class/infiniband/rdmafs0/ports/1/counters/port_xmit_packets
run "$M" sh -c "cat $c; ibv_rc_pingpong -n 10 >/dev/null 2>&1 & sleep 0.5; ibv_rc_pingpong -n 10 localhost >/dev/null 2>&1; wait; cat $c"
read -r before after <<<"$(tr '\n' ' ' <"$work/out")"
((after >= before + 20)) || die "port_xmit_packets $before before 20 pingpong messages, $after after"
echo "  port_xmit_packets $before -> $after across a pingpong of 10 round trips, read in one namespace"

echo "== a user other than root"
if id nobody >/dev/null 2>&1 && (($(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0) > 0)); then
	cp "$RDMAFS" "$work/rdmafs-nr"
	chmod 755 "$work/rdmafs-nr" "$work/lib"
	RDMAFS_DEVICE_MOUNT=$M timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$work/rdmafs-nr" exec -- sh -c 'id -u; ibstat -l; test -c /dev/infiniband/uverbs0 && echo chardev; cd '"$M"' && { echo "" >&0; read -r pd; } <>pd/new && echo pd=$pd' >"$work/out" 2>&1 ||
		{ cat "$work/out"; die "rdmafs exec as nobody"; }
	for p in "^65534\$" "^rdmafs0\$" "^chardev\$" "^pd=[0-9]+\$"; do has "$p" "as nobody"; done
	pd=$(sed -n 's/^pd=//p' "$work/out")
	[[ $(stat -c %u "$M/pd/$pd") == 65534 ]] || die "the daemon made PD $pd for uid $(stat -c %u "$M/pd/$pd"), not 65534"
	rmdir "$M/pd/$pd"
	echo "  nobody: its own uid in the program and at the daemon (PD $pd), the device in ibstat, /dev/infiniband/uverbs0"
else
	echo "  skipped: no user nobody or no user namespaces"
fi

echo "== RDMAFS_EXEC_SYSFS=0"
RDMAFS_EXEC_SYSFS=0 RDMAFS_DEVICE_MOUNT=$M timeout 60 "$RDMAFS" exec -- sh -c 'ls /sys/class/infiniband 2>&1; ibv_devices' >"$work/out" 2>&1 || true
has "No such file" "RDMAFS_EXEC_SYSFS=0"
has "rdmafs0" "RDMAFS_EXEC_SYSFS=0 (libibverbs still lists the device)"
echo "  no /sys/class/infiniband; ibv_devices still lists rdmafs0"
echo "discovery: all checks passed"
