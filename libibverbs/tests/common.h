/* What the C tests of the library share: ctest's CHECK, which counts
 * failures instead of stopping, and connecting a QP to another QP of the
 * same port, by LID on an InfiniBand port and by GID on a RoCE one, as a
 * program written for any device does. Header-only: each test is one
 * file. */
#ifndef RDMAFS_TESTS_COMMON_H
#define RDMAFS_TESTS_COMMON_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#include "../ctest/check.h"

/* tc_connect moves q through INIT, RTR and RTS towards dest on port 1
 * (RC: with one READ/atomic each way, RNR retried for ever, retries
 * limited to retry_cnt with timeout). 0 or the failing modify's errno. */
static inline int tc_connect(struct ibv_qp *q, uint32_t dest, const struct ibv_port_attr *port,
			     const union ibv_gid *gid, unsigned int access, uint8_t timeout, uint8_t retry_cnt)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	int rc = q->qp_type == IBV_QPT_RC;
	int err = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;

	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.ah_attr.dlid = port->lid;
	a.ah_attr.port_num = 1;
	if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (rc) {
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if ((err = ibv_modify_qp(q, &a, mask)))
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc) {
		a.timeout = timeout;
		a.retry_cnt = retry_cnt;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(q, &a, mask);
}

#endif
