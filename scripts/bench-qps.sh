#!/usr/bin/env bash
# bench-qps.sh: scaling with QPs (issue #25). The aggregate 8-byte RDMA
# WRITE rate of one client thread posting round-robin over 1, 16, 256 and
# 4,096 connected RC QPs of one mount (bench/c/qpscale.c, through the
# drop-in libibverbs), ROUNDS rounds, alternating the counts; then what
# one doorbell wake costs the daemon at 16 and 4,096 QPs that can send
# (device's BenchmarkBellWake). By hand (BENCHMARKS.md); not a test.
#
#   scripts/bench-qps.sh [ROUNDS] [SECONDS]
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"
rounds=${1:-3}
secs=${2:-1}
counts=(1 16 256 4096)
cc -O2 -g -Wall -Wextra -Werror -o "$work/qpscale" "$repo/bench/c/qpscale.c" -libverbs
# 4,096 QPs in pairs, and one CQ of 4 x 4,096 CQEs; each ring is a memfd.
pp "$RDMAFS" mount --log "$work/daemon.log" --max-qp 4200 --user-share 100 "$M"
declare -A rate
for r in $(seq "$rounds"); do
	for n in "${counts[@]}"; do
		line=$("$RDMAFS" exec --mount "$M" -- timeout 300 "$work/qpscale" "$n" "$secs") || die "qpscale $n failed"
		rate[$n]+="$(awk '{print $8}' <<<"$line") "
	done
done
echo "== 8 B RDMA WRITE, one thread round-robin: Mpps per round (ratio of the medians to 1 QP)"
med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(med "${rate[1]}")
for n in "${counts[@]}"; do
	m=$(med "${rate[$n]}")
	printf '%5d QPs: %s (median %s, %.2fx)\n' "$n" "${rate[$n]}" "$m" "$(echo "$m / $base" | bc -l)"
done
echo "== one doorbell wake, by QPs that can send (ns/op)"
(cd "$repo" && go test -run '^$' -bench 'BenchmarkBellWake' -count "$rounds" ./device) | grep '^Benchmark'
