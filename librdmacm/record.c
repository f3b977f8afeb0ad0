/* The daemon's text, parsed: event records from a channel FIFO (one
 * 1024-byte write each, `event=NAME id=I status=N key=value ...` padded
 * with spaces and ending in a newline) and cm/I/attr snapshots (key=value
 * lines). No I/O here, so ctest/record_test.c checks it alone. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

static const struct {
	const char *name;
	enum rdma_cm_event_type type;
} event_names[] = {
	{"addr_resolved", RDMA_CM_EVENT_ADDR_RESOLVED},
	{"addr_error", RDMA_CM_EVENT_ADDR_ERROR},
	{"route_resolved", RDMA_CM_EVENT_ROUTE_RESOLVED},
	{"route_error", RDMA_CM_EVENT_ROUTE_ERROR},
	{"connect_request", RDMA_CM_EVENT_CONNECT_REQUEST},
	{"connect_response", RDMA_CM_EVENT_CONNECT_RESPONSE},
	{"connect_error", RDMA_CM_EVENT_CONNECT_ERROR},
	{"unreachable", RDMA_CM_EVENT_UNREACHABLE},
	{"rejected", RDMA_CM_EVENT_REJECTED},
	{"established", RDMA_CM_EVENT_ESTABLISHED},
	{"disconnected", RDMA_CM_EVENT_DISCONNECTED},
	{"device_removal", RDMA_CM_EVENT_DEVICE_REMOVAL},
	{"multicast_join", RDMA_CM_EVENT_MULTICAST_JOIN},
	{"multicast_error", RDMA_CM_EVENT_MULTICAST_ERROR},
	{"addr_change", RDMA_CM_EVENT_ADDR_CHANGE},
	{"timewait_exit", RDMA_CM_EVENT_TIMEWAIT_EXIT},
};

int rc_event_type(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(event_names) / sizeof(event_names[0]); i++)
		if (strlen(event_names[i].name) == len && !memcmp(event_names[i].name, name, len))
			return event_names[i].type;
	return -1;
}

/* A token of the text: [*p, *p+len) after skipping blanks; false at the end. */
static bool next_token(const char **p, const char *end, const char **tok, size_t *len)
{
	const char *s = *p;

	while (s < end && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r' || *s == 0))
		s++;
	if (s >= end)
		return false;
	*tok = s;
	while (s < end && *s != ' ' && *s != '\n' && *s != '\t' && *s != '\r' && *s != 0)
		s++;
	*len = s - *tok;
	*p = s;
	return true;
}

/* A decimal or 0x number of exactly [s, s+n); false if it is not one. */
static bool number(const char *s, size_t n, long long *v)
{
	char buf[32], *end;

	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, s, n);
	buf[n] = 0;
	errno = 0;
	*v = strtoll(buf, &end, 0);
	return *end == 0 && errno == 0;
}

static bool is_key(const char *tok, size_t klen, const char *key)
{
	return strlen(key) == klen && !memcmp(tok, key, klen);
}

static void copy_text(char *dst, size_t n, const char *s, size_t len)
{
	if (len >= n)
		len = n - 1;
	memcpy(dst, s, len);
	dst[len] = 0;
}

int rc_unhex(const char *s, size_t slen, uint8_t *out, size_t max)
{
	size_t n = 0;

	if (slen % 2)
		return -1;
	for (size_t i = 0; i < slen; i += 2) {
		int v = 0;
		for (int j = 0; j < 2; j++) {
			char c = s[i + j];
			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= c - '0';
			else if (c >= 'a' && c <= 'f')
				v |= c - 'a' + 10;
			else if (c >= 'A' && c <= 'F')
				v |= c - 'A' + 10;
			else
				return -1;
		}
		if (n == max)
			return -1;
		out[n++] = (uint8_t)v;
	}
	return (int)n;
}

void rc_hex(const void *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = 0;
}

