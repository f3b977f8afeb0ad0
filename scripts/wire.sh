#!/usr/bin/env bash
# wire.sh: two rdmafs devices talking RoCEv2 (IB transport over UDP 4791)
# through the kernel's network stack, here on two loopback addresses. An RC
# queue pair on each, connected by GID + QPN exactly as on one device; an
# RDMA WRITE and a SEND cross the wire; then XRC: an XRC_SEND QP on one
# device sends through an XRC_RECV QP on the other into the XRC SRQ each
# message names (the XRCETH after the BTH), and a number that is no XRC
# SRQ there is an invalid request. `capture` shows the packets as pcap with
# valid ICRCs (and the XRCETH byte for byte). Needs root (raw sockets). Checks every
# result.
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
read -r PDA MRA CQA QPA LKA RKA <<<"$(setup "$M")"
read -r PDB MRB CQB QPB LKB RKB <<<"$(setup "$MB")"
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

echo; echo "# XRC: b has an XRC domain with two XRC SRQs (one CQ) and an XRC_RECV QP in it; a an XRC_SEND QP."
XD=$(newin "$MB" xrcd "")
CQX=$(newin "$MB" cq "cqe=16")
SRQ1=$(newin "$MB" srq "pd=$PDB max_wr=8 max_sge=1 srq_type=xrc xrcd=$XD cq=$CQX")
SRQ2=$(newin "$MB" srq "pd=$PDB max_wr=8 max_sge=1 srq_type=xrc xrcd=$XD cq=$CQX")
SRQN2=$(sed -n 's/^srq_num=//p' "$MB/srq/$SRQ2/attr")
TGT=$(newin "$MB" qp "qp_type=xrc_recv xrcd=$XD")
INI=$(newin "$M" qp "pd=$PDA qp_type=xrc_send send_cq=$CQA max_send_wr=8 max_send_sge=1")
echo "  xrcd $XD, xrc srqs $SRQ1 and $SRQ2 (srq_num $SRQN2), xrc_recv qp $TGT on b; xrc_send qp $INI on a"
show "echo 'modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write,remote_write' > $MB/qp/$TGT/ctl"
show "echo 'modify qp_state=RTR path_mtu=1024 dest_qp_num=$INI rq_psn=0 dgid=$gid_a max_dest_rd_atomic=1 min_rnr_timer=1' > $MB/qp/$TGT/ctl"
show "echo 'modify qp_state=RTS sq_psn=0 timeout=14' > $MB/qp/$TGT/ctl"
show "echo 'modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write' > $M/qp/$INI/ctl"
show "echo 'modify qp_state=RTR path_mtu=1024 dest_qp_num=$TGT rq_psn=0 dgid=$gid_b' > $M/qp/$INI/ctl"
show "echo 'modify qp_state=RTS sq_psn=0 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=1' > $M/qp/$INI/ctl"
show "echo 'wr_id=11 sge=$LKB:40000:64' > $MB/srq/$SRQ1/post_recv"
show "echo 'wr_id=12 sge=$LKB:41000:64' > $MB/srq/$SRQ2/post_recv"
show "printf 'xrc over RoCEv2!' | dd of=$M/mr/$MRA/mem bs=1 seek=50000 conv=notrunc status=none"
show "echo 'opcode=send wr_id=3 send_flags=signaled remote_srqn=$SRQN2 sge=$LKA:50000:16' > $M/qp/$INI/post_send"
expect_wc "$CQA" "^wr_id=3 status=success opcode=send qp_num=$INI byte_len=16$"
(M=$MB expect_wc "$CQX" "^wr_id=12 status=success opcode=recv qp_num=$TGT byte_len=16 src_qp=$INI$")
got=$(dd if="$MB/mr/$MRB/mem" bs=1 skip=41000 count=16 status=none)
[[ "$got" == "xrc over RoCEv2!" ]] || die "xrc srq $SRQ2 received '$got'"
grep -qx 'pending=1' "$MB/srq/$SRQ1/attr" || die "xrc srq $SRQ1 lost its WQE"
echo "  landed in xrc srq $SRQ2: $got"
show "echo 'opcode=rdma_write wr_id=4 send_flags=signaled remote_srqn=$SRQN2 sge=$LKA:50000:16 remote_addr=42000 rkey=$RKB' > $M/qp/$INI/post_send"
expect_wc "$CQA" "^wr_id=4 status=success opcode=rdma_write qp_num=$INI byte_len=16$"
[[ $(dd if="$MB/mr/$MRB/mem" bs=1 skip=42000 count=16 status=none) == "xrc over RoCEv2!" ]] || die "the XRC WRITE did not land"
echo "# A number that is no XRC SRQ of b's domain: an invalid request."
show "echo 'opcode=send wr_id=5 send_flags=signaled remote_srqn=999 sge=$LKA:50000:16' > $M/qp/$INI/post_send"
expect_wc "$CQA" "^wr_id=5 status=rem_inv_req_err opcode=send qp_num=$INI byte_len=0$"
[[ $(cat "$MB/qp/$TGT/state") == ERR ]] || die "the XRC_RECV QP is not in ERR after an invalid request"

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
	# The XRC SEND ONLY (opcode 0xa4) to b's XRC_RECV QP. tshark has the
	# opcode's number but no XRC dissector ("Unknown OpCode"), so the
	# XRCETH is checked here: a reserved zero byte and the 24-bit SRQ
	# number, right after the 12-byte BTH.
	xrc=$(tshark -r "$work/a.pcap" -Y "infiniband.bth.opcode == 164 && infiniband.bth.destqp == $TGT" \
		-T fields -e udp.payload 2>/dev/null | head -n 1)
	echo "  the XRC send's IB bytes: $xrc"
	[[ -n "$xrc" ]] || die "tshark finds no XRC SEND ONLY to qp $TGT"
	want=$(printf '00%06x' "$SRQN2")
	[[ ${xrc:24:8} == "$want" ]] || die "the XRCETH after the BTH is ${xrc:24:8}, not $want"
fi
echo; echo "wire: all checks passed"
