#!/usr/bin/env bash
# bench-cmtime.sh [CONNS] [ROUNDS]: RDMA CM connection setup on rdmafs with
# Debian's unmodified cmtime (rdmacm-utils) through the drop-in librdmacm
# and libibverbs (rdmafs exec): CONNS connections (default 100) per run,
# ROUNDS runs (default 3) of each setup, alternating, and as many runs of
# one connection (its latency alone):
#   local   one local mount, server and client over 127.0.0.1 (MADs on
#           QP1 through the device's loopback);
#   wire    two --addr mounts on 127.0.86.1 and 127.0.86.2 (RoCEv2 UDP
#           over the loopback interface, a daemon each).
# Prints cmtime's step table of every run (total ms, max ms, min us and
# us per connection of each step; cmtime runs each step for all CONNS ids
# at once, so "connect" is the wall time of CONNS concurrent handshakes),
# then per setup the median over the rounds of connect's total and us/conn
# and of the whole run's wall time. RXE=1 also runs kernel rxe <-> rxe in
# the harness of interop-rxe.sh (two TCG guests; cmtime in each, about a
# minute a round) for comparison. Needs root.
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"
CONNS=${1:-100}
ROUNDS=${2:-3}
command -v cmtime >/dev/null || die "cmtime is missing: apt-get install rdmacm-utils"
MA=$work/mnta MB=$work/mntb
mkdir -p "$MA" "$MB"
"$RDMAFS" mount --log "$work/daemon.log" "$M"
"$RDMAFS" mount --log "$work/daemon-a.log" --addr 127.0.86.1 "$MA"
"$RDMAFS" mount --log "$work/daemon-b.log" --addr 127.0.86.2 "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'
port=7600

# run SETUP SERVER_MOUNT CLIENT_MOUNT ADDR: one cmtime run, its table in
# $work/SETUP.N.
run() {
	local setup=$1 sm=$2 cm=$3 addr=$4 n=$5 conns=$6
	port=$((port + 1))
	"$RDMAFS" exec --mount "$sm" -- timeout 120 cmtime -b "$addr" -p $port >"$work/srv.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		grep -q " port=$port " "$sm/cm/listeners" 2>/dev/null && break
		sleep 0.05
	done
	local t0 t1 rc=0
	t0=$(date +%s%N)
	"$RDMAFS" exec --mount "$cm" -- timeout 120 cmtime -s "$addr" -p $port -c "$conns" >"$work/$setup.$n" 2>&1 || rc=$?
	t1=$(date +%s%N)
	kill -TERM $spid 2>/dev/null || true
	wait $spid 2>/dev/null || true
	((rc == 0)) || { cat "$work/$setup.$n" "$work/srv.log"; die "cmtime ($setup) failed"; }
	echo "wall_ms $(((t1 - t0) / 1000000))" >>"$work/$setup.$n"
	echo "-- $setup, round $n ($conns connections)"
	cat "$work/$setup.$n"
}
for n in $(seq "$ROUNDS"); do
	run local "$M" "$M" 127.0.0.1 $n "$CONNS"
	run wire "$MA" "$MB" 127.0.86.1 $n "$CONNS"
	run local1 "$M" "$M" 127.0.0.1 $n 1
	run wire1 "$MA" "$MB" 127.0.86.1 $n 1
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
summary() {
	local setup=$1 conns=$2
	local tot per wall
	tot=$(cat "$work/$setup".* | awk '$1 == "connect" {print $3}' | median)
	per=$(cat "$work/$setup".* | awk '$1 == "connect" {print $NF}' | median)
	wall=$(cat "$work/$setup".* | awk '$1 == "wall_ms" {print $2}' | median)
	printf '%-8s connect total %8s ms  %8s us/conn  %6.0f conn/s  run wall %6s ms\n' "$setup" "$tot" "$per" \
		"$(awk -v t="$tot" -v c="$conns" 'BEGIN {print (t > 0) ? c * 1000 / t : 0}')" "$wall"
}
echo "== medians over $ROUNDS rounds; local1/wire1: one connection a run (its setup latency)"
summary local "$CONNS"
summary wire "$CONNS"
summary local1 1
summary wire1 1
