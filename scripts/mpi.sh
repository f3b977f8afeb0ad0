#!/usr/bin/env bash
# mpi.sh: Debian's Open MPI 4.1 and MPICH 4.0, unmodified, on rdmafs through
# the drop-in libibverbs and librdmacm (rdmafs exec), with the view rdmafs
# exec gives (/sys/class/infiniband, /dev/infiniband/uverbsN in the rank's
# own mount namespace): no UCX_NET_DEVICES, no /dev/infiniband made on the
# machine. Each MPI transport that reaches the device runs the four
# programs of scripts/mpi/, which check every byte they move (issue 20):
#   pingpong  1 B to 4 MiB between ranks 2k and 2k+1, both ways
#   stream    a window of 16 receives packed into one malloc
#   coll      MPI_Allreduce, MPI_Bcast, MPI_Alltoall
#   osc       put, get, accumulate, fetch-and-op, compare-and-swap under
#             fence and lock, on MPI_Win_create(malloc), MPI_Alloc_mem
#             and MPI_Win_allocate windows in one program
# The transports (TESTING.md, "MPI on rdmafs", says why each setting is
# there and what does not work):
#   ompi-ucx     Open MPI pml ucx, osc ucx: UCX's own choice, no variable
#                on one mount; across two it needs UCX_UD_ETH_DGID_CHECK=n
#                (UCX 1.13's UD reads RoCE's IP version from wc.sl, a mlx5
#                convention: openucx/ucx#10209)
#   ompi-openib  pml ob1, btl openib,self (udcm), one-sided through osc
#                pt2pt; btl_openib_allow_ib=1, Open MPI 4's policy for
#                InfiniBand ports; a local mount only (udcm needs a LID)
#   ompi-btlofi  pml ob1, btl ofi,self with btl_ofi_mode=2 (two-sided; the
#                default, one-sided only, leaves ob1 with no send path and
#                it SIGSEGVs) over verbs;ofi_rxd, osc pt2pt; 2 ranks only:
#                with 4, osc pt2pt deadlocks in its own compare-and-swap
#                (a blocking send under its accumulate lock; TESTING.md)
#   ompi-mtlofi  pml cm, mtl ofi over verbs;ofi_rxm, osc pt2pt;
#                FI_UNIVERSE_SIZE=128 (RxM sizes its CQ past max_cqe:
#                ofiwg/libfabric#10692). RxM closes a connection's QP and
#                then drains the shared CQ: ibv_destroy_qp must take the
#                QP's completions with it, as mlx5's does (TESTING.md)
#   mpich-ucx    MPICH ch4:ucx, UCX's defaults (the same UCX variable
#                across two mounts)
# Each on one mount, then across two --addr mounts that speak RoCEv2 on two
# loopback addresses (put on a tap interface, as a RoCE device's address is
# on its Ethernet interface: libfabric's verbs provider looks there): rank
# r runs on mount A when r is even, B when odd (a wrapper per rank runs
# rdmafs exec --mount from OMPI_COMM_WORLD_RANK or PMI_RANK). Each run must
# exit 0 with its verdict line, and each transport must have moved bytes
# through the device (the mounts' bytes_sent), so a fallback to shared
# memory or TCP cannot pass for it. With 2 ranks; MPI_RANKS4 lists the
# transports also run with 4 (one mount). Every run is under timeout; the
# script runs them all and fails if any failed. The programs are first
# checked without rdmafs (Open MPI's ob1 over shared memory, MPICH's
# default), so a failure on rdmafs is rdmafs's. Needs root (FUSE, raw
# sockets, a tap interface).
#
#   scripts/mpi.sh          the checks
#   scripts/mpi.sh bench    no checks: for each transport on one mount, MPI
#                           ping-pong latency at 8 B and bandwidth 256 KiB
#                           to 4 MiB, beside perftest's ib_send_lat and
#                           ib_write_bw and ucx_perftest on the same mount
#
# MPI_TRANSPORTS (default all five) and
# MPI_WHERE ("one two") choose what runs.
NEED_LIBIBVERBS=1
NEED_LIBRDMACM=1
source "$(dirname "$0")/lib.sh"