int rc_parse_record(const char *buf, size_t len, struct rc_record *r)
{
	const char *p = buf, *end = buf + len, *tok;
	size_t tl;
	bool have_event = false, have_id = false;

	memset(r, 0, sizeof(*r));
	r->listen_id = -1;
	r->private_data_len = -1;
	r->responder_resources = r->initiator_depth = r->flow_control = -1;
	r->retry_count = r->rnr_retry_count = r->srq = -1;
	r->qp_num = r->qkey = -1;
	r->src_port = r->dst_port = -1;
	while (next_token(&p, end, &tok, &tl)) {
		const char *eq = memchr(tok, '=', tl);
		if (!eq)
			return EINVAL;
		size_t kl = eq - tok;
		const char *v = eq + 1;
		size_t vl = tl - kl - 1;
		long long n = 0;
		bool num = number(v, vl, &n);

		if (is_key(tok, kl, RDMAFS_KEY_EVENT)) {
			int t = rc_event_type(v, vl);
			if (t < 0)
				return EINVAL;
			r->type = t;
			have_event = true;
		} else if (is_key(tok, kl, RDMAFS_KEY_ID)) {
			if (!num || n <= 0 || n > UINT32_MAX)
				return EINVAL;
			r->id = (uint32_t)n;
			have_id = true;
		} else if (is_key(tok, kl, RDMAFS_KEY_PRIVATE_DATA)) {
			int got = rc_unhex(v, vl, r->private_data, sizeof(r->private_data));
			if (got < 0)
				return EINVAL;
			r->private_data_len = got;
		} else if (is_key(tok, kl, RDMAFS_KEY_SRC_ADDR)) {
			copy_text(r->src_addr, sizeof(r->src_addr), v, vl);
		} else if (is_key(tok, kl, RDMAFS_KEY_DST_ADDR)) {
			copy_text(r->dst_addr, sizeof(r->dst_addr), v, vl);
		} else if (!num) {
			continue; /* a key we do not know, with a word for a value */
		} else if (is_key(tok, kl, RDMAFS_KEY_STATUS)) {
			r->status = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_LISTEN_ID)) {
			r->listen_id = (long)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_RESPONDER_RESOURCES)) {
			r->responder_resources = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_INITIATOR_DEPTH)) {
			r->initiator_depth = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_FLOW_CONTROL)) {
			r->flow_control = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_RETRY_COUNT)) {
			r->retry_count = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_RNR_RETRY_COUNT)) {
			r->rnr_retry_count = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_SRQ)) {
			r->srq = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_QP_NUM)) {
			r->qp_num = n;
		} else if (is_key(tok, kl, RDMAFS_KEY_QKEY)) {
			r->qkey = n;
		} else if (is_key(tok, kl, RDMAFS_KEY_SRC_PORT)) {
			r->src_port = (int)n;
		} else if (is_key(tok, kl, RDMAFS_KEY_DST_PORT)) {
			r->dst_port = (int)n;
		}
	}
	if (!have_event || !have_id)
		return EINVAL;
	return 0;
}

int rc_sockaddr(const char *addr, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (port < 0 || port > 65535)
		return EINVAL;
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	if (inet_pton(AF_INET, addr, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		return 0;
	}
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET6, addr, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		return 0;
	}
	memset(ss, 0, sizeof(*ss));
	return EINVAL;
}

int rc_addr_text(const struct sockaddr *sa, char *out, size_t len)
{
	const void *a;

	switch (sa->sa_family) {
	case AF_INET:
		a = &((const struct sockaddr_in *)sa)->sin_addr;
		break;
	case AF_INET6:
		a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		break;
	default:
		return EINVAL;
	}
	return inet_ntop(sa->sa_family, a, out, len) ? 0 : EINVAL;
}

int rc_port_of(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	case AF_INET6:
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	case AF_IB:
		return (int)(be64toh(((const struct sockaddr_ib *)sa)->sib_sid) & 0xffff);
	}
	return 0;
}

bool rc_addr_any(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	case AF_INET6:
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	}
	return false;
}

socklen_t rc_sockaddr_len(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	case AF_IB:
		return sizeof(struct sockaddr_ib);
	}
	return 0;
}

enum ibv_mtu rc_mtu_enum(long bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	return IBV_MTU_1024;
}

const char *rc_ps_name(enum rdma_port_space ps)
{
	switch (ps) {
	case RDMA_PS_TCP: return "tcp";
	case RDMA_PS_UDP: return "udp";
	case RDMA_PS_IB: return "ib";
	case RDMA_PS_IPOIB: return "ipoib";
	}
	return NULL;
}

static long lval(long long v)
{
	return (long)v;
}

