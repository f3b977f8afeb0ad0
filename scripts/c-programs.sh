#!/usr/bin/env bash
# c-programs.sh: the project's own C programs on the drop-in libibverbs,
# built once plainly and once with AddressSanitizer and UBSan (against
# libibverbs/build-asan): examples/c/rdma_rw at sizes that share and cross
# pages, libibverbs/tests/events (completion channels and async events as
# pollable descriptors), libibverbs/tests/threads (posting and polling from
# several threads at once), libibverbs/tests/memkinds (every kind of memory
# registered and used as target and source of WRITE, READ, SEND/RECV and
# atomics, shared memory seen by a second process, the same memory in two
# contexts, registration checked against the mapping; with four huge pages
# reserved for the run when the machine has fewer), libibverbs/tests/mrrace
# (no byte the device moves into a buffer is lost while its page neighbour
# is registered: WRITE and READ, 4 MiB and 32 MiB, and a thread storing
# into the shared page), libibverbs/tests/heaptrim (registrations on a heap
# glibc trims and regrows, and on sbrk memory),
# libibverbs/tests/atomic_write (IBV_WR_ATOMIC_WRITE by ibv_post_send and by
# ibv_wr_atomic_write), libibverbs/tests/ucx_verbs (what UCX's verbs
# transports need: the accessibility check, 32-bit flow labels, inline and
# SGE sends in one SQ slot), libibverbs/tests/srq_resize (ibv_modify_srq
# with IBV_SRQ_MAX_WR), libibverbs/tests/destroy_clean (a destroyed QP's
# completions leave its CQs with it, as mlx5's), libibverbs/tests/timestamps (hca_core_clock,
# ibv_query_rt_values_ex at its rate, completion timestamps and wall
# clock against clock_gettime), libibverbs/tests/import (ibv_import_device,
# _pd, _mr, _dm across a fork with the cmd_fd passed by SCM_RIGHTS, and
# refused to a child of uid 65534), and libibverbs/tests/hostile, a program that misuses
# the verbs and scribbles its rings. memkinds, mrrace and heaptrim run on
# one mount and across two that speak RoCEv2 on two loopback addresses
# (RDMAFS_DEVICE_MOUNT=A:B: the program's memory on A, the peer on B).
# mrrace runs MRRACE_ITERS (200) iterations at 4 MiB and MRRACE_ITERS_32
# (200; 25 under ASan, MRRACE_ITERS_32_ASAN: each takes about 0.25 s) at
# 32 MiB; with a thread storing into the
# page d1 and d2 share (-t) and into d2's first private page (-p, whose
# stores race the first copy: without the library's write protection 12
# of 40 iterations lost stores). Every run must pass; the
# sanitizers must stay quiet. Also: the library loads with LD_PRELOAD as
# well, and the system's is never mapped.
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"
chmod 755 "$work" # tests/import's child of uid 65534 reaches the mount

make -s -C "$repo/libibverbs" asan >/dev/null
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
for v in plain asan; do
	flags="-O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE"
	[[ $v == asan ]] && flags="$flags $san"
	cc $flags -o "$work/rdma_rw-$v" "$repo/examples/c/rdma_rw.c" -libverbs
	cc $flags -o "$work/hostile-$v" "$repo/libibverbs/tests/hostile.c" -libverbs
	cc $flags -o "$work/memkinds-$v" "$repo/libibverbs/tests/memkinds.c" -libverbs
	cc $flags -pthread -o "$work/mrrace-$v" "$repo/libibverbs/tests/mrrace.c" -libverbs
	cc $flags -o "$work/forkmem-$v" "$repo/libibverbs/tests/forkmem.c" -libverbs
	cc $flags -o "$work/truncate-$v" "$repo/libibverbs/tests/truncate.c" -libverbs
	cc $flags -o "$work/moved-$v" "$repo/libibverbs/tests/moved.c" -libverbs
	cc $flags -o "$work/heaptrim-$v" "$repo/libibverbs/tests/heaptrim.c" -libverbs
	cc $flags -o "$work/events-$v" "$repo/libibverbs/tests/events.c" -libverbs
	cc $flags -pthread -o "$work/threads-$v" "$repo/libibverbs/tests/threads.c" -libverbs
	cc $flags -o "$work/atomic_write-$v" "$repo/libibverbs/tests/atomic_write.c" -libverbs
	cc $flags -o "$work/ucx_verbs-$v" "$repo/libibverbs/tests/ucx_verbs.c" -libverbs
	cc $flags -o "$work/srq_resize-$v" "$repo/libibverbs/tests/srq_resize.c" -libverbs
	cc $flags -o "$work/destroy_clean-$v" "$repo/libibverbs/tests/destroy_clean.c" -libverbs
	cc $flags -o "$work/timestamps-$v" "$repo/libibverbs/tests/timestamps.c" -libverbs
	cc $flags -o "$work/import-$v" "$repo/libibverbs/tests/import.c" -libverbs