mode=${1:-}
A_ADDR=${A_ADDR:-127.0.91.1}
B_ADDR=${B_ADDR:-127.0.91.2}
TRANSPORTS=${MPI_TRANSPORTS:-ompi-ucx ompi-openib ompi-btlofi ompi-mtlofi mpich-ucx}
WHERE=${MPI_WHERE:-one two}
RANKS4=${MPI_RANKS4-ompi-ucx ompi-openib ompi-mtlofi mpich-ucx}
TMO=${MPI_TIMEOUT:-150}
MA=$work/mnta
MB=$work/mntb
mkdir -p "$MA" "$MB"
for t in mpicc.openmpi mpirun.openmpi mpicc.mpich mpirun.mpich ucx_perftest ib_send_lat ib_write_bw ip; do
	command -v $t >/dev/null || die "$t is missing: scripts/setup.sh"
done
# rdmafs's libibverbs and librdmacm side by side (libfabric's verbs provider
# uses both; rdmafs exec takes librdmacm from beside libibverbs)
mkdir -p "$work/lib"
ln -sf "$(cd "$RDMAFS_LIBDIR" && pwd)/libibverbs.so.1" "$work/lib/libibverbs.so.1"
ln -sf "$repo/librdmacm/build/librdmacm.so.1" "$work/lib/librdmacm.so.1"
export RDMAFS_LIBDIR=$work/lib
# the environment a new user has: no UCX_*, FI_*, OMPI_MCA_*
unset $(compgen -e | grep -E '^(UCX_|FI_|OMPI_MCA_|RDMAFS_EXEC_SYSFS|RDMAFS_DEVICE_MOUNT)') 2>/dev/null || true
# Open MPI refuses root unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

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

# targs TRANSPORT: the mpirun arguments of a transport for MOUNTS ($1 of
# run), in the array ta; the two-mount-only ones when MOUNTS has two.
targs() {
	local t=$1 two=$2
	ta=()
	case $t in
	ompi-ucx)
		ta=(--mca pml ucx --mca osc ucx)
		[[ -n $two ]] && ta+=(-x UCX_UD_ETH_DGID_CHECK=n)
		;;
	ompi-openib)
		ta=(--mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1
			--mca btl_openib_warn_no_device_params_found 0 --mca osc pt2pt)
		;;
	ompi-btlofi)
		ta=(--mca pml ob1 --mca btl ofi,self --mca btl_ofi_mode 2
			--mca btl_ofi_provider_include "verbs;ofi_rxd" --mca osc pt2pt)
		;;
	ompi-mtlofi)
		ta=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm"
			-x FI_UNIVERSE_SIZE=128 --mca osc pt2pt)
		;;
	mpich-ucx)
		[[ -n $two ]] && ta=(-genv UCX_UD_ETH_DGID_CHECK n)
		;;
	esac
}

# run TRANSPORT NP MOUNTS PROG ARGS...: one run (stdout and stderr to
# $work/run.log, its first 2 MB: a run that logs without end is ended by
# the pipe's closing).
run() {
	local t=$1 np=$2 mounts=$3 two=
	shift 3
	[[ $mounts == *:* ]] && two=1
	targs "$t" "$two"
	if [[ $t == mpich-* ]]; then
		timeout -k 10 "$TMO" mpirun.mpich -np "$np" "${ta[@]}" -genv MPIT_MOUNTS "$mounts" \
			-genv RDMAFS_LIBDIR "$RDMAFS_LIBDIR" "$work/rank.sh" "$@" 2>&1 | head -c 2000000 >"$work/run.log"
	else
		timeout -k 10 "$TMO" mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" "${ta[@]}" \
			-x MPIT_MOUNTS="$mounts" -x RDMAFS_LIBDIR "$work/rank.sh" "$@" 2>&1 | head -c 2000000 >"$work/run.log"
	fi
}

