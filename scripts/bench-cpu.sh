#!/usr/bin/env bash
# bench-cpu.sh: the engine's CPU per WR (issue #25): the daemon's CPU time
# (utime+stime of /proc/PID/stat, all its threads) over the WRs it ran (the
# mount's counters: direct_ops, the WRs executed between the device's own
# QPs), at 8 B WRITE and FETCH_AND_ADD with `rdmafs bench` as
# bench-vs-peers.sh runs them (one QP pair, tx depth 128, every 64th WR
# signalled), ROUNDS rounds alternating the two. In each round a second run
# of each is profiled (`perf record -g -p DAEMON`), and the samples, by the
# function they fell in, are grouped into named parts, printed as ns per
# WR of that run: WQE fetch and validation, key/MR lookup, the data copy,
# the responder's check and apply, the requester's and the direct path's
# bookkeeping, CQE write, scheduling/spin/park, Go runtime, kernel, other.
# Then the daemon's system calls per WR (perf stat -e raw_syscalls:sys_enter
# -p DAEMON across an 8 B WRITE run) and its CPU over 10 s idle.
#
#   sudo scripts/bench-cpu.sh [ROUNDS] [SECONDS]    # 3 rounds of 2 s runs
#
# Needs root (the mount; perf on another process), /dev/fuse, Go and perf.
# Takes about ROUNDS * (4*SECONDS + 10) s + 20 s; every command is
# bounded by timeout. By hand (BENCHMARKS.md); not a test. KEEP=DIR keeps
# the raw outputs (perf reports, bench JSON).
source "$(dirname "$0")/lib.sh"
source "$here/bench-lib.sh"
trap 'exit 143' TERM
trap 'exit 130' INT
rounds=${1:-3}
secs=${2:-2}
results=$work/results.tsv
: >"$results"
((EUID == 0)) || die "needs root (the mount, perf -p)"
command -v perf >/dev/null || die "needs perf"
at_exit bench_teardown

echo "# rdmafs $(cd "$repo" && git describe --always --dirty 2>/dev/null), $(date -u '+%F %H:%M UTC'), $(nproc) CPUs:" \
	"$(busy) busy, load average $(cut -d' ' -f1-3 /proc/loadavg)"
mount_device >/dev/null
id=$(printf '%s' "$M" | sed 's:^/*::; s:/*$::; s:/:_:g')
DPID=$(head -n 1 "/run/rdmafs/$id.pid")
kill -0 "$DPID" || die "no daemon pid for $M"
echo "  daemon: pid $DPID serving $M"
hz=$(getconf CLK_TCK)

# counter NAME: a device counter from the mount's counters file.
counter() { awk -F= -v k="$1" '$1 == k { print $2 }' "$M/counters"; }
# wrs_now: the WRs the device ran so far.
wrs_now() { counter direct_ops; }

# run OP ARGS...: one `rdmafs bench` of SECONDS; sets CPU_NS (the daemon's
# CPU over the run), WRS (the device's WRs over it), BENCH_WRS (the bench's
# timed WRs) and RATE (Mpps).
run() {
	local w0 t0 out
	w0=$(wrs_now)
	t0=$(daemon_ticks)
	out=$(timeout $((secs + 60)) "$RDMAFS" bench --json "$@" -D "${secs}s" "$M") || die "rdmafs bench $*"
	echo "$out" >>"$work/bench.txt"
	grep -q '"check":"ok"' <<<"$out" || die "rdmafs bench $*: data check: $out"
	CPU_NS=$((($(daemon_ticks) - t0) * 1000000000 / hz))
	WRS=$(($(wrs_now) - w0))
	BENCH_WRS=$(jnum wrs <<<"$out")
	RATE=$(printf '%.2f' "$(jnum msg_rate_mpps <<<"$out")")
	((WRS > 0)) || die "the device counted no WRs over rdmafs bench $* (counters: $(tr '\n' ' ' <"$M/counters"))"
}

