#!/usr/bin/env bash
# memkinds.sh: perftest on the kinds of memory a program can hand
# ibv_reg_mr beyond malloc (issue 20): ib_write_bw, ib_read_bw and
# ib_send_bw with --mmap=FILE (a file in the run's directory mapped
# shared) and with --use_hugepages (SysV shm on 2 MiB huge pages), and
# ib_write_bw --odp (on-demand paging), each first with server and client
# on one mount, then across two mounts that speak RoCEv2 on two loopback
# addresses. Huge pages are reserved for the run (as root) and the
# machine's count put back after. Every pair runs under timeout; the
# script runs them all, and fails if any failed. Needs root (FUSE, raw
# sockets, /proc/sys/vm/nr_hugepages).
#
#   scripts/memkinds.sh
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

A_ADDR=${A_ADDR:-127.0.90.1}
B_ADDR=${B_ADDR:-127.0.90.2}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
command -v ib_write_bw >/dev/null || die "ib_write_bw is missing: apt-get install perftest"

# 16 huge pages: perftest's buffers, server and client, rounded up to 2 MiB
hp=/proc/sys/vm/nr_hugepages
hp_was=$(cat $hp)
if ((hp_was < 16)); then
	echo 16 >$hp || die "cannot reserve huge pages ($hp)"
	at_exit "echo $hp_was >$hp"
fi
echo "huge pages: $(cat $hp) reserved ($(grep HugePages_Free /proc/meminfo | tr -s ' '))"

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'

# the files behind --mmap, one for each side
truncate -s 64M "$work/mmap.server" "$work/mmap.client"

on() {
	local mnt=$1
	shift
	"$RDMAFS" exec --mount "$mnt" -- "$@"
}

port=19800
failed=()
runs=0
# run SERVER_MOUNT CLIENT_MOUNT WHERE PROG ARGS...: a server in the
# background, the client once it listens; ARGS with @SIDE@ get "server"
# or "client" (so that each side has its own file).
run() {
	local sm=$1 cm=$2 where=$3 prog=$4
	shift 4
	local sargs=("${@//@SIDE@/server}") cargs=("${@//@SIDE@/client}")
	port=$((port + 1))
	runs=$((runs + 1))
	on "$sm" timeout 60 "$prog" -d rdmafs0 -n 500 "${sargs[@]}" -p $port >"$work/server.log" 2>&1 &
	local spid=$!
	for _ in $(seq 200); do
		ss -ltn "sport = :$port" | grep -q LISTEN && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.05
	done
	local rc=0 src=0
	on "$cm" timeout 60 "$prog" -d rdmafs0 -n 500 "${cargs[@]}" -p $port localhost >"$work/client.log" 2>&1 || rc=$?
	wait $spid || src=$?
	local line
	line=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$work/client.log" | tail -1 || true)
	local label
	label=$(printf '%-12s %-26s %-10s' "$prog" "${*//@SIDE@/SIDE}" "$where")
	if ((rc != 0 || src != 0)) || [[ -z "$line" ]]; then
		echo "$label FAIL (client exit $rc, server exit $src)"
		{ grep -vE '^\s*$|^-{5,}' "$work/client.log" | grep -iE "fail|error|couldn|unable|not supported" | head -n 4 ||
			true; } | sed 's/^/    client: /'
		{ grep -vE '^\s*$|^-{5,}' "$work/server.log" | grep -iE "fail|error|couldn|unable|not supported" | head -n 4 ||
			true; } | sed 's/^/    server: /'
		failed+=("$prog ${*//@SIDE@/SIDE} $where")
	else
		echo "$label ok   $(tr -s ' \t' ' ' <<<"$line")"
	fi
}

suite() { # SERVER_MOUNT CLIENT_MOUNT WHERE EXTRA...
	local sm=$1 cm=$2 where=$3 prog
	shift 3
	for prog in ib_write_bw ib_read_bw ib_send_bw; do
		run "$sm" "$cm" "$where" $prog --mmap="$work/mmap.@SIDE@" "$@"
		run "$sm" "$cm" "$where" $prog --use_hugepages "$@"
	done
	run "$sm" "$cm" "$where" ib_write_bw --odp "$@"
}

echo
echo "== perftest on memory beyond malloc (columns: bytes, iterations, BW peak, BW average (MB/s), MsgRate (Mpps))"
suite "$M" "$M" "one mount"
suite "$MA" "$MB" "two mounts"

echo
if ((${#failed[@]})); then
	echo "memkinds: ${#failed[@]} of $runs perftest runs failed:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "memkinds: all $runs perftest runs passed"