# devbytes MOUNT...: bytes the devices of MOUNTs have sent, summed
devbytes() {
	local m s=0 b
	for m in "$@"; do
		b=$(sed -n 's/^bytes_sent=//p' "$m/counters")
		s=$((s + ${b:-0}))
	done
	echo $s
}

if [[ $mode != bench ]]; then
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
fi

# The --addr mounts' addresses on an interface of their own (see above);
# traffic to them still goes through lo.
ifname=rmpi$$
ip tuntap add dev "$ifname" mode tap || die "cannot create a tap interface for $A_ADDR and $B_ADDR"
at_exit 'ip link del "$ifname" 2>/dev/null'
ip link set "$ifname" up
ip addr add "$A_ADDR/32" dev "$ifname"
ip addr add "$B_ADDR/32" dev "$ifname"

pp "$RDMAFS" mount --log "$work/daemon.log" "$M"
pp "$RDMAFS" mount --log "$work/daemon-a.log" --addr "$A_ADDR" "$MA"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MA" 2>/dev/null; "$RDMAFS" umount "$MB" 2>/dev/null'
[[ ! -e /dev/infiniband ]] && echo "(no /dev/infiniband on this machine: each rank sees its own under rdmafs exec)"

if [[ $mode == bench ]]; then
	echo
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
	echo "== one mount: MPI ping-pong (8 B: half a round trip; 256 KiB-4 MiB: bytes both ways / time)"
	for t in $TRANSPORTS; do
		exe=$work/pingpong-ompi
		[[ $t == mpich-* ]] && exe=$work/pingpong-mpich
		b0=$(devbytes "$M")
		if run "$t" 2 "$M" "$exe" -b; then
			grep '^pingpong ' "$work/run.log" | sed "s/^/$t /"
			echo "$t device bytes: $(($(devbytes "$M") - b0))"
		else
			tail -n 15 "$work/run.log"
			echo "$t: pingpong -b failed"
		fi
	done
	echo
	echo "== the same mount: perftest and ucx_perftest (no variable)"
	# pair SERVER CLIENT: perftest's server, then its client once it listens
	port=19780
	pair() {
		local srv=$1 cli=$2
		port=$((port + 1))
		"$RDMAFS" exec --mount "$M" -- timeout 120 $srv -p $port >"$work/server.log" 2>&1 &
		local spid=$!
		for _ in $(seq 200); do
			ss -ltn "sport = :$port" | grep -q LISTEN && break
			sleep 0.05
		done
		"$RDMAFS" exec --mount "$M" -- timeout 120 $cli -p $port >"$work/client.log" 2>&1 || true
		wait $spid || true
	}
	pair "ib_send_lat -s 8 -n 2000" "ib_send_lat -s 8 -n 2000 127.0.0.1"
	echo "ib_send_lat 8 B (t_min t_max t_typical t_avg t_stdev 99% 99.9%, us): $(grep -E '^ +8 ' "$work/client.log" | tr -s ' ' || echo failed)"
	for s in 262144 1048576 4194304; do
		pair "ib_write_bw -s $s -n 200" "ib_write_bw -s $s -n 200 127.0.0.1"
		echo "ib_write_bw $s B (bytes iterations BW peak BW average [MB/s] MsgRate): $(grep -E "^ +$s " "$work/client.log" | tr -s ' ' || echo failed)"
	done
	# ucx_perftest SERVER/CLIENT ARGS: its result line
	for a in "-t tag_lat -s 8 -n 2000" "-t tag_bw -s 262144 -n 200" "-t tag_bw -s 1048576 -n 200" "-t tag_bw -s 4194304 -n 100"; do
		pair "ucx_perftest" "ucx_perftest 127.0.0.1 $a -w 20 -f"
		line=$(grep -E '^ +[0-9]+ +[0-9.]+ +([0-9.]+|inf) ' "$work/client.log" | tail -1 || true)
		echo "ucx_perftest $a: ${line:-failed: $(tail -n 2 "$work/client.log" | tr '\n' ' ')}"
	done
	echo "(ucx_perftest columns: iterations; latency 50th percentile, average, overall (us); bandwidth average, overall (MB/s); messages/s average, overall)"
	echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
	exit 0
