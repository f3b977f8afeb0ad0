#!/usr/bin/env bash
# rdma-core-suite.sh: rdma-core's own pyverbs test suite (Debian ships it
# with rdma-core 44.0) on rdmafs through the drop-in libibverbs, file by
# file under a timeout, on a RoCE mount (--addr, the link layer rxe has) and
# on a local InfiniBand-style mount, and once more on the library built with
# ASan and UBSan (preloaded into python). Prints the table of TESTING.md and
# fails on any failure or error, or on any test that passes on the kernel's
# Soft-RoCE (the qemu harness's run, libibverbs/testdata) and not here,
# unless libibverbs/testdata/suite-known.txt gives the reason. test_rdmacm
# runs on the drop-in librdmacm too; it finds the device's IP address in
# rdmafs exec's /sys/class/infiniband view, as a kernel device's.
#
#   scripts/rdma-core-suite.sh [TABLE_OUT]
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

tests=/usr/share/doc/rdma-core/tests
[[ -f $tests/run_tests.py ]] || die "rdma-core's test suite is missing: apt-get install rdma-core python3-pyverbs"
py=/usr/bin/python3 # the pyenv python of these machines does not see python3-pyverbs
cp -r "$tests" "$work/tests"
gunzip -f "$work"/tests/*.gz

# The huge-page tests need 2 MiB pages: reserve 32 for the run when the
# machine has none (and give them back at the end).
hp=/proc/sys/vm/nr_hugepages
if [[ $(cat $hp 2>/dev/null || echo 1) == 0 && -w $hp ]]; then
	echo 32 >$hp
	release_huge=1
fi

# rdmafs exec takes librdmacm.so.1 from the directory that holds
# libibverbs.so.1 when it has one: give it a directory with both, whatever
# binary RDMAFS is and wherever it was built.
libs() { # DIR IBVERBS_DIR RDMACM_DIR
	mkdir -p "$1"
	ln -sf "$2/libibverbs.so.1" "$1/libibverbs.so.1"
	ln -sf "$3/librdmacm.so.1" "$1/librdmacm.so.1"
}
ibvdir=$(cd "$RDMAFS_LIBDIR" && pwd)
cmdir=$repo/librdmacm/build
[[ -f $ibvdir/librdmacm.so.1 ]] && cmdir=$ibvdir
libs "$work/lib" "$ibvdir" "$cmdir"
export RDMAFS_LIBDIR=$work/lib

# The RDMA CM tests look for the device's IP address as for a kernel
# device's: the first name under /sys/class/infiniband/DEV/device/net/
# (rdmafs exec's view: the interface carrying the mount's address) and the
# first address of `ip -j addr show NAME`. A local mount's is lo
# (127.0.0.1, which it answers for); the RoCE mount's address goes on a tap
# interface of its own, as a RoCE device's address is on its Ethernet
# interface (traffic to it still goes through lo).
ADDR=${ADDR:-127.0.79.1}
ifname=rdsuite$$
ip tuntap add dev "$ifname" mode tap || die "cannot create a tap interface for $ADDR"
at_exit 'ip link del "$ifname" 2>/dev/null'
ip link set "$ifname" up
ip addr add "$ADDR/32" dev "$ifname"

MR=$work/mnt-roce
mkdir -p "$MR"
pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-roce.log" --addr "$ADDR" "$MR"
at_exit '"$RDMAFS" umount "$MR" 2>/dev/null; [[ -z "${release_huge:-}" ]] || echo 0 >$hp'

# run MOUNT LOG: every test file, each in its own python under a timeout
# (a lost completion costs the suite's 10 s poll timeout; a hang costs
# 120 s).
run() {
	local mnt=$1 log=$2
	: >"$log"
	for f in "$work"/tests/test_*.py; do
		local mod
		mod=$(basename "$f" .py)
		echo "== $mod" >>"$log"
		local t0=$SECONDS rc=0
		(cd "$work/tests" && "$RDMAFS" exec --mount "$mnt" -- timeout 120 "$py" run_tests.py --dev rdmafs0 --gid 0 -v "tests.$mod") >>"$log" 2>&1 || rc=$?
		echo "== $mod rc=$rc in $((SECONDS - t0)) s" >>"$log"
		((rc == 124)) && echo "$mod timed out" >&2
	done
	return 0
}

echo "== RoCE mount ($ADDR)"
run "$MR" "$work/roce.log"
out=${1:-$work/table.md}
rc=0
"$py" "$here/suite-table.py" "$repo/libibverbs/testdata/rxe-suite-outcomes.txt" "$work/roce.log" \
	--known "$repo/libibverbs/testdata/suite-known.txt" | tee "$out" || rc=1

echo
echo "== local mount (InfiniBand link layer)"
run "$M" "$work/ib.log"
# On an InfiniBand port the RoCE-only AH test skips by design; nothing may
# fail or error.
if grep -E '\.\.\. (FAIL|ERROR)' "$work/ib.log"; then
	rc=1
fi
grep -hE '^(Ran|OK|FAILED)' "$work/ib.log" | sort | uniq -c | sort -rn | head -5

# The whole suite once more in one python, on the libraries built with
# ASan and UBSan (make asan, libibverbs's and librdmacm's): the sanitizers
# see every verb and CM call of 273 tests.
echo
echo "== local mount, the ASan/UBSan libraries"
make -s -C "$repo/libibverbs" asan >/dev/null
make -s -C "$repo/librdmacm" asan >/dev/null
libs "$work/asanlib" "$repo/libibverbs/build-asan" "$repo/librdmacm/build-asan"
san="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)"
(cd "$work/tests" && env RDMAFS_LIBDIR="$work/asanlib" LD_PRELOAD="$san" ASAN_OPTIONS=detect_leaks=0 \
	"$RDMAFS" exec --mount "$M" -- timeout 600 "$py" run_tests.py --dev rdmafs0 --gid 0 -v) >"$work/asan.log" 2>&1 || rc=1
grep -hE '^(Ran|OK|FAILED)' "$work/asan.log"
if grep -E 'ERROR: AddressSanitizer|runtime error:|\.\.\. (FAIL|ERROR)' "$work/asan.log"; then
	rc=1
fi

if ((rc != 0)); then
	echo "--- failures (RoCE mount)"
	grep -B2 -A20 -E '^(FAIL|ERROR):' "$work/roce.log" | head -150
	die "rdma-core's suite: see above"
fi
echo "rdma-core-suite: no failure, no error, every test rxe passes passes"
