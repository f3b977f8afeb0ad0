#!/usr/bin/env bash
# mpi.sh: Debian's Open MPI 4.1 (pml ucx, osc ucx) and MPICH 4.0 (ch4:ucx),
# unmodified, on rdmafs through the drop-in libibverbs (rdmafs exec), with
# UCX's defaults: no UCX_* variable but UCX_NET_DEVICES naming the device
# (found with ibv_devices), UCX's memory hooks on. Four programs of
# scripts/mpi/ check every byte they move (issue 20):
#   pingpong  1 B to 4 MiB between ranks 2k and 2k+1, both ways
#   stream    a window of 16 receives packed into one malloc
#   coll      MPI_Allreduce, MPI_Bcast, MPI_Alltoall
#   osc       put, get, accumulate, fetch-and-op, compare-and-swap under
#             fence and lock, on MPI_Win_create(malloc), MPI_Alloc_mem
#             and MPI_Win_allocate windows in one program
# each with 2 ranks (MPI_RANKS="2 4" for 4 as well) on one mount, then
# across two mounts that speak RoCEv2 on two loopback addresses: rank r
# runs on mount A when r is even, B when odd (a wrapper per rank sets
# rdmafs exec --mount from OMPI_COMM_WORLD_RANK or PMI_RANK). Every run is
# under timeout; the script runs them all and fails if any failed.
# The programs are first checked without rdmafs (Open MPI's ob1 over
# shared memory, MPICH's default), so a failure on rdmafs is rdmafs's.
# Needs root (FUSE, raw sockets).
#
#   scripts/mpi.sh          the checks
#   scripts/mpi.sh bench    bandwidth, no checks: MPI ping-pong 256 KiB to
#                           4 MiB through pml ucx / ch4:ucx beside
#                           ucx_perftest's tag_bw on the same mount
NEED_LIBIBVERBS=1
source "$(dirname "$0")/lib.sh"

mode=${1:-}
A_ADDR=${A_ADDR:-127.0.89.1}
B_ADDR=${B_ADDR:-127.0.89.2}
RANKS=${MPI_RANKS:-2}
TMO=${MPI_TIMEOUT:-150}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
for t in mpicc.openmpi mpirun.openmpi mpicc.mpich mpirun.mpich ucx_perftest; do
	command -v $t >/dev/null || die "$t is missing: apt-get install openmpi-bin libopenmpi-dev mpich libmpich-dev ucx-utils"
done
# Open MPI refuses root unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# UCX lists an IB device only if /dev/infiniband/ exists (ucx.sh).
made_devdir=
if [[ ! -d /dev/infiniband ]]; then
	mkdir /dev/infiniband || die "cannot create /dev/infiniband (UCX finds no IB device without it)"
	made_devdir=1
fi
at_exit '[[ -z "$made_devdir" ]] || rmdir /dev/infiniband 2>/dev/null'

progs=(pingpong stream coll osc)
for p in "${progs[@]}"; do
	mpicc.openmpi -O1 -g -Wall -Wextra -Werror -o "$work/$p-ompi" "$repo/scripts/mpi/$p.c"
	mpicc.mpich -O1 -g -Wall -Wextra -Werror -o "$work/$p-mpich" "$repo/scripts/mpi/$p.c"
done

# The per-rank wrapper: rank r on mount r mod n of MPIT_MOUNTS (A:B...).
cat >"$work/rank.sh" <<EOF
#!/bin/bash
r=\${OMPI_COMM_WORLD_RANK:-\${PMI_RANK:-0}}
IFS=: read -ra ms <<<"\$MPIT_MOUNTS"
exec "$RDMAFS" exec --mount "\${ms[r % \${#ms[@]}]}" -- "\$@"
EOF
chmod +x "$work/rank.sh"

# mpirun_ompi / mpirun_mpich NP PROG ARGS...: one run (stdout and stderr to
# $work/run.log, its first 2 MB: a run that logs without end, as UCX does
# retrying a failed registration, is ended by the pipe's closing); the
# device and the mounts come from DEV and MOUNTS.
mpirun_ompi() {
	local np=$1
	shift
	timeout -k 10 "$TMO" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" --mca pml ucx --mca osc ucx \
		-x UCX_NET_DEVICES="$DEV:1" -x MPIT_MOUNTS="$MOUNTS" -x RDMAFS_LIBDIR \
		"$work/rank.sh" "$@" 2>&1 | head -c 2000000 >"$work/run.log"
}
mpirun_mpich() {
	local np=$1
	shift
	timeout -k 10 "$TMO" mpirun.mpich -np "$np" -genv UCX_NET_DEVICES "$DEV:1" -genv MPIT_MOUNTS "$MOUNTS" \
		-genv RDMAFS_LIBDIR "$RDMAFS_LIBDIR" "$work/rank.sh" "$@" 2>&1 | head -c 2000000 >"$work/run.log"
}