fi

failed=()
runs=0
# check TRANSPORT NP WHERE MOUNTS: every program, one line each, and the
# device bytes they moved
check() {
	local t=$1 np=$2 where=$3 mounts=$4 p t0 rc b0 b1 moved=0 exe
	local -a ms
	IFS=: read -ra ms <<<"$mounts"
	for p in "${progs[@]}"; do
		runs=$((runs + 1))
		t0=$SECONDS
		rc=0
		exe=$work/$p-ompi
		[[ $t == mpich-* ]] && exe=$work/$p-mpich
		b0=$(devbytes "${ms[@]}")
		run "$t" "$np" "$mounts" "$exe" || rc=$?
		# UCX's async-event assertion after a run whose data checked out
		# (TESTING.md: once in about 230 runs, openucx/ucx#10432; which
		# event came twice is not found yet) is run once more, and said.
		if ((rc != 0)) && grep -q "^$p: ok" "$work/run.log" &&
			grep -q "Assertion .wait_ctx->cb_id == (-1)' failed\|wait_ctx->cb_id == (-1) failed" "$work/run.log"; then
			echo "$t $p np=$np $where: UCX's async-event assertion after the data checked out (openucx/ucx#10432); once more"
			rc=0
			run "$t" "$np" "$mounts" "$exe" || rc=$?
		fi
		# A run that hung (its timeout, exit 124) runs once more, said
		# so: ob1+openib's stream with 4 ranks hung in 2 of 13 runs on
		# 2026-12-03, within minutes of each other, and is not
		# understood yet (TESTING.md). A run whose data failed never
		# runs again, and a second hang fails.
		if ((rc == 124)); then
			echo "$t $p np=$np $where: HUNG (timeout); once more (TESTING.md: an open defect)"
			rc=0
			run "$t" "$np" "$mounts" "$exe" || rc=$?
		fi
		b1=$(devbytes "${ms[@]}")
		moved=$((moved + b1 - b0))
		if ((rc == 0)) && grep -q "^$p: ok" "$work/run.log"; then
			printf '%-12s %-8s np=%d %-10s ok   (%3d s, device %5d MB)\n' "$t" "$p" "$np" "$where" \
				$((SECONDS - t0)) $(((b1 - b0) >> 20))
		else
			printf '%-12s %-8s np=%d %-10s FAIL (exit %d, %d s)\n' "$t" "$p" "$np" "$where" $rc $((SECONDS - t0))
			grep -v '^\s*$' "$work/run.log" | grep -vE 'DIAG|^--------' | head -n 12 | cut -c1-220 | sed 's/^/    /' || true
			failed+=("$t $p np=$np $where")
		fi
	done
	if ((moved < 1 << 20)); then
		echo "$t np=$np $where: the device moved $moved bytes: the transport did not use it"
		failed+=("$t np=$np $where: device unused")
	fi
}

t_all=$SECONDS
for t in $TRANSPORTS; do
	for w in $WHERE; do
		if [[ $w == one ]]; then
			check "$t" 2 "one mount" "$M"
		elif [[ $t == ompi-openib ]]; then
			echo "$t across two mounts: skipped (RoCE needs the rdmacm CPC, which Debian's Open MPI lacks: TESTING.md)"
		else
			check "$t" 2 "two mounts" "$MA:$MB"
		fi
	done
	if [[ " $RANKS4 " == *" $t "* && " $WHERE " == *" one "* ]]; then
		check "$t" 4 "one mount" "$M"
	fi
done

echo
if ((${#failed[@]})); then
	echo "mpi: ${#failed[@]} of $runs runs failed ($((SECONDS - t_all)) s):"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "mpi: all $runs runs passed in $((SECONDS - t_all)) s ($TRANSPORTS)"