done
hp=/proc/sys/vm/nr_hugepages
hp_was=$(cat $hp 2>/dev/null || echo 0)
if ((hp_was < 4)) && [[ -w $hp ]]; then
	echo 4 >$hp
	at_exit "echo $hp_was >$hp"
fi
# memkinds fails rather than skips the huge page kinds when there are some
(($(cat $hp 2>/dev/null || echo 0) >= 2)) && export MEMKINDS_NEED_HUGE=1
A_ADDR=${A_ADDR:-127.0.88.1}
B_ADDR=${B_ADDR:-127.0.88.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
ITERS=${MRRACE_ITERS:-200}
# 32 MiB: 200 iterations plainly (about 55 s a run), 25 under ASan
ITERS32=${MRRACE_ITERS_32:-200}
ITERS32_ASAN=${MRRACE_ITERS_32_ASAN:-25}

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'
for v in plain asan; do
	lib=$RDMAFS_LIBDIR
	[[ $v == asan ]] && lib=$repo/libibverbs/build-asan
	for s in 1 4095 4097 12345 1048576 3000000; do
		RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- "$work/rdma_rw-$v" -s $s ||
			die "rdma_rw -s $s ($v) failed"
	done
	# events with another reader of root's open that never reads (as a
	# forked child holding the fd is): events raised while the library
	# reopened the file went to that reader only, and once it held 4,096
	# nobody else got any (a CI failure; both fixed).
	sleep 120 3<"$M/events" &
	idle=$!
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/events-$v" || die "events ($v) failed"
	kill $idle 2>/dev/null || true
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 120 "$work/memkinds-$v" || die "memkinds ($v) failed"
	RDMAFS_DEVICE_MOUNT=$MA:$MB RDMAFS_LIBDIR=$lib "$RDMAFS" exec -- timeout 120 "$work/memkinds-$v" ||
		die "memkinds across two mounts ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 120 "$work/heaptrim-$v" || die "heaptrim ($v) failed"
	RDMAFS_DEVICE_MOUNT=$MA:$MB RDMAFS_LIBDIR=$lib "$RDMAFS" exec -- timeout 120 "$work/heaptrim-$v" ||
		die "heaptrim across two mounts ($v) failed"
	n32=$ITERS32
	[[ $v == asan ]] && n32=$ITERS32_ASAN
	for race in "-n $ITERS" "-n $ITERS -r" "-n $ITERS -t" "-n $ITERS -p" "-s 32 -n $n32" "-s 32 -n $n32 -r"; do
		RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 300 "$work/mrrace-$v" $race ||
			die "mrrace $race ($v) failed"
		[[ $race == *-[tp]* ]] && continue
		RDMAFS_DEVICE_MOUNT=$MA:$MB RDMAFS_LIBDIR=$lib "$RDMAFS" exec -- timeout 300 "$work/mrrace-$v" $race ||
			die "mrrace $race across two mounts ($v) failed"
	done
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/forkmem-$v" || die "forkmem ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/truncate-$v" || die "truncate ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/moved-$v" || die "moved ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 120 "$work/threads-$v" || die "threads ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/atomic_write-$v" || die "atomic_write ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/ucx_verbs-$v" || die "ucx_verbs ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/srq_resize-$v" || die "srq_resize ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/destroy_clean-$v" || die "destroy_clean ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/timestamps-$v" || die "timestamps ($v) failed"
	RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- timeout 60 "$work/import-$v" || die "import ($v) failed"
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
echo "c-programs: rdma_rw, events, threads, memkinds, mrrace, heaptrim, forkmem, truncate, moved, atomic_write, ucx_verbs, srq_resize, destroy_clean, timestamps, import and hostile pass, plain and under ASan/UBSan; LD_PRELOAD loads only ours"
