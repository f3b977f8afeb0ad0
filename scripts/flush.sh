#!/usr/bin/env bash
# flush.sh: the error flush. Work posted to an RC queue pair that can make no
# progress (its peer does not exist yet), then `echo error > ctl`: every
# outstanding send and receive completes with wr_flush_err, in order; a
# receive posted in ERR flushes at once; `reset` empties the queues with no
# completions at all.
source "$(dirname "$0")/lib.sh"

mount_device
gid=$(sed -n 's/^gid=//p' "$M/port")
PD=$(new pd "")
BUF=$(new mr "pd=$PD length=4096 access=local_write")
LKEY=$(sed -n 's/^lkey=//p' "$M/mr/$BUF/attr")
CQ=$(new cq "cqe=32")
A=$(new qp "pd=$PD qp_type=rc send_cq=$CQ recv_cq=$CQ max_send_wr=8 max_recv_wr=8 max_send_sge=1 max_recv_sge=1")
show "echo 'modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write' > $M/qp/$A/ctl"
for i in 1 2 3; do show "echo 'wr_id=$((10 + i)) sge=$LKEY:0:64' > $M/qp/$A/post_recv"; done
# Connected to a QPN nobody has, with a long timeout: the sends wait.
show "echo 'modify qp_state=RTR path_mtu=1024 dest_qp_num=999999 rq_psn=0 dgid=$gid max_dest_rd_atomic=1 min_rnr_timer=1' > $M/qp/$A/ctl"
show "echo 'modify qp_state=RTS sq_psn=0 timeout=31 retry_cnt=7 rnr_retry=7 max_rd_atomic=1' > $M/qp/$A/ctl"
show "printf 'opcode=send wr_id=1 sge=$LKEY:0:8\nopcode=send wr_id=2 send_flags=signaled sge=$LKEY:0:8\n' > $M/qp/$A/post_send"

show "echo error > $M/qp/$A/ctl"
expect_state "$A" ERR
expect_wc "$CQ" "^wr_id=1 status=wr_flush_err"
expect_wc "$CQ" "^wr_id=2 status=wr_flush_err"
for i in 1 2 3; do expect_wc "$CQ" "^wr_id=$((10 + i)) status=wr_flush_err opcode=recv"; done
show "echo 'wr_id=20 sge=$LKEY:0:64' > $M/qp/$A/post_recv"
expect_wc "$CQ" "^wr_id=20 status=wr_flush_err opcode=recv"

echo; echo "# reset: back to RESET, nothing left, no completions."
show "echo reset > $M/qp/$A/ctl"
expect_state "$A" RESET
sleep 0.1
[[ -z "$(cat "$M/cq/$CQ/poll")" ]] || die "reset produced completions"
show "cat $M/qp/$A/attr"
echo; echo "flush: all checks passed"