# parts REPORT NS_PER_WR: the profile's self samples by symbol (perf
# report --no-children --sort symbol), grouped into the named parts; prints
# "part share ns" lines, then the top symbols the groups left in "other".
parts() {
	python3 - "$1" "$2" <<'EOF'
import re, sys
rep, nswr = sys.argv[1], float(sys.argv[2])
# First match wins; the patterns are Go and kernel symbol names.
groups = [
    ("WQE fetch and validation", r"DecodeSendWQE|ValidateSendWR|checkWQE|fetchLocked|fetchSend|checkSGL|\(\*Consumer\)|\(\*SendPoster\)|validate|ring\.\(\*Ring\)\.(LoadProducer|Slot)"),
    ("key/MR lookup", r"lkey|rkey|Key|\(\*MR\)|mrFor|keys\."),
    ("data copy", r"memmove|copyChunks|memclr|copyTo|copyFrom|\.copy|scatter|gather"),
    ("responder check/apply", r"resp|execute|checkRemote|checkAtomic|WriteTarget|applyAtomic|atomic[A-Z]|fetchAdd|FetchAdd|cmpSwap"),
    ("CQE write", r"\(\*CQ\)|postLocked|EncodeCQE|completeSend|completeRecv|complete[A-Z]|cqe|CQE|\(\*Producer\)"),
    ("requester/direct-path bookkeeping", r"direct|ackThrough|retire|armRetry|requester|progress|ownRead|psn|PSN|outstanding"),
    ("scheduling/spin/park", r"engine\)|\.spin|runBatches|runTurn|runLocked|turn|schedule|park|Park|wake|Wake|timers|doorbellLoop|^time\.|futex|finish_task_switch|__schedule|irqentry_exit|pick_next|_raw_spin|clock_gettime|vdso|nanosleep|sched_yield|do_syscall|entry_SYSCALL|syscall_exit|__x64_sys"),
    ("Go runtime", r"^runtime\.|^sync\.|^internal/|gcBgMark|mallocgc|scanobject"),
    ("kernel", r"^\[k\]"),
]
rx = [(n, re.compile(p)) for n, p in groups]
tot = {n: 0.0 for n, _ in groups}
tot["other"] = 0.0
left = []
for line in open(rep):
    m = re.match(r"\s+([0-9.]+)%\s+(\[[k.]\])\s+(.*?)\s*$", line)
    if not m:
        continue
    pct, kind, sym = float(m.group(1)), m.group(2), re.split(r"\s{2,}", m.group(3))[0]
    name = sym if kind == "[.]" else "[k] " + sym
    for n, r in rx:
        if r.search(name):
            tot[n] += pct
            break
    else:
        tot["other"] += pct
        left.append((pct, name))
s = sum(tot.values()) or 1
for n in list(tot):
    print("%s\t%.1f\t%.1f" % (n, 100 * tot[n] / s, nswr * tot[n] / s))
for pct, name in sorted(left, reverse=True)[:4]:
    print("other: %.1f%% %s" % (100 * pct / s, name))
EOF
}

ops=("write8:--op write -s 8" "fetch_add:--op fetch_add")
echo
echo "# $rounds rounds of ${secs}s runs, alternating; per run: Mpps, the device's WRs, the daemon's CPU, ns of daemon CPU per WR"
for r in $(seq "$rounds"); do
	echo "  round $r (CPUs $(busy) busy before it, load average $(cut -d' ' -f1 /proc/loadavg))"
	for o in "${ops[@]}"; do
		name=${o%%:*}
		read -ra args <<<"${o#*:}"
		run "${args[@]}"
		ns=$(awk -v c="$CPU_NS" -v w="$WRS" 'BEGIN { printf "%.1f", c / w }')
		record "$r" "$name.ns_per_wr" "$ns"
		record "$r" "$name.mpps" "$RATE"
		printf '    %-10s %7s Mpps  %10d WRs (bench: %d timed)  %6.3f s CPU  %7s ns/WR\n' "$name" "$RATE" "$WRS" "$BENCH_WRS" \
			"$(awk -v c="$CPU_NS" 'BEGIN { print c / 1e9 }')" "$ns"
		# The same run under perf record: the breakdown.
		timeout $((secs + 30)) perf record -q -g -F 999 -o "$work/perf-$name-$r.data" -p "$DPID" -- sleep $((secs + 1)) >/dev/null 2>&1 &
		pr=$!
		sleep 0.3
		run "${args[@]}"
		wait "$pr" || true
		pns=$(awk -v c="$CPU_NS" -v w="$WRS" 'BEGIN { printf "%.1f", c / w }')
		timeout 300 perf report -i "$work/perf-$name-$r.data" --no-children --sort symbol --stdio -g none \
			>"$work/perf-$name-$r.txt" 2>/dev/null || die "perf report"
		parts "$work/perf-$name-$r.txt" "$pns" >"$work/parts-$name-$r.txt"
		while IFS=$'\t' read -r part share nsp; do
			[[ $part == other:* ]] && continue
			record "$r" "$name.part.$part" "$nsp"
			record "$r" "$name.share.$part" "$share"
		done <"$work/parts-$name-$r.txt"
		record "$r" "$name.profiled_ns_per_wr" "$pns"
		printf '    %-10s %7s Mpps  %10d WRs under perf record  %7s ns/WR\n' "$name" "$RATE" "$WRS" "$pns"
	done