int rc_parse_attr(const char *text, struct rc_attr *a)
{
	const char *p = text, *end = text + strlen(text), *tok;
	size_t tl;
	char src[INET6_ADDRSTRLEN] = "", dst[INET6_ADDRSTRLEN] = "";
	long long sport = 0, dport = 0;
	bool sg = false, dg = false;

	memset(a, 0, sizeof(*a));
	long *longs[] = {&a->listen_id, &a->slid, &a->dlid, &a->hop_limit, &a->traffic_class,
			 &a->flow_label, &a->path_mtu, &a->packet_life_time, &a->pkey, &a->sl,
			 &a->tos, &a->ack_timeout, &a->responder_resources, &a->initiator_depth,
			 &a->flow_control, &a->retry_count, &a->rnr_retry_count, &a->srq,
			 &a->local_ack_timeout};
	static const char *const long_keys[] = {RDMAFS_KEY_LISTEN_ID, RDMAFS_KEY_SLID, RDMAFS_KEY_DLID,
		RDMAFS_KEY_HOP_LIMIT, RDMAFS_KEY_TRAFFIC_CLASS,
						RDMAFS_KEY_FLOW_LABEL, RDMAFS_KEY_PATH_MTU,
							RDMAFS_KEY_PACKET_LIFE_TIME, RDMAFS_KEY_PKEY,
							RDMAFS_KEY_SL,
						RDMAFS_KEY_TOS, RDMAFS_KEY_ACK_TIMEOUT,
							RDMAFS_KEY_RESPONDER_RESOURCES,
							RDMAFS_KEY_INITIATOR_DEPTH,
						RDMAFS_KEY_FLOW_CONTROL, RDMAFS_KEY_RETRY_COUNT,
							RDMAFS_KEY_RNR_RETRY_COUNT, RDMAFS_KEY_SRQ,
						RDMAFS_KEY_LOCAL_ACK_TIMEOUT};
	long long *lls[] = {&a->qp_num, &a->psn, &a->remote_qp_num, &a->remote_psn, &a->remote_qkey,
			    &a->migrated_after};
	static const char *const ll_keys[] = {RDMAFS_KEY_QP_NUM, RDMAFS_KEY_PSN, RDMAFS_KEY_REMOTE_QP_NUM,
		RDMAFS_KEY_REMOTE_PSN, RDMAFS_KEY_REMOTE_QKEY,
					      RDMAFS_KEY_MIGRATED_AFTER};
	for (size_t i = 0; i < sizeof(longs) / sizeof(longs[0]); i++)
		*longs[i] = -1;
	for (size_t i = 0; i < sizeof(lls) / sizeof(lls[0]); i++)
		*lls[i] = -1;

	while (next_token(&p, end, &tok, &tl)) {
		const char *eq = memchr(tok, '=', tl);
		if (!eq)
			continue;
		size_t kl = eq - tok;
		const char *v = eq + 1;
		size_t vl = tl - kl - 1;
		long long n = 0;
		bool num = number(v, vl, &n);
		char word[64];

		copy_text(word, sizeof(word), v, vl);
		if (is_key(tok, kl, RDMAFS_KEY_STATE)) {
			copy_text(a->state, sizeof(a->state), v, vl);
		} else if (is_key(tok, kl, RDMAFS_KEY_SRC_ADDR)) {
			copy_text(src, sizeof(src), v, vl);
		} else if (is_key(tok, kl, RDMAFS_KEY_DST_ADDR)) {
			copy_text(dst, sizeof(dst), v, vl);
		} else if (is_key(tok, kl, RDMAFS_KEY_SRC_PORT) && num) {
			sport = n;
		} else if (is_key(tok, kl, RDMAFS_KEY_DST_PORT) && num) {
			dport = n;
		} else if (is_key(tok, kl, RDMAFS_KEY_SGID)) {
			sg = inet_pton(AF_INET6, word, a->sgid.raw) == 1;
		} else if (is_key(tok, kl, RDMAFS_KEY_DGID)) {
			dg = inet_pton(AF_INET6, word, a->dgid.raw) == 1;
		} else if (num) {
			for (size_t i = 0; i < sizeof(longs) / sizeof(longs[0]); i++)
				if (is_key(tok, kl, long_keys[i]))
					*longs[i] = lval(n);
			for (size_t i = 0; i < sizeof(lls) / sizeof(lls[0]); i++)
				if (is_key(tok, kl, ll_keys[i]))
					*lls[i] = n;
		}
	}
	if (*src && rc_sockaddr(src, (int)sport, &a->src))
		return EINVAL;
	if (*dst && rc_sockaddr(dst, (int)dport, &a->dst))
		return EINVAL;
	a->has_gids = sg && dg;
	return 0;
}
