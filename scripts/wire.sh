#!/usr/bin/env bash
# wire.sh: two rdmafs devices talking RoCEv2 (IB transport over UDP 4791)
# through the kernel's network stack, here on two loopback addresses. An RC
# queue pair on each, connected by GID + QPN exactly as on one device; an
# RDMA WRITE and a SEND cross the wire; `capture` shows the packets as pcap
# with valid ICRCs. Needs root (raw sockets). Checks every result.
source "$(dirname "$0")/lib.sh"

A_ADDR=${A_ADDR:-127.0.77.1}
B_ADDR=${B_ADDR:-127.0.77.2}
MB=$work/mntb
mkdir -p "$MB"
pp "$RDMAFS" mount --log "$work/daemon.log" --addr "$A_ADDR" "$M"
pp "$RDMAFS" mount --log "$work/daemon-b.log" --addr "$B_ADDR" "$MB"
at_exit '"$RDMAFS" umount "$MB" 2>/dev/null'
show "grep -E '^(gid|active_mtu)=' $M/port $MB/port"
gid_a=$(sed -n 's/^gid=//p' "$M/port")
gid_b=$(sed -n 's/^gid=//p' "$MB/port")
[[ "$gid_a" == "::ffff:$A_ADDR" ]] || die "device a's GID is $gid_a"

# newin MOUNT KIND k=v...: a transaction on either device.
newin() {
	local mnt=$1 kind=$2 name
	shift 2
	{ echo "$*" >&0; read -r name; } <>"$mnt/$kind/new"
	echo "$name"
}
setup() { # MOUNT -> "pd mr cq qp lkey rkey"
	local pd mr cq qp
	pd=$(newin "$1" pd "")
	mr=$(newin "$1" mr "pd=$pd length=65536 access=local_write,remote_write,remote_read")
	cq=$(newin "$1" cq "cqe=16")
	qp=$(newin "$1" qp "pd=$pd qp_type=rc send_cq=$cq recv_cq=$cq max_send_wr=8 max_recv_wr=8 max_send_sge=1 max_recv_sge=1")
	echo "$pd $mr $cq $qp $(sed -n 's/^lkey=//p' "$1/mr/$mr/attr") $(sed -n 's/^rkey=//p' "$1/mr/$mr/attr")"
}
read -r _ MRA CQA QPA LKA RKA <<<"$(setup "$M")"
read -r _ MRB CQB QPB LKB RKB <<<"$(setup "$MB")"
echo "device a: qp $QPA; device b: qp $QPB"

connect() { # MOUNT QP DEST_QP DEST_GID
	show "echo 'modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write,remote_write,remote_read' > $1/qp/$2/ctl"
	show "echo 'modify qp_state=RTR path_mtu=1024 dest_qp_num=$3 rq_psn=0 dgid=$4 max_dest_rd_atomic=1 min_rnr_timer=1' > $1/qp/$2/ctl"
	show "echo 'modify qp_state=RTS sq_psn=0 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=1' > $1/qp/$2/ctl"
}
connect "$M" "$QPA" "$QPB" "$gid_b"
connect "$MB" "$QPB" "$QPA" "$gid_a"

# Capture everything device a sends and receives while the data moves.
cat "$M/capture" >"$work/a.pcap" &
cap=$!
sleep 0.2

echo; echo "# 10000 bytes by RDMA WRITE from a to b (10 packets at MTU 1024)."
head -c 10000 /dev/urandom >"$work/payload"
show "dd if=$work/payload of=$M/mr/$MRA/mem conv=notrunc status=none"
show "echo 'opcode=rdma_write wr_id=1 send_flags=signaled sge=$LKA:0:10000 remote_addr=0 rkey=$RKB' > $M/qp/$QPA/post_send"
expect_wc "$CQA" "^wr_id=1 status=success opcode=rdma_write qp_num=$QPA byte_len=10000$"
cmp <(head -c 10000 "$MB/mr/$MRB/mem") "$work/payload" || die "the bytes that arrived differ"
echo "  10000 bytes arrived intact"

echo; echo "# A SEND back from b to a."
show "echo 'wr_id=7 sge=$LKA:20000:64' > $M/qp/$QPA/post_recv"
show "printf 'pong over RoCEv2' | dd of=$MB/mr/$MRB/mem bs=1 seek=30000 conv=notrunc status=none"
show "echo 'opcode=send wr_id=2 send_flags=signaled sge=$LKB:30000:16' > $MB/qp/$QPB/post_send"
expect_wc "$CQA" "^wr_id=7 status=success opcode=recv qp_num=$QPA byte_len=16 src_qp=$QPB$"
got=$(dd if="$M/mr/$MRA/mem" bs=1 skip=20000 count=16 status=none)
[[ "$got" == "pong over RoCEv2" ]] || die "received '$got'"
echo "  received: $got"

sleep 0.2
kill "$cap" 2>/dev/null || true
wait "$cap" 2>/dev/null || true
show "grep -E '^(wire_packets_sent|wire_packets_recv|icrc_errors|malformed_packets)=' $M/counters"
grep -qE '^wire_packets_sent=[1-9]' "$M/counters" || die "nothing went over the wire"
grep -qE '^icrc_errors=0$' "$M/counters" || die "ICRC errors"
size=$(stat -c %s "$work/a.pcap")
echo "  capture: $size bytes of pcap"
((size > 10000)) || die "the capture is too small"
if command -v tshark >/dev/null; then
	show "tshark -r $work/a.pcap 2>/dev/null | head -n 14"
fi
echo; echo "wire: all checks passed"
