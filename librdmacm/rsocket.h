/* rdmafs's rsockets: the wire format rdma-core's rsockets speaks, and the
 * pieces of rsocket.c that ctest/rsocket_test drives without a device.
 *
 * A stream rsocket is an RC QP. Each side registers a receive buffer
 * (rbuf) cut in two halves and a small "target" array: RS_SGL_SIZE
 * descriptors of the peer's receive buffer halves the peer may write into,
 * then the iomap descriptors. The connection's private data (struct
 * rs_wire_conn, 40 bytes, in both the REQ and the REP) gives the peer the
 * first half and where the target array is. Everything after that is
 * RDMA writes, most with immediate data (op in bits 31..29):
 *   DATA       a write into the current target half; data = its length
 *   SGL        the next free half, written into the peer's target array;
 *              data = the new credit limit (receive sequence number)
 *   IOMAP_SGL  an rs_wire_iomap written into the peer's iomap slot data
 *   CTRL       no payload; data = DISCONNECT, KEEPALIVE or SHUTDOWN
 * A riowrite is a plain RDMA write into a buffer the peer riomap'ed: no
 * immediate, so the receiver never hears of it.
 *
 * Credits: one per data message; the receiver gives up to rq_size ahead of
 * what it has consumed (the SGL message's data), the sender stops at that
 * sequence number. Control messages in flight are bounded by
 * RS_CTRL_SLOTS on the sender.
 *
 * Descriptors travel in the sender's byte order; the connection data's
 * NET flag says whether that order is big-endian, and a receiver of the
 * other order swaps what it is given (and what it writes) itself. The
 * connection data's own numbers are big-endian.
 */
#ifndef RDMAFS_RSOCKET_H
#define RDMAFS_RSOCKET_H

#include <stdbool.h>
#include <stdint.h>

struct rs_wire_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

struct rs_wire_iomap {
	uint64_t offset;
	struct rs_wire_sge sge;
};

struct rs_wire_conn {
	uint8_t version; /* 1 */
	uint8_t flags;   /* RS_CONN_NET, RS_CONN_IOMAP */
	uint16_t credits; /* big-endian */
	uint8_t reserved[3];
	uint8_t iomap_size; /* rs_scale8 of the iomap slot count */
	struct rs_wire_sge target_sgl; /* big-endian; length: a count */
	struct rs_wire_sge data_buf;   /* big-endian */
};

#define RS_CONN_NET (1u << 0)
#define RS_CONN_IOMAP (1u << 1)
#define RS_SGL_SIZE 2

enum { RS_OP_DATA, RS_OP_DATA_MORE, RS_OP_WRITE, RS_OP_DRA_MORE,
       RS_OP_SGL, RS_OP_RSVD, RS_OP_IOMAP_SGL, RS_OP_CTRL };
enum { RS_CTRL_DISCONNECT, RS_CTRL_KEEPALIVE, RS_CTRL_SHUTDOWN };

#define rs_imm(op, data) (((uint32_t)(op) << 29) | ((uint32_t)(data) & 0x1fffffff))
#define rs_imm_op(imm) ((uint32_t)(imm) >> 29)
#define rs_imm_data(imm) ((uint32_t)(imm) & 0x1fffffff)

/* the iomap size's 8-bit encoding in the connection data: values up to
 * 128 as they are, larger ones as a multiple of 256 with the top bit set */
static inline int rs_scale8(int v)
{
	return v <= 128 ? v : 128 | (v >> 8);
}
static inline int rs_unscale8(int v)
{
	return v <= 128 ? v : (v & 127) << 8;
}

/* What a receiver does with one immediate: the checks rsocket.c applies to
 * a peer's messages (pure, so ctest can feed it anything). */
struct rs_rx {
	uint32_t rbuf_size;  /* the whole receive buffer */
	uint32_t queued;     /* bytes received and not yet read */
	uint32_t granted;    /* bytes the peer was given (halves) and not used */
	int iomap_slots;     /* the target iomap's slot count */
	int rmsg_free;       /* room in the message queue */
};

enum rs_rx_verdict {
	RS_RX_DATA,       /* queue len bytes */
	RS_RX_CREDITS,    /* new credit limit in *val */
	RS_RX_IOMAP,      /* slot *val was written */
	RS_RX_DISCONNECT, /* the peer is gone */
	RS_RX_SHUTDOWN,   /* the peer writes no more */
	RS_RX_KEEPALIVE,
	RS_RX_BAD,        /* a protocol violation: the connection is reset */
};

enum rs_rx_verdict rs_rx_classify(const struct rs_rx *rx, uint32_t imm, uint32_t *val);

/* Checks a peer's connection data: 0, or EPROTO (short, wrong version,
 * a zero-length buffer or target array). */
int rs_conn_check(const void *pd, int len);

#endif
