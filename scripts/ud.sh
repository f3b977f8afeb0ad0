#!/usr/bin/env bash
# ud.sh: datagrams. Two UD queue pairs, an address handle for the device's
# own GID, a SEND with immediate data; the receive buffer starts with the
# 40-byte GRH, then the payload. Checks every result.
source "$(dirname "$0")/lib.sh"

mount_device
gid=$(sed -n 's/^gid=//p' "$M/port")
PD=$(new pd "")
BUF=$(new mr "pd=$PD length=4096 access=local_write")
LKEY=$(sed -n 's/^lkey=//p' "$M/mr/$BUF/attr")
CQ=$(new cq "cqe=8")
A=$(new qp "pd=$PD qp_type=ud send_cq=$CQ recv_cq=$CQ max_send_wr=4 max_recv_wr=4 max_send_sge=1 max_recv_sge=1")
B=$(new qp "pd=$PD qp_type=ud send_cq=$CQ recv_cq=$CQ max_send_wr=4 max_recv_wr=4 max_send_sge=1 max_recv_sge=1")
for q in "$A" "$B"; do
	show "echo 'modify qp_state=INIT pkey_index=0 port_num=1 qkey=0x1234' > $M/qp/$q/ctl"
	show "echo 'modify qp_state=RTR' > $M/qp/$q/ctl"
	show "echo 'modify qp_state=RTS sq_psn=0' > $M/qp/$q/ctl"
done
AH=$(new ah "pd=$PD dgid=$gid")
show "cat $M/ah/$AH/attr"

show "printf 'datagram!' | dd of=$M/mr/$BUF/mem bs=1 seek=1024 conv=notrunc status=none"
show "echo 'wr_id=5 sge=$LKEY:0:512' > $M/qp/$B/post_recv"
show "echo 'opcode=send_with_imm wr_id=6 send_flags=signaled imm_data=42 sge=$LKEY:1024:9 ah=$AH remote_qpn=$B remote_qkey=0x1234' > $M/qp/$A/post_send"
expect_wc "$CQ" "^wr_id=6 status=success opcode=send qp_num=$A byte_len=9$"
expect_wc "$CQ" "^wr_id=5 status=success opcode=recv qp_num=$B byte_len=49 imm_data=42 src_qp=$A wc_flags=grh,with_imm$"
show "dd if=$M/mr/$BUF/mem bs=1 count=49 status=none | od -A d -t x1"
got=$(dd if="$M/mr/$BUF/mem" bs=1 skip=40 count=9 status=none)
[[ "$got" == "datagram!" ]] || die "payload after the GRH is '$got'"
echo "  payload after the 40-byte GRH: $got"

echo; echo "# A wrong Q_Key: the datagram is dropped, the sender still completes."
show "echo 'wr_id=8 sge=$LKEY:0:512' > $M/qp/$B/post_recv"
show "echo 'opcode=send wr_id=9 send_flags=signaled sge=$LKEY:1024:9 ah=$AH remote_qpn=$B remote_qkey=0x9999' > $M/qp/$A/post_send"
expect_wc "$CQ" "^wr_id=9 status=success opcode=send qp_num=$A byte_len=9$"
sleep 0.1
[[ -z "$(cat "$M/cq/$CQ/poll")" ]] || die "a datagram with a wrong qkey was received"
grep -E '^qkey_violations=1$' "$M/counters" || die "qkey_violations not counted"
echo; echo "ud: all checks passed"
