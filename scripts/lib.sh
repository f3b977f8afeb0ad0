# Shared helpers for the rdmafs shell scripts. Source it; it sets -eu, finds
# (or builds) the rdmafs binary and its libibverbs.so.1 (RDMAFS_LIBDIR),
# mounts a device in a temp dir and unmounts it on exit.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
work=$(mktemp -d /tmp/rdmafs-demo.XXXXXX)
M=$work/mnt
mkdir -p "$M"

if [[ -n "${RDMAFS:-}" ]]; then
	:
elif command -v rdmafs >/dev/null 2>&1; then
	RDMAFS=$(command -v rdmafs)
else
	RDMAFS=$work/rdmafs
	(cd "$repo" && go build -o "$RDMAFS" ./cmd/rdmafs)
fi

# at_exit CMD: run CMD (through eval) when the script exits, before the
# unmount of $M, latest first. Scripts register their own teardown here
# rather than replacing the EXIT trap: a trap that runs a command before
# cleanup would hand cleanup that command's status instead of the
# script's, and a failed script would exit 0.
exit_hooks=()
at_exit() { exit_hooks=("$1" "${exit_hooks[@]}"); }

cleanup() {
	local rc=$? h
	set +e
	for h in "${exit_hooks[@]}"; do
		eval "$h"
	done
	if ((rc != 0)) && [[ -s "$work/daemon.log" ]]; then
		echo "--- daemon log" >&2
		tail -n 40 "$work/daemon.log" >&2
	fi
	"$RDMAFS" umount "$M" 2>/dev/null || true
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT

# rdmafs's libibverbs.so.1, for `rdmafs exec` (and anything run with it),
# for scripts that set NEED_LIBIBVERBS=1 before sourcing this file: the
# packages it builds against and the programs installed (setup.sh), the
# library built here unless RDMAFS_LIBDIR already names one.
if [[ -n "${NEED_LIBIBVERBS:-}" ]]; then
	"$here/setup.sh"
fi
if [[ -n "${NEED_LIBIBVERBS:-}" && -z "${RDMAFS_LIBDIR:-}" ]]; then
	if ! make_out=$(make -s -C "$repo/libibverbs" 2>&1); then
		echo "$make_out" >&2
		echo "FAIL: make -C $repo/libibverbs" >&2
		exit 1
	fi
	export RDMAFS_LIBDIR=$repo/libibverbs/build
fi
# rdmafs's librdmacm.so.1 too (NEED_LIBRDMACM=1): rdmafs exec finds it in
# the tree's librdmacm/build beside libibverbs/build.
if [[ -n "${NEED_LIBRDMACM:-}" ]]; then
	if ! make_out=$(make -s -C "$repo/librdmacm" 2>&1); then
		echo "$make_out" >&2
		echo "FAIL: make -C $repo/librdmacm" >&2
		exit 1
	fi
fi

# pp prints a command, then runs it: the script is its own transcript.
pp() {
	printf '\n$ %s\n' "$*"
	"$@"
}

# show prints a command line for a pipeline run through bash.
show() {
	printf '\n$ %s\n' "$1"
	bash -c "$1"
}

die() {
	echo "FAIL: $*" >&2
	exit 1
}

# new KIND k=v...: the transaction idiom of DESIGN.md (open read-write, write
# the request, read the name back).
new() {
	local kind=$1
	shift
	local name
	{ echo "$*" >&0; read -r name; } <>"$M/$kind/new"
	echo "$name"
}

# expect_wc CQ PATTERN: the next completion on CQ must match PATTERN (an
# extended regex). A read of poll consumes every completion it returns, so
# the ones not yet checked wait in a file.
expect_wc() {
	local cq=$1 pattern=$2 buf=$work/wc.$1 line="" i
	touch "$buf"
	for i in $(seq 1 300); do
		[[ -s "$buf" ]] && break
		cat "$M/cq/$cq/poll" >>"$buf"
		[[ -s "$buf" ]] || sleep 0.01
	done
	line=$(head -n 1 "$buf")
	sed -i 1d "$buf"
	echo "  $line"
	[[ "$line" =~ $pattern ]] || die "cq $cq: expected /$pattern/, got '$line'"
}

# expect_state QPN STATE
expect_state() {
	local got
	got=$(cat "$M/qp/$1/state")
	echo "  qp $1: $got"
	[[ "$got" == "$2" ]] || die "qp $1 is $got, expected $2"
}

mount_device() {
	pp "$RDMAFS" mount --log "$work/daemon.log" "$@" "$M"
	pp ls "$M"
}
