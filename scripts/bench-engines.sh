#!/usr/bin/env bash
# bench-engines.sh: how `rdmafs bench` scales with client threads and with
# the daemon's engines. For E in 1..MAX_ENGINES a device is mounted with
# `rdmafs mount --engines E`, and for N in 1..MAX_QPS it runs, ROUNDS rounds
# (alternating), WRITE bw with N QP pairs on N client threads (--qps N
# --threads N, one pair a thread) for DUR seconds at 8 bytes (message rate)
# and at 64 KiB (bandwidth). Prints every run, then a table of medians over
# the rounds: Mpps at 8 B, GB/s (10^9 bytes/s) at 64 KiB, and the daemon's
# CPU seconds per run (utime+stime from /proc/PID/stat around the whole
# bench process: set-up, warm-up, timed phase).
#
#   sudo scripts/bench-engines.sh                     # MAX_ENGINES=2 MAX_QPS=2 ROUNDS=3 DUR=1
#   MAX_ENGINES=1 ROUNDS=1 DUR=1 scripts/bench-engines.sh
#
# A binary whose `mount --help` has no --engines runs E=1 only (the
# daemon's default), with a note. Needs root (the mount) and /dev/fuse.
# By hand; not part of the tests (TestScripts, test.sh). Takes about
# MAX_ENGINES * ROUNDS * MAX_QPS * 2 * (DUR + 1) s.
source "$(dirname "$0")/lib.sh"
MAX_ENGINES=${MAX_ENGINES:-2}
MAX_QPS=${MAX_QPS:-2}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-1}
results=$work/results.tsv
: >"$results"
# record, median, jnum.
source "$here/bench-lib.sh"

grep -q -- '--threads' <<<"$("$RDMAFS" bench --help 2>&1)" ||
	die "$RDMAFS bench has no --threads: build this tree's rdmafs (unset RDMAFS, or put it first in PATH)"
engines=$MAX_ENGINES
have_engines=1
if ! grep -q -- '--engines' <<<"$("$RDMAFS" mount --help 2>&1)"; then
	have_engines=""
	engines=1
	echo "NOTE: $RDMAFS mount has no --engines flag yet: running engines=1 only (the daemon's default), MAX_ENGINES=$MAX_ENGINES ignored"
fi

echo "# machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); rdmafs $(cd "$repo" && git describe --always --dirty 2>/dev/null || echo unknown)"
echo "# $ROUNDS rounds of WRITE bw, ${DUR}s a run; N QP pairs on N threads (--qps N --threads N)"

hz=$(getconf CLK_TCK)
ticks() { awk '{ i = index($0, ") "); split(substr($0, i + 2), f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
id=$(printf '%s' "$M" | sed 's:^/*::; s:/*$::; s:/:_:g')

# one E N SIZE KEY ROUND: one bench run; records KEY's value and the
# daemon's CPU seconds, prints both.
one() {
	local e=$1 n=$2 size=$3 key=$4 round=$5 out t0 t1 v cpu
	t0=$(ticks "$DPID")
	out=$("$RDMAFS" bench --json --op write --size "$size" --qps "$n" --threads "$n" -D "${DUR}s" "$M") ||
		die "rdmafs bench --op write --size $size --qps $n --threads $n (engines $e)"
	t1=$(ticks "$DPID")
	grep -q '"check":"ok"' <<<"$out" || die "engines $e, $n threads, $size B: data check: $out"
	grep -q "\"threads\":$n," <<<"$out" || die "engines $e: asked for $n threads: $out"
	echo "$out" >>"$work/rdmafs-bench.txt"
	v=$(jnum "$key" <<<"$out")
	if [[ $key == bw_avg_mbs ]]; then
		v=$(awk -v v="$v" 'BEGIN { printf "%.3f", v * 1048576 / 1e9 }')
	else
		v=$(awk -v v="$v" 'BEGIN { printf "%.3f", v }')
	fi
	cpu=$(awk -v t="$((t1 - t0))" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }')
	record "$round" "e$e.n$n.s$size" "$v"
	record "$round" "e$e.n$n.s$size.cpu" "$cpu"
	printf ' %s B: %s %s (daemon %ss)' "$size" "$v" "$([[ $key == bw_avg_mbs ]] && echo GB/s || echo Mpps)" "$cpu"
}

for e in $(seq 1 "$engines"); do
	eflag=()
	[[ -n "$have_engines" ]] && eflag=(--engines "$e")
	"$RDMAFS" mount --log "$work/daemon.log" "${eflag[@]}" "$M"
	DPID=$(head -n 1 "/run/rdmafs/$id.pid")
	kill -0 "$DPID" 2>/dev/null || die "no daemon pid for $M"
	echo
	echo "## engines $e: daemon pid $DPID serving $M"
	for r in $(seq 1 "$ROUNDS"); do
		for n in $(seq 1 "$MAX_QPS"); do
			printf '  round %d, %d qps/threads:' "$r" "$n"
			one "$e" "$n" 8 msg_rate_mpps "$r"
			one "$e" "$n" 65536 bw_avg_mbs "$r"
			echo
		done
	done
	"$RDMAFS" umount "$M"
done

echo
echo "# medians over $ROUNDS rounds; daemon CPU is seconds per bench run (${DUR}s timed plus set-up and warm-up)"
printf '  %7s %12s %10s %13s %17s %19s\n' engines qps/threads "Mpps(8B)" "GB/s(64KiB)" "daemon_cpu_s(8B)" "daemon_cpu_s(64KiB)"
for e in $(seq 1 "$engines"); do
	for n in $(seq 1 "$MAX_QPS"); do
		printf '  %7d %12d %10.3f %13.3f %17.2f %19.2f\n' "$e" "$n" \
			"$(median "e$e.n$n.s8")" "$(median "e$e.n$n.s65536")" \
			"$(median "e$e.n$n.s8.cpu")" "$(median "e$e.n$n.s65536.cpu")"
	done
done
