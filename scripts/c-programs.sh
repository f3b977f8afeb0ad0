#!/usr/bin/env bash
# c-programs.sh: the project's own C programs on the drop-in libibverbs,
# built once plainly and once with AddressSanitizer and UBSan (against
# libibverbs/build-asan): examples/c/rdma_rw at sizes that share and cross
# pages, libibverbs/tests/events (completion channels and async events as
# pollable descriptors), libibverbs/tests/threads (posting and polling from
# several threads at once), libibverbs/tests/memkinds (ibv_reg_mr on every kind of memory, with
# two huge pages reserved for the run when the machine has none),
# libibverbs/tests/atomic_write (IBV_WR_ATOMIC_WRITE by ibv_post_send and by
# ibv_wr_atomic_write), libibverbs/tests/ucx_verbs (what UCX's verbs
# transports need: the accessibility check, 32-bit flow labels, inline and
# SGE sends in one SQ slot), and libibverbs/tests/hostile, a program that misuses
# the verbs and scribbles its rings. Every run must pass; the sanitizers must stay quiet. Also: the
# library loads with LD_PRELOAD as well, and the system's is never mapped.
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

make -s -C "$repo/libibverbs" asan >/dev/null
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
for v in plain asan; do
	flags="-O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE"
	[[ $v == asan ]] && flags="$flags $san"
	cc $flags -o "$work/rdma_rw-$v" "$repo/examples/c/rdma_rw.c" -libverbs
	cc $flags -o "$work/hostile-$v" "$repo/libibverbs/tests/hostile.c" -libverbs
	cc $flags -o "$work/memkinds-$v" "$repo/libibverbs/tests/memkinds.c" -libverbs
	cc $flags -o "$work/events-$v" "$repo/libibverbs/tests/events.c" -libverbs
	cc $flags -pthread -o "$work/threads-$v" "$repo/libibverbs/tests/threads.c" -libverbs
	cc $flags -o "$work/atomic_write-$v" "$repo/libibverbs/tests/atomic_write.c" -libverbs
	cc $flags -o "$work/ucx_verbs-$v" "$repo/libibverbs/tests/ucx_verbs.c" -libverbs
done
hp=/proc/sys/vm/nr_hugepages
hp_was=$(cat $hp 2>/dev/null || echo 0)
if ((hp_was == 0)) && [[ -w $hp ]]; then
	echo 2 >$hp
	at_exit "echo 0 >$hp"
fi

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
for v in plain asan; do
	lib=$RDMAFS_LIBDIR
	[[ $v == asan ]] && lib=$repo/libibverbs/build-asan
	for s in 1 4095 4097 12345 1048576 3000000; do
		RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- "$work/rdma_rw-$v" -s $s ||
			die "rdma_rw -s $s ($v) failed"
	done
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- "$work/memkinds-$v" || die "memkinds ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/events-$v" || die "events ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 120 "$work/threads-$v" || die "threads ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/atomic_write-$v" || die "atomic_write ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/ucx_verbs-$v" || die "ucx_verbs ($v) failed"
	# The hostile program leaks by design (objects destroyed under it).
	ASAN_OPTIONS=detect_leaks=0 RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- \
		timeout 120 "$work/hostile-$v" "$M" || die "hostile ($v) failed"
done
# LD_PRELOAD works as LD_PRELOAD's users expect: ours is loaded, the
# system's never mapped.
out=$(RDMAFS_DEVICE_MOUNT=$M LD_PRELOAD=$RDMAFS_LIBDIR/libibverbs.so.1 LD_DEBUG=files ibv_devices 2>&1)
grep -q "calling init: $RDMAFS_LIBDIR/libibverbs.so.1" <<<"$out" || die "LD_PRELOAD did not load $RDMAFS_LIBDIR"
grep -q "rdmafs0" <<<"$out" || die "ibv_devices under LD_PRELOAD lists no device"
if grep "calling init: .*x86_64-linux-gnu/libibverbs" <<<"$out"; then
	die "the system's libibverbs was loaded too"
fi
# The daemon survived all of it.
pd=$(new pd "")
[[ -n "$pd" ]] || die "the daemon stopped serving"
echo "c-programs: rdma_rw, events, threads, memkinds, atomic_write, ucx_verbs and hostile pass, plain and under ASan/UBSan; LD_PRELOAD loads only ours"