done

echo
echo "# daemon CPU per WR, median [min..max] over $rounds rounds"
for o in "${ops[@]}"; do
	name=${o%%:*}
	printf '  %-10s %8s ns/WR [%s]  at %s Mpps; under perf record %s ns/WR\n' "$name" "$(median "$name.ns_per_wr")" \
		"$(range "$name.ns_per_wr")" "$(median "$name.mpps")" "$(median "$name.profiled_ns_per_wr")"
done

echo
echo "# the breakdown: ns of daemon CPU per WR by part (perf samples' share of the profiled run's CPU per WR), median over $rounds rounds [share of samples]"
printf '  %-36s %18s %18s\n' part write8 fetch_add
awk -F'\t' '$2 ~ /^write8\.part\./ { sub(/^write8\.part\./, "", $2); if (!($2 in seen)) { seen[$2] = 1; print $2 } }' "$results" |
	while read -r part; do
		printf '  %-36s %9s [%5s%%] %9s [%5s%%]\n' "$part" \
			"$(median "write8.part.$part")" "$(median "write8.share.$part")" \
			"$(median "fetch_add.part.$part")" "$(median "fetch_add.share.$part")"
	done
echo "  what 'other' holds (the last round):"
for o in "${ops[@]}"; do
	name=${o%%:*}
	grep '^other:' "$work/parts-$name-$rounds.txt" | sed "s/^other:/    $name:/"
done
echo "  the last round's profile at 8 B WRITE, top 15 symbols (perf report --no-children --sort symbol):"
# (awk, not head: a pipe closed early fails the script under pipefail)
awk '/^ +[0-9.]+%/ && n++ < 15 { sub(/( +-)+ *$/, ""); print "  " $0 }' "$work/perf-write8-$rounds.txt"

echo
echo "# the daemon's system calls per WR (perf stat -e raw_syscalls:sys_enter -p DAEMON across an 8 B WRITE run, less one across a run of 1 WR: the set-up's FUSE requests)"
# dcalls CMD...: the daemon's system calls while CMD runs: CALLS in all,
# and BY, the counts of the named ones.
sc=(futex nanosleep sched_yield epoll_pwait read writev)
dcalls() {
	local ev=raw_syscalls:sys_enter n
	for n in "${sc[@]}"; do ev+=,syscalls:sys_enter_$n; done
	timeout 120 perf stat -x, -e "$ev" -o "$work/perf-stat.txt" -p "$DPID" &
	local ps_=$!
	sleep 0.3
	"$@"
	sleep 0.2
	kill -INT "$ps_" 2>/dev/null || true
	wait "$ps_" || true
	CALLS=$(grep raw_syscalls "$work/perf-stat.txt" | cut -d, -f1)
	BY=()
	for n in "${sc[@]}"; do BY+=("$(grep "sys_enter_$n," "$work/perf-stat.txt" | cut -d, -f1)"); done
}
dcalls timeout 60 "$RDMAFS" bench --op write -s 8 --iters 1 --warmup 1 "$M" >/dev/null
c0=$CALLS
by0=("${BY[@]}")
dcalls run --op write -s 8
awk -v c="$CALLS" -v c0="$c0" -v w="$WRS" -v r="$RATE" 'BEGIN { printf "  %d system calls over %d WRs (%s Mpps), %d of them the set-up = %.6f per WR beyond it; by call, per WR beyond the set-up:\n", c, w, r, c0, (c - c0) / w }'
for i in "${!sc[@]}"; do
	awk -v n="${sc[$i]}" -v c="${BY[$i]:-0}" -v c0="${by0[$i]:-0}" -v w="$WRS" 'BEGIN { printf "    %-12s %8d  %.6f\n", n, c - c0, (c - c0) / w }'
done

echo "# the daemon's CPU over 10 s idle, right after a run"
t0=$(daemon_ticks)
s0=$(date +%s.%N)
sleep 10
t1=$(daemon_ticks)
s1=$(date +%s.%N)
awk -v t="$((t1 - t0))" -v hz="$hz" -v s0="$s0" -v s1="$s1" 'BEGIN {
	printf "  %d ticks = %.2f s of CPU in %.1f s = %.3f%% of a core (target 0)\n", t, t / hz, s1 - s0, 100 * t / hz / (s1 - s0) }'
echo "  CPUs busy at the end: $(busy), load average $(cut -d' ' -f1-3 /proc/loadavg)"
