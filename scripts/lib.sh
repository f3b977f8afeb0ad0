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

# cm_pair SERVER_MOUNT CLIENT_MOUNT PORT "SERVER CMD" "CLIENT CMD": an
# rdma_cm server program in the background on SERVER_MOUNT, its client on
# CLIENT_MOUNT once the server's listener on PORT shows in cm/listeners
# (or the server has exited); each bounded by TMO seconds (60), both must
# exit 0, else their logs ($work/server.log, $work/client.log) are shown
# and the script dies. Options, as variables on the call:
#   FOREVER=1      the server never exits by itself (cmtime's): it is
#                  stopped once the client is done
#   PAIR_RETRY=FN  when the client fails and FN SERVER_MOUNT says the
#                  failure is a race the caller knows (perftest's), the
#                  server is stopped and cm_pair returns 75 (EX_TEMPFAIL):
#                  the caller runs the pair again
cm_pair() {
	local sm=$1 cm=$2 port=$3 scmd=$4 ccmd=$5
	# (not through a function: $! must be rdmafs exec, which becomes timeout)
	# shellcheck disable=SC2086
	"$RDMAFS" exec --mount "$sm" -- timeout "${TMO:-60}" $scmd >"$work/server.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		grep -q " port=$port " "$sm/cm/listeners" 2>/dev/null && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.05
	done
	local rc=0 src=0
	# shellcheck disable=SC2086
	"$RDMAFS" exec --mount "$cm" -- timeout "${TMO:-60}" $ccmd >"$work/client.log" 2>&1 || rc=$?
	if ((rc != 0)) && [[ -n "${PAIR_RETRY:-}" ]] && "$PAIR_RETRY" "$sm"; then
		kill -TERM $spid 2>/dev/null || true
		wait $spid || true
		return 75
	fi
	if [[ -n "${FOREVER:-}" ]]; then
		kill -TERM $spid 2>/dev/null || true # timeout passes it on
		wait $spid || true
	else
		wait $spid || src=$?
	fi
	if ((rc != 0 || src != 0)); then
		echo "--- server: $scmd (exit $src)"
		cat "$work/server.log"
		echo "--- client: $ccmd (exit $rc)"
		cat "$work/client.log"
		die "$ccmd: client exit $rc, server exit $src"
	fi
}
