#!/usr/bin/env bash
# demo.sh: the rdmafs tour. Mounts a device in a temp dir, connects two RC
# queue pairs through INIT/RTR/RTS with echo, moves data with an RDMA WRITE
# and a SEND posted as text, shows the completions, the bytes and every QP's
# state with cat, then provokes an RNR and a remote access error and shows
# their completions, and the device at a glance with rdmafs show. It checks
# every result and exits non-zero on a wrong one.
source "$(dirname "$0")/lib.sh"

mount_device
pp cat "$M/port"
gid=$(sed -n 's/^gid=//p' "$M/port")

echo; echo "# A protection domain, two memory regions, a completion queue per side."
PD=$(new pd ""); echo "pd=$PD"
SRC=$(new mr "pd=$PD length=4096 access=local_write")
DST=$(new mr "pd=$PD length=4096 access=local_write,remote_write,remote_read")
CQA=$(new cq "cqe=16"); CQB=$(new cq "cqe=16")
echo "mr src=$SRC dst=$DST, cq a=$CQA b=$CQB"
key() { sed -n "s/^$2=//p" "$M/mr/$1/attr"; }
SRC_LKEY=$(key "$SRC" lkey); DST_LKEY=$(key "$DST" lkey); DST_RKEY=$(key "$DST" rkey)

echo; echo "# Two RC queue pairs."
A=$(new qp "pd=$PD qp_type=rc send_cq=$CQA recv_cq=$CQA max_send_wr=16 max_recv_wr=16 max_send_sge=1 max_recv_sge=1")
B=$(new qp "pd=$PD qp_type=rc send_cq=$CQB recv_cq=$CQB max_send_wr=16 max_recv_wr=16 max_send_sge=1 max_recv_sge=1")
echo "qp a=$A b=$B"
expect_state "$A" RESET

connect() { # QP DEST
	show "echo 'modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write,remote_write,remote_read' > $M/qp/$1/ctl"
	show "echo 'modify qp_state=RTR path_mtu=1024 dest_qp_num=$2 rq_psn=0 dgid=$gid max_dest_rd_atomic=1 min_rnr_timer=1' > $M/qp/$1/ctl"
	show "echo 'modify qp_state=RTS sq_psn=0 timeout=14 retry_cnt=7 rnr_retry=${3:-7} max_rd_atomic=1' > $M/qp/$1/ctl"
}
connect "$A" "$B"
connect "$B" "$A"
expect_state "$A" RTS
expect_state "$B" RTS

echo; echo "# Data into the source MR with dd, then an RDMA WRITE of it into the destination."
show "printf 'hello from an RDMA WRITE' | dd of=$M/mr/$SRC/mem conv=notrunc status=none"
show "echo 'opcode=rdma_write wr_id=1 send_flags=signaled sge=$SRC_LKEY:0:24 remote_addr=0 rkey=$DST_RKEY' > $M/qp/$A/post_send"
expect_wc "$CQA" "^wr_id=1 status=success opcode=rdma_write qp_num=$A byte_len=24$"
got=$(dd if="$M/mr/$DST/mem" bs=1 count=24 status=none)
show "dd if=$M/mr/$DST/mem bs=1 count=24 status=none; echo"
[[ "$got" == "hello from an RDMA WRITE" ]] || die "destination holds '$got'"

echo; echo "# A SEND: B posts a receive at offset 100 of its MR, A sends 11 bytes."
show "printf 'ping: hello' | dd of=$M/mr/$SRC/mem bs=1 seek=200 conv=notrunc status=none"
show "echo 'wr_id=7 sge=$DST_LKEY:100:64' > $M/qp/$B/post_recv"
show "echo 'opcode=send wr_id=2 send_flags=signaled sge=$SRC_LKEY:200:11' > $M/qp/$A/post_send"
expect_wc "$CQA" "^wr_id=2 status=success opcode=send qp_num=$A byte_len=11$"
expect_wc "$CQB" "^wr_id=7 status=success opcode=recv qp_num=$B byte_len=11 src_qp=$A$"
got=$(dd if="$M/mr/$DST/mem" bs=1 skip=100 count=11 status=none)
[[ "$got" == "ping: hello" ]] || die "receive buffer holds '$got'"
echo "  arrived: $got"

echo; echo "# State and attributes, straight from the device."
for q in "$A" "$B"; do show "cat $M/qp/$q/state"; done
show "cat $M/qp/$A/attr"
show "cat $M/qp/$A/counters"

echo; echo "# RNR: a SEND with no receive posted, on a pair with rnr_retry=0."
C=$(new qp "pd=$PD qp_type=rc send_cq=$CQA recv_cq=$CQA max_send_wr=4 max_recv_wr=4 max_send_sge=1 max_recv_sge=1")
D=$(new qp "pd=$PD qp_type=rc send_cq=$CQB recv_cq=$CQB max_send_wr=4 max_recv_wr=4 max_send_sge=1 max_recv_sge=1")
connect "$C" "$D" 0
connect "$D" "$C" 0
show "echo 'opcode=send wr_id=3 send_flags=signaled sge=$SRC_LKEY:0:8' > $M/qp/$C/post_send"
expect_wc "$CQA" "^wr_id=3 status=rnr_retry_exc_err opcode=send qp_num=$C"
expect_state "$C" ERR

echo; echo "# A remote access error: an RDMA WRITE with a wrong rkey."
show "echo 'opcode=rdma_write wr_id=4 send_flags=signaled sge=$SRC_LKEY:0:8 remote_addr=0 rkey=$((DST_RKEY ^ 0xff))' > $M/qp/$A/post_send"
expect_wc "$CQA" "^wr_id=4 status=rem_access_err opcode=rdma_write qp_num=$A"
expect_state "$A" ERR
expect_state "$B" ERR

echo; echo "# The device's view."
show "cat $M/counters"
show "cat $M/events"

echo; echo "# Every object at a glance, from the same files: rdmafs show (rdmafs trace MOUNT QPN follows one QP's packets)."
pp "$RDMAFS" show "$M"
"$RDMAFS" show "$M" qp | grep -Eq "^$A +root +RC +ERR +$B " || die "rdmafs show does not list qp $A in ERR, connected to $B"

echo; echo "demo: all checks passed"
