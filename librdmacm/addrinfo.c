/* rdma_getaddrinfo: getaddrinfo(3) for RDMA, as librdmacm's addrinfo.c
 * answers it for IP addresses: the first address found becomes the
 * destination (or, with RAI_PASSIVE, the source), and the port space and
 * QP type follow the hints or the socket type (stream → TCP/RC, datagram
 * → UDP/UD). Failures of getaddrinfo come back as its EAI_* code, as
 * librdmacm passes them. No IB ACM, no path records. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

static void hints_to_ai(const struct rdma_addrinfo *h, struct addrinfo *ai)
{
	memset(ai, 0, sizeof(*ai));
	if (h->ai_flags & RAI_PASSIVE)
		ai->ai_flags |= AI_PASSIVE;
	if (h->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	if (h->ai_family != AF_IB)
		ai->ai_family = h->ai_family;
	switch (h->ai_port_space) {
	case RDMA_PS_TCP:
		ai->ai_socktype = SOCK_STREAM;
		ai->ai_protocol = IPPROTO_TCP;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		ai->ai_socktype = SOCK_DGRAM;
		ai->ai_protocol = IPPROTO_UDP;
		break;
	default:
		if (h->ai_qp_type == IBV_QPT_RC || h->ai_qp_type == IBV_QPT_UC) {
			ai->ai_socktype = SOCK_STREAM;
			ai->ai_protocol = IPPROTO_TCP;
		} else if (h->ai_qp_type == IBV_QPT_UD) {
			ai->ai_socktype = SOCK_DGRAM;
			ai->ai_protocol = IPPROTO_UDP;
		}
		break;
	}
}

static struct sockaddr *dup_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *p = malloc(len);

	if (p)
		memcpy(p, sa, len);
	return p;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct rdma_addrinfo *rai;
	struct addrinfo aih, *ai = NULL;
	int ret;

	if (!res || (!node && !service && !hints)) {
		errno = EINVAL;
		return -1;
	}
	if (!hints)
		hints = &nohints;
	rai = calloc(1, sizeof(*rai));
	if (!rai) {
		errno = ENOMEM;
		return -1;
	}
	rai->ai_flags = hints->ai_flags;
	rai->ai_family = hints->ai_family;
	rai->ai_qp_type = hints->ai_qp_type;
	rai->ai_port_space = hints->ai_port_space;
	if (node || service) {
		hints_to_ai(hints, &aih);
		ret = getaddrinfo(node, service, &aih, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		rai->ai_family = ai->ai_family;
		if (!rai->ai_qp_type)
			rai->ai_qp_type = ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
		if (!rai->ai_port_space)
			rai->ai_port_space = ai->ai_socktype == SOCK_DGRAM ? RDMA_PS_UDP : RDMA_PS_TCP;
		struct sockaddr *sa = dup_addr(ai->ai_addr, ai->ai_addrlen);
		if (!sa)
			goto nomem;
		if (hints->ai_flags & RAI_PASSIVE) {
			rai->ai_src_addr = sa;
			rai->ai_src_len = ai->ai_addrlen;
		} else {
			rai->ai_dst_addr = sa;
			rai->ai_dst_len = ai->ai_addrlen;
		}
		if (ai->ai_canonname) {
			char **cn = (hints->ai_flags & RAI_PASSIVE) ? &rai->ai_src_canonname : &rai->ai_dst_canonname;
			if (!(*cn = strdup(ai->ai_canonname)))
				goto nomem;
		}
		freeaddrinfo(ai);
		ai = NULL;
	} else {
		if (!rai->ai_qp_type)
			rai->ai_qp_type = IBV_QPT_RC;
		if (!rai->ai_port_space)
			rai->ai_port_space = RDMA_PS_TCP;
	}
	if (!rai->ai_src_addr && hints->ai_src_len && hints->ai_src_addr) {
		if (!(rai->ai_src_addr = dup_addr(hints->ai_src_addr, hints->ai_src_len)))
			goto nomem;
		rai->ai_src_len = hints->ai_src_len;
	}
	if (!rai->ai_dst_addr && hints->ai_dst_len && hints->ai_dst_addr && !(hints->ai_flags & RAI_PASSIVE)) {
		if (!(rai->ai_dst_addr = dup_addr(hints->ai_dst_addr, hints->ai_dst_len)))
			goto nomem;
		rai->ai_dst_len = hints->ai_dst_len;
	}
	*res = rai;
	return 0;
nomem:
	if (ai)
		freeaddrinfo(ai);
	rdma_freeaddrinfo(rai);
	errno = ENOMEM;
	return -1;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}
