#!/usr/bin/env bash
# bench-rsockets.sh [ROUNDS]: stream sockets three ways over loopback, in
# the same run, with Debian's unmodified rstream (rdmacm-utils):
#   rsockets   rstream on rdmafs's rsockets (one local mount, 127.0.0.1)
#   tcp        rstream -T s: the kernel's TCP over lo
#   preload    rstream -T s under librspreload.so: the same socket calls
#              moved onto rsockets on the mount
# Each ROUNDS times (default 3), alternating: latency, a blocking 64-byte
# ping-pong (-S 64 -C 1 -I 2000: usec per transfer, one way), and
# bandwidth, blocking 1 MiB transfers both ways (-S 1048576 -C 200:
# Gb/sec). Prints every run, then the median of each. Needs root.
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"
ROUNDS=${1:-3}
command -v rstream >/dev/null || die "rstream is missing: apt-get install rdmacm-utils"
PRELOAD=${PRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
mkdir -p "$work/lib"
ln -sf "$RDMAFS_LIBDIR/libibverbs.so.1" "$work/lib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
export RDMAFS_LIBDIR=$work/lib
"$RDMAFS" mount --log "$work/daemon.log" "$M"
port=7700

# one KIND ARGS...: one rstream pair; prints its result line
one() {
	local kind=$1 pre=()
	shift
	port=$((port + 1))
	local t=()
	case $kind in
	tcp) t=(-T s) ;;
	preload) t=(-T s) pre=(env LD_PRELOAD="$PRELOAD") ;;
	esac
	"$RDMAFS" exec --mount "$M" -- timeout 120 "${pre[@]}" rstream -b 127.0.0.1 -p $port "${t[@]}" "$@" >"$work/s.log" 2>&1 &
	local spid=$!
	sleep 0.5
	"$RDMAFS" exec --mount "$M" -- timeout 120 "${pre[@]}" rstream -s 127.0.0.1 -p $port "${t[@]}" "$@" >"$work/c.log" 2>&1 ||
		{ cat "$work/c.log" "$work/s.log"; die "$kind rstream $*"; }
	wait $spid || { cat "$work/s.log"; die "$kind rstream server $*"; }
	grep "^custom" "$work/c.log"
}

declare -A lat bw
for r in $(seq "$ROUNDS"); do
	for kind in rsockets tcp preload; do
		b0=$(awk -F= '$1 == "bytes_sent" {print $2}' "$M/counters")
		l=$(one $kind -T b -S 64 -C 1 -I 2000)
		w=$(one $kind -T b -S 1048576 -C 200)
		b1=$(awk -F= '$1 == "bytes_sent" {print $2}' "$M/counters")
		printf 'round %d %-8s lat: %s\n               bw:  %s   (device bytes +%d)\n' "$r" $kind "$l" "$w" $((b1 - b0))
		lat[$kind]+="$(awk '{print $NF}' <<<"$l") "
		bw[$kind]+="$(awk '{print $(NF-1)}' <<<"$w") "
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
printf '%-9s %22s %20s\n' setup "64 B latency (us/xfer)" "1 MiB bw (Gb/sec)"
for kind in rsockets tcp preload; do
	printf '%-9s %22s %20s\n' $kind "$(median <<<"${lat[$kind]}")" "$(median <<<"${bw[$kind]}")"
done