echo "== the programs without rdmafs (Open MPI ob1 over shared memory, MPICH's default)"
for p in "${progs[@]}"; do
	osc=()
	[[ $p == osc ]] && osc=(--mca osc pt2pt) # 4.1's osc rdma over vader crashes, with or without rdmafs
	timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 --mca btl self,vader "${osc[@]}" \
		"$work/$p-ompi" >"$work/run.log" 2>&1 || { tail -n 20 "$work/run.log"; die "$p fails without rdmafs (Open MPI)"; }
	timeout 120 mpirun.mpich -np 2 "$work/$p-mpich" >"$work/run.log" 2>&1 ||
		{ tail -n 20 "$work/run.log"; die "$p fails without rdmafs (MPICH)"; }
	echo "$p: ok with Open MPI and MPICH"
done

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'
# the device's name as a program under rdmafs exec sees it
DEV=$("$RDMAFS" exec --mount "$M" -- ibv_devices | awk 'NR > 2 { print $1; exit }')
[[ -n "$DEV" ]] || die "ibv_devices under rdmafs exec lists no device"
echo "device: $DEV (UCX_NET_DEVICES=$DEV:1)"

if [[ $mode == bench ]]; then
	MOUNTS=$M
	echo
	echo "== MPI ping-pong bandwidth on one mount (bytes both ways / time)"
	for mpi in ompi mpich; do
		echo "-- $mpi"
		if "mpirun_$mpi" 2 "$work/pingpong-$mpi" -b; then
			grep '^pingpong ' "$work/run.log"
		else
			tail -n 15 "$work/run.log"
			echo "pingpong -b failed with $mpi"
		fi
	done
	echo
	echo "== ucx_perftest tag_bw on the same mount (UCX_NET_DEVICES=$DEV:1 only)"
	port=19700
	for s in 262144 524288 1048576 2097152 4194304; do
		port=$((port + 1))
		UCX_NET_DEVICES=$DEV:1 "$RDMAFS" exec --mount "$M" -- timeout 120 ucx_perftest -p $port \
			>"$work/server.log" 2>&1 &
		spid=$!
		for _ in $(seq 200); do
			ss -ltn "sport = :$port" | grep -q LISTEN && break
			sleep 0.05
		done
		UCX_NET_DEVICES=$DEV:1 "$RDMAFS" exec --mount "$M" -- timeout 120 ucx_perftest 127.0.0.1 -p $port \
			-t tag_bw -s $s -n 200 -w 20 -f >"$work/client.log" 2>&1 || true
		wait $spid || true
		line=$(grep -E '^ +[0-9]+ +[0-9.]+ +([0-9.]+|inf) ' "$work/client.log" | tail -1 || true)
		printf 'ucx_perftest tag_bw %8d B: %s\n' $s "${line:-failed: $(tail -n 2 "$work/client.log" | tr '\n' ' ')}"
	done
	echo "(ucx_perftest columns: iterations; latency 50th percentile, average, overall (us); bandwidth average, overall (MB/s); messages/s average, overall)"
	exit 0
fi

failed=()
runs=0
# check MPI NP WHERE: every program, one line each
check() {
	local mpi=$1 np=$2 where=$3 p t0 rc
	for p in "${progs[@]}"; do
		runs=$((runs + 1))
		t0=$SECONDS
		rc=0
		"mpirun_$mpi" "$np" "$work/$p-$mpi" || rc=$?
		if ((rc == 0)); then
			printf '%-6s %-5s np=%d %-10s ok   (%d s)\n' "$mpi" "$p" "$np" "$where" $((SECONDS - t0))
		else
			printf '%-6s %-5s np=%d %-10s FAIL (exit %d, %d s)\n' "$mpi" "$p" "$np" "$where" $rc $((SECONDS - t0))
			grep -v '^\s*$' "$work/run.log" | grep -vE 'DIAG|^--------' | head -n 12 | cut -c1-220 | sed 's/^/    /' || true
			failed+=("$mpi $p np=$np $where")
		fi
	done
}

for np in $RANKS; do
	for mpi in ompi mpich; do
		MOUNTS=$M check $mpi "$np" "one mount"
		MOUNTS=$MA:$MB check $mpi "$np" "two mounts"
	done
done

echo
if ((${#failed[@]})); then
	echo "mpi: ${#failed[@]} of $runs runs failed:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "mpi: all $runs runs passed (Open MPI pml ucx and MPICH ch4:ucx, one mount and two)"
