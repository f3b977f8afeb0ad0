#!/usr/bin/env bash
# bench-mem.sh: what registering the program's memory costs and how fast
# the device moves it (bench/c/memreg.c), beside memcpy of the same sizes
# in the same run: ibv_reg_mr+ibv_dereg_mr from 4 KiB to 1 GiB for
# private, shared and on-demand memory, and 64 KiB RDMA WRITE and READ
# from and into each, ROUNDS times. By hand (BENCHMARKS.md); not a test.
#
#   scripts/bench-mem.sh [ROUNDS] [MAXSIZE]
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"
rounds=${1:-3}
max=${2:-$((1 << 30))}
cc -O2 -g -Wall -Wextra -Werror -o "$work/memreg" "$repo/bench/c/memreg.c" -libverbs
pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
for r in $(seq "$rounds"); do
	echo "== round $r: 64 KiB WRITE and READ (GB/s)"
	"$RDMAFS" exec --mount "$M" -- timeout 120 "$work/memreg" bw 65536 || die "memreg bw failed"
done
echo "== ibv_reg_mr + ibv_dereg_mr (median microseconds)"
"$RDMAFS" exec --mount "$M" -- timeout 900 "$work/memreg" reg "$max" || die "memreg reg failed"
