/* The checks rsockets apply to what a peer sends (rsocket.h): pure, so
 * that ctest/rsocket_test can feed them anything. */
#include "rsocket.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

int rs_conn_check(const void *pd, int len)
{
	struct rs_wire_conn c;

	if (!pd || len < (int)sizeof(c))
		return EPROTO;
	memcpy(&c, pd, sizeof(c));
	if (c.version != 1)
		return EPROTO;
	if (!be32toh(c.data_buf.length) || !be32toh(c.target_sgl.length) || !be16toh(c.credits))
		return EPROTO;
	return 0;
}

enum rs_rx_verdict rs_rx_classify(const struct rs_rx *rx, uint32_t imm, uint32_t *val)
{
	uint32_t d = rs_imm_data(imm);

	*val = d;
	switch (rs_imm_op(imm)) {
	case RS_OP_DATA:
		/* a write the peer had no room for, or one we cannot queue,
		 * would make us hand out bytes that are not data */
		if (!d || d > rx->granted || d > rx->rbuf_size - rx->queued || rx->rmsg_free <= 0)
			return RS_RX_BAD;
		return RS_RX_DATA;
	case RS_OP_SGL:
		*val = d & 0xffff;
		return RS_RX_CREDITS;
	case RS_OP_IOMAP_SGL:
		if ((d >> 16) || (int)(d & 0xffff) >= rx->iomap_slots)
			return RS_RX_BAD;
		*val = d & 0xffff;
		return RS_RX_IOMAP;
	case RS_OP_CTRL:
		switch (d) {
		case RS_CTRL_DISCONNECT:
			return RS_RX_DISCONNECT;
		case RS_CTRL_SHUTDOWN:
			return RS_RX_SHUTDOWN;
		case RS_CTRL_KEEPALIVE:
			return RS_RX_KEEPALIVE;
		}
		return RS_RX_BAD;
	default: /* reserved, and WRITE which never travels */
		return RS_RX_BAD;
	}
}

