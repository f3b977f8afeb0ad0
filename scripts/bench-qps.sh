#!/usr/bin/env bash
# bench-qps.sh: scaling with QPs (issue #25). The aggregate 8-byte RDMA
# WRITE rate of one client thread posting round-robin over 1, 16, 256 and
# 3,072 connected RC QPs of one mount (bench/c/qpscale.c, through the
# drop-in libibverbs), then the same in the daemon's process up to 4,096
# QPs (device's BenchmarkWriteQPs: the C program's ring files cost the
# daemon 6 descriptors a QP, and 4,096 would pass this host's limit of
# 20,000), and what one doorbell wake costs the daemon at 16 and 4,096
# QPs that can send (BenchmarkBellWake). ROUNDS rounds, alternating.
# With BASE (a git revision), the same on BASE's daemon and library in
# the same rounds, alternating with this tree's, and the ratios. By hand
# (BENCHMARKS.md); not a test.
#
#   scripts/bench-qps.sh [ROUNDS] [SECONDS] [BASE]
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"
rounds=${1:-3}
secs=${2:-1}
base=${3:-}
counts=(1 16 256 3072)
cc -O2 -g -Wall -Wextra -Werror -o "$work/qpscale" "$repo/bench/c/qpscale.c" -libverbs
mountopts=(--max-qp 3200 --user-share 100)
pp "$RDMAFS" mount --log "$work/daemon.log" "${mountopts[@]}" "$M"
sides=(this)
declare -A bin=([this]=$RDMAFS) mnt=([this]=$M) lib=([this]=$RDMAFS_LIBDIR) tree=([this]=$repo)
if [[ -n $base ]]; then
	sides=(base this)
	git -C "$repo" worktree add -q --detach "$work/base" "$base"
	at_exit "git -C '$repo' worktree remove --force '$work/base'"
	(cd "$work/base" && go build -o "$work/rdmafs-base" ./cmd/rdmafs)
	make -s -C "$work/base/libibverbs" >/dev/null || die "make -C $work/base/libibverbs"
	mkdir -p "$work/mnt-base"
	pp "$work/rdmafs-base" mount --log "$work/daemon-base.log" "${mountopts[@]}" "$work/mnt-base"
	at_exit "'$work/rdmafs-base' umount '$work/mnt-base'"
	bin[base]=$work/rdmafs-base mnt[base]=$work/mnt-base lib[base]=$work/base/libibverbs/build tree[base]=$work/base
fi
declare -A rate gobench
for r in $(seq "$rounds"); do
	for n in "${counts[@]}"; do
		for s in "${sides[@]}"; do
			line=$(RDMAFS_LIBDIR=${lib[$s]} "${bin[$s]}" exec --mount "${mnt[$s]}" -- timeout 300 "$work/qpscale" "$n" "$secs") ||
				die "qpscale $n ($s) failed"
			rate[$s,$n]+="$(awk '{print $8}' <<<"$line") "
		done
	done
	for s in "${sides[@]}"; do
		gobench[$s]+=$(cd "${tree[$s]}" && go test -run '^$' -bench 'BenchmarkWriteQPs|BenchmarkBellWake' -benchtime "${secs}s" ./device | grep '^Benchmark')$'\n'
	done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for s in "${sides[@]}"; do
	echo "== $s: 8 B RDMA WRITE, one C thread round-robin: Mpps per round, median, median against 1 QP"
	b1=$(med "${rate[$s,1]}")
	for n in "${counts[@]}"; do
		m=$(med "${rate[$s,$n]}")
		printf '%5d QPs: %s (median %s, %.2fx)\n' "$n" "${rate[$s,$n]}" "$m" "$(echo "$m / $b1" | bc -l)"
	done
	echo "== $s: in the daemon's process (Mpps), and one doorbell wake (ns/op)"
	printf '%s' "${gobench[$s]}" | sort -s -k1,1
done
if [[ -n $base ]]; then
	echo "== this tree against $base: ratio of the medians (C, Mpps)"
	for n in "${counts[@]}"; do
		printf '%5d QPs: %.2fx\n' "$n" "$(echo "$(med "${rate[this,$n]}") / $(med "${rate[base,$n]}")" | bc -l)"
	done
fi
