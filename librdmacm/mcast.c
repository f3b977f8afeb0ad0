/* rdmafs's librdmacm: multicast joins (rdma_join_multicast,
 * rdma_join_multicast_ex, rdma_leave_multicast).
 *
 * On RoCE the kernel's rdma_cm joins without asking anyone: it makes the
 * MGID from the IP group (cma_iboe_set_mgid), reports MULTICAST_JOIN with
 * the AH attributes of the group, QPN 0xFFFFFF and the port space's
 * Q_Key, and librdmacm then attaches the id's QP (ucma_process_join; not
 * for a send-only join). Here the library does the kernel's part itself:
 * the group is the daemon's (ibv_attach_mcast on the QP: the device's
 * table of groups, its limits and per-user shares, and on the wire the IP
 * membership), so there is nothing for the CM agent to keep, and the
 * JOIN event is queued on the id's channel at once, in order after what
 * the channel already holds. The MGID rule is the daemon's (cm.McastGID):
 * on a wire mount an IPv4 group is ::ffff:a.b.c.d, the address the wire
 * sends to; on a local mount (an InfiniBand port to programs) the IPoIB
 * mapping with rdma_cm's signature, and a multicast LID from the MGID,
 * the same in every process, as a subnet manager would give one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

/* bounds one id's joins: each costs the program a little memory, and the
 * attachments behind them are the daemon's, bounded per user there */
#define RC_MAX_JOINS 1024

static uint64_t next_serial;

static int fail(int err)
{
	errno = err;
	return -1;
}

static bool is_multicast(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_MULTICAST(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return false;
	if (b->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
		       sizeof(struct in6_addr));
}

/* cm.McastGID's rule, and the LID for an InfiniBand port; rdma_cm's
 * signature (0x01 in byte 7) only in the UDP port space, as the kernel */
static void group_of(const struct sockaddr *sa, bool wire, bool udp, union ibv_gid *mgid, uint16_t *mlid)
{
	memset(mgid, 0, sizeof(*mgid));
	if (sa->sa_family == AF_INET6) {
		memcpy(mgid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	} else {
		const uint8_t *v = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
		if (wire) {
			mgid->raw[10] = mgid->raw[11] = 0xff;
			memcpy(mgid->raw + 12, v, 4);
		} else {
			static const uint8_t pre[8] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0x00, 0x01};
			memcpy(mgid->raw, pre, 8);
			mgid->raw[7] = udp ? 0x01 : 0x00;
			mgid->raw[12] = v[0] & 0x0f;
			memcpy(mgid->raw + 13, v + 1, 3);
		}
	}
	*mlid = 0;
	if (!wire) {
		/* FNV-1a of the MGID into 0xc000..0xfffe */
		uint32_t h = 2166136261u;
		for (int i = 0; i < 16; i++)
			h = (h ^ mgid->raw[i]) * 16777619u;
		*mlid = (uint16_t)(0xc000 + h % 0x3fff);
	}
}

int rdma_join_multicast_ex(struct rdma_cm_id *cid, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	struct rc_id *id;
	struct rc_sub *sub;
	struct rc_mc *mc;
	int err, n = 0;

	if (!cid || !attr)
		return fail(EINVAL);
	id = to_rid(cid);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr)
		return fail(EINVAL);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))
		return fail(EINVAL);
	if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
	    attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
		rc_log("rdma_join_multicast_ex: join_flags %u (want FULLMEMBER or SENDONLY_FULLMEMBER)", attr->join_flags);
		return fail(EINVAL);
	}
	if (attr->addr->sa_family != AF_INET && attr->addr->sa_family != AF_INET6)
		return fail(EAFNOSUPPORT);
	if (!is_multicast(attr->addr)) {
		rc_log("rdma_join_multicast: not a multicast address");
		return fail(EINVAL);
	}
	if (cid->qp_type != IBV_QPT_UD) {
		rc_log("rdma_join_multicast: the id is not UD (RDMA_PS_UDP or RDMA_PS_IPOIB)");
		return fail(EINVAL);
	}
	/* as the kernel: the id must have its device (bound to an address of
	 * it, or resolved) */
	if (!cid->verbs || (err = rc_id_sub(id, &sub))) {
		rc_log("rdma_join_multicast: the id has no device yet (bind it to an address or resolve one)");
		return fail(EINVAL);
	}
	/* the kernel's rdma_cm has no IPv6 groups on RoCEv2 (its MGID would
	 * be the address, which an IPv4 netdev cannot send to): it fails the
	 * join (cma_iboe_join_multicast, ENOTSUPP, 524 to a program) */
	if (sub->dev->on_wire && attr->addr->sa_family == AF_INET6) {
		rc_log("rdma_join_multicast: an IPv6 group on a RoCEv2 device (as the kernel's rdma_cm: IPv4 groups only)");
		return fail(EOPNOTSUPP);
	}
	if (!(mc = calloc(1, sizeof(*mc))))
		return fail(ENOMEM);
	memcpy(&mc->addr, attr->addr, rc_sockaddr_len(attr->addr));
	mc->sendonly = attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	mc->context = context;
	mc->qkey = RDMA_UDP_QKEY;
	group_of(attr->addr, sub->dev->on_wire, cid->ps == RDMA_PS_UDP, &mc->mgid, &mc->mlid);

	pthread_mutex_lock(&rc_lock);
	for (struct rc_mc *x = id->mcs; x; x = x->next)
		n++;
	if (n >= RC_MAX_JOINS) {
		pthread_mutex_unlock(&rc_lock);
		free(mc);
		rc_log("rdma_join_multicast: %d joins on one id", n);
		return fail(ENOMEM);
	}
	mc->serial = ++next_serial;
	mc->next = id->mcs;
	id->mcs = mc;
	pthread_mutex_unlock(&rc_lock);

	struct rc_record r;
	memset(&r, 0, sizeof(r));
	r.type = RDMA_CM_EVENT_MULTICAST_JOIN;
	r.id = sub->handle;
	r.mc = mc->serial;
	r.listen_id = -1;
	r.private_data_len = -1;
	if ((err = rc_channel_inject(id, sub->dev, &r))) {
		pthread_mutex_lock(&rc_lock);
		for (struct rc_mc **p = &id->mcs; *p; p = &(*p)->next)
			if (*p == mc) {
				*p = mc->next;
				break;
			}
		pthread_mutex_unlock(&rc_lock);
		free(mc);
		return fail(err);
	}
	if ((err = rc_id_complete(id, RDMA_CM_EVENT_MULTICAST_JOIN)))
		return fail(err);
	return 0;
}

