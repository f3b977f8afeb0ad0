#!/usr/bin/env bash
# soak.sh [SECONDS] [PROCS]: load a mounted device for SECONDS (default 60)
# with PROCS (default 4) processes at once, each looping over the Go
# RC examples (ping-pong and RDMA WRITE/READ: every one creates
# its objects, moves data, checks it and exits, so its lease destroys what
# it made), under the fault injector (drop, duplicate, reorder); UD is left
# out, since a datagram ping-pong that loses a datagram rightly fails. It reports
# the runs done, the failures, the transport's recovery counters, and the
# daemon's goroutines, heap, threads and RSS before and after. Bounded: it
# stops by itself; exits non-zero on any failed run or leaked object.
source "$(dirname "$0")/lib.sh"
secs=${1:-60}
procs=${2:-4}

mount_device
bin=$work/bin
mkdir -p "$bin"
for x in rc_pingpong rdma_rw; do
	(cd "$repo" && go build -o "$bin/$x" "./examples/$x")
done
# The daemon's pid file is named after the mountpoint (see rdmafs umount).
pid=$(head -n 1 "/run/rdmafs/$(echo "${M#/}" | tr / _).pid")
footprint() {
	grep -E '^daemon_(goroutines|heap_bytes)=' "$M/counters" | tr '\n' ' '
	[[ -n "$pid" ]] && grep -E '^(Threads|VmRSS):' /proc/"$pid"/status | tr -s ' \t' ' ' | tr '\n' ' '
	echo
}
echo "before: $(footprint)"
show "echo 'drop=0.01 dup=0.01 reorder=0.01 seed=7' > $M/faults"

end=$((SECONDS + secs))
worker() {
	local n=0 fail=0 x
	while ((SECONDS < end)); do
		for x in rc_pingpong rdma_rw; do
			if "$bin/$x" -mount "$M" >"$work/$1.$x.log" 2>&1; then
				n=$((n + 1))
			else
				fail=$((fail + 1))
				cp "$work/$1.$x.log" "$work/fail.$1.$n.$x.log"
			fi
		done
	done
	echo "$n $fail" >"$work/result.$1"
}
for i in $(seq 1 "$procs"); do worker "$i" & done
wait

runs=0 fails=0
for i in $(seq 1 "$procs"); do
	read -r n f <"$work/result.$i"
	runs=$((runs + n)) fails=$((fails + f))
done
echo "off" >"$M/faults"
show "cat $M/faults"
grep -E '^(retransmits|retry_timeouts|seq_err_naks|duplicate_requests|rnr_naks_sent|completions|error_completions)=' "$M/counters"
sleep 1
echo "after:  $(footprint)"
left=$(ls "$M"/qp "$M"/cq "$M"/mr "$M"/pd 2>/dev/null | grep -cE '^[0-9]+$' || true)
echo "soak: $secs s, $procs processes: $runs runs passed, $fails failed, $left objects left"
for f in "$work"/fail.*; do [[ -e "$f" ]] && { echo "--- $f"; tail -5 "$f"; }; done
((fails == 0)) || die "$fails runs failed"
((left == 0)) || die "$left objects outlived their programs"
echo "soak: all checks passed"
