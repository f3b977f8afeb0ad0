#!/usr/bin/env bash
# doctor.sh: rdmafs doctor against the conditions it names, each made for
# real: no /dev/fuse (a private mount namespace with a tmpfs over /dev), a
# user that is not root, a missing drop-in library, and no hugepages (a
# private namespace with the pool's files replaced) against some. Each time
# it must name the right check with the right fix and exit as it should;
# rdmafs mount, failing in the namespace without /dev/fuse, must name the
# same check. Needs root and util-linux (unshare, setpriv).
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

T=${TMO:-60}
for t in unshare setpriv; do
	command -v $t >/dev/null || die "$t is missing: apt-get install util-linux"
done

# doctor [ENV=...] [-- PREFIX...]: rdmafs doctor's output in $out, its
# exit status in $rc.
doctor() {
	rc=0
	out=$(timeout $T "$@" 2>&1) || rc=$?
}
expect() { # PATTERN WHAT: a line of $out matches PATTERN (extended regex)
	grep -qE -- "$1" <<<"$out" || { echo "$out"; die "$2"; }
}

echo "== a machine that runs rdmafs"
doctor "$RDMAFS" doctor
echo "$out"
((rc == 0)) || die "doctor exits $rc here, want 0"
expect '^ok +passthrough +FUSE passthrough works' "the passthrough probe did not run"
expect '^ok +libibverbs.so.1 .* exports exactly the system' "no export-set check"

echo
echo "== no /dev/fuse (a tmpfs over /dev in a private mount namespace)"
mkdir -p "$work/m2"
# /dev/null stays: the background mount opens it for the daemon's output.
nodev='mount -t tmpfs tmpfs /dev && mknod -m 0666 /dev/null c 1 3 && exec "$@"'
doctor unshare -m --propagation private sh -c "$nodev" sh "$RDMAFS" doctor
echo "$out"
((rc == 1)) || die "doctor exits $rc without /dev/fuse, want 1"
expect '^FAIL +/dev/fuse +/dev/fuse is missing' "doctor does not say /dev/fuse is missing"
expect 'fix: modprobe fuse; \[ -e /dev/fuse \] \|\| mknod -m 0666 /dev/fuse c 10 229' "no fix for /dev/fuse"
expect '^skip +passthrough +not probed: needs /dev/fuse' "the probe ran without /dev/fuse"
doctor unshare -m --propagation private sh -c "$nodev" sh "$RDMAFS" mount "$work/m2"
echo "$out"
((rc == 1)) || die "mount exits $rc without /dev/fuse, want 1"
expect 'rdmafs doctor: 1 check\(s\) a mount needs failed' "mount does not run the doctor's checks"
expect '^FAIL +/dev/fuse +/dev/fuse is missing' "mount does not name /dev/fuse"

echo
echo "== a user that is not root"
# A copy nobody can run (the work directory is root's alone).
pub=$(mktemp -d /tmp/inst-doctor.XXXXXX)
at_exit "rm -rf '$pub'"
chmod 0755 "$pub"
cp "$RDMAFS" "$pub/rdmafs"
doctor setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$pub/rdmafs" doctor
echo "$out"
((rc == 1)) || die "doctor exits $rc for uid 65534, want 1"
expect '^FAIL +privileges +uid 65534 is not root' "doctor does not say the user is not root"
expect 'fix: sudo rdmafs doctor' "no fix for the privileges"
expect '^skip +passthrough +not probed: needs root' "the probe ran as a user"

echo
echo "== a missing library"
mkdir -p "$work/onlyibv" "$work/empty"
cp "$RDMAFS_LIBDIR/libibverbs.so.1" "$work/onlyibv/"
doctor env RDMAFS_LIBDIR="$work/onlyibv" "$RDMAFS" doctor
echo "$out" | grep -E 'so\.1'
((rc == 1)) || die "doctor exits $rc without librdmacm.so.1, want 1"
expect "^FAIL +librdmacm.so.1 +librdmacm.so.1 is missing from $work/onlyibv" "doctor does not say librdmacm.so.1 is missing"
expect '^ok +libibverbs.so.1 ' "libibverbs.so.1 is not ok beside a missing librdmacm"
doctor env RDMAFS_LIBDIR="$work/empty" "$RDMAFS" doctor
echo "$out" | grep -E 'so\.1'
((rc == 1)) || die "doctor exits $rc without libibverbs.so.1, want 1"
expect "^FAIL +libibverbs.so.1 +rdmafs exec has no drop-in library: RDMAFS_LIBDIR=$work/empty has no libibverbs.so.1" "doctor does not say libibverbs.so.1 is missing"
expect "fix: make " "no make command to fix the library"

echo
echo "== hugepages: none, then some (the pool's files replaced in a private namespace)"
pool=/sys/kernel/mm/hugepages/hugepages-2048kB
[[ -d $pool ]] || die "$pool is missing: this kernel has no 2 MiB hugepages"
mkdir -p "$work/pool"
fake() { # N: the pool reads N reserved, N free
	echo "$1" >"$work/pool/nr_hugepages"
	echo "$1" >"$work/pool/free_hugepages"
	doctor unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' \
		sh "$work/pool" "$pool" "$RDMAFS" doctor
}
fake 0
echo "$out" | grep hugepages -A1
((rc == 0)) || die "doctor exits $rc without hugepages, want 0 (a warning)"
expect '^warn +hugepages +no 2 MiB hugepages reserved' "doctor does not warn about no hugepages"
expect "fix: echo 64 > $pool/nr_hugepages" "no fix for hugepages"
fake 16
echo "$out" | grep hugepages
expect '^ok +hugepages +16 2 MiB hugepages reserved, 16 free' "doctor does not see 16 hugepages"
echo
echo "doctor: all conditions named"