int rdma_join_multicast(struct rdma_cm_id *cid, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex a = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = addr,
	};

	return rdma_join_multicast_ex(cid, &a, context);
}

int rc_mc_event(struct rc_id *id, uint64_t serial, struct rdma_ud_param *ud)
{
	struct rc_mc *mc = NULL;
	struct ibv_qp *qp;

	pthread_mutex_lock(&rc_lock);
	for (struct rc_mc *x = id->mcs; x; x = x->next)
		if (x->serial == serial)
			mc = x;
	pthread_mutex_unlock(&rc_lock);
	if (!mc)
		return EAGAIN; /* left before the event was read */
	memset(ud, 0, sizeof(*ud));
	ud->private_data = mc->context;
	ud->qp_num = 0xffffff;
	ud->qkey = mc->qkey;
	ud->ah_attr.dlid = mc->mlid;
	ud->ah_attr.port_num = id->id.port_num ? id->id.port_num : 1;
	ud->ah_attr.is_global = 1;
	ud->ah_attr.grh.dgid = mc->mgid;
	ud->ah_attr.grh.sgid_index = 0;
	ud->ah_attr.grh.hop_limit = 64;
	qp = id->id.qp;
	if (!qp || mc->sendonly)
		return 0;
	int err = ibv_attach_mcast(qp, &mc->mgid, mc->mlid);
	if (!err)
		mc->attached = true;
	return err;
}

int rdma_leave_multicast(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	struct rc_id *id;
	struct rc_mc *mc = NULL;

	if (!cid || !addr)
		return fail(EINVAL);
	id = to_rid(cid);
	pthread_mutex_lock(&rc_lock);
	for (struct rc_mc **p = &id->mcs; *p; p = &(*p)->next)
		if (same_addr(&(*p)->addr, addr)) {
			mc = *p;
			*p = mc->next;
			break;
		}
	pthread_mutex_unlock(&rc_lock);
	if (!mc)
		return fail(EADDRNOTAVAIL);
	int err = 0;
	if (mc->attached && cid->qp)
		err = ibv_detach_mcast(cid->qp, &mc->mgid, mc->mlid);
	free(mc);
	return err ? fail(err) : 0;
}

void rc_mc_leave_all(struct rc_id *id)
{
	pthread_mutex_lock(&rc_lock);
	struct rc_mc *mc = id->mcs;
	id->mcs = NULL;
	pthread_mutex_unlock(&rc_lock);
	while (mc) {
		struct rc_mc *next = mc->next;
		if (mc->attached && id->id.qp)
			ibv_detach_mcast(id->id.qp, &mc->mgid, mc->mlid);
		free(mc);
		mc = next;
	}
}
