#!/usr/bin/env bash
# c-programs.sh: the project's own C programs on the drop-in libibverbs,
# built once plainly and once with AddressSanitizer and UBSan (against
# libibverbs/build-asan): examples/c/rdma_rw at sizes that share and cross
# pages, and libibverbs/tests/hostile, a program that misuses the verbs and
# scribbles its rings. Every run must pass; the sanitizers must stay quiet.
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

make -s -C "$repo/libibverbs" asan >/dev/null
san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
for v in plain asan; do
	flags="-O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE"
	[[ $v == asan ]] && flags="$flags $san"
	cc $flags -o "$work/rdma_rw-$v" "$repo/examples/c/rdma_rw.c" -libverbs
	cc $flags -o "$work/hostile-$v" "$repo/libibverbs/tests/hostile.c" -libverbs
done

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
for v in plain asan; do
	lib=$RDMAFS_LIBDIR
	[[ $v == asan ]] && lib=$repo/libibverbs/build-asan
	for s in 1 4095 4097 12345 1048576 3000000; do
		RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- "$work/rdma_rw-$v" -s $s ||
			die "rdma_rw -s $s ($v) failed"
	done
	# The hostile program leaks by design (objects destroyed under it).
	ASAN_OPTIONS=detect_leaks=0 RDMAFS_LIBDIR=$lib "$RDMAFS" exec --mount "$M" -- \
		timeout 120 "$work/hostile-$v" "$M" || die "hostile ($v) failed"
done
# The daemon survived all of it.
pd=$(new pd "")
[[ -n "$pd" ]] || die "the daemon stopped serving"
echo "c-programs: rdma_rw and hostile pass, plain and under ASan/UBSan"
