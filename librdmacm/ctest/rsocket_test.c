/* The checks of rsocket_wire.c against what a peer can send: a fuzz of
 * immediate data over random receiver states (every verdict must keep the
 * receiver's invariants: data fits the room given and the queue, iomap
 * slots exist, control words are known, reserved opcodes are refused),
 * the fixed cases a peer speaking rdma-core's rsockets sends, random and
 * broken connection data, and the iomap size encoding.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libibverbs/ctest/check.h"
#include "rsocket.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

static void test_fuzz_imm(void)
{
	int counts[RS_RX_BAD + 1] = { 0 };

	for (int i = 0; i < 2000000; i++) {
		struct rs_rx rx;
		rx.rbuf_size = 4096u << (next32() % 10);
		rx.queued = next32() % (rx.rbuf_size + 1);
		rx.granted = next32() % (rx.rbuf_size + 1);
		rx.iomap_slots = (int)(next32() % 3 ? 0 : next32() % 300);
		rx.rmsg_free = (int)(next32() % 4);
		/* small data lengths often, so that DATA is not always refused */
		uint32_t imm = next32();
		if (i % 3 == 0)
			imm = rs_imm(rs_imm_op(imm), next32() % 70000);
		uint32_t val = 0xdeadbeef;
		enum rs_rx_verdict v = rs_rx_classify(&rx, imm, &val);
		counts[v]++;
		uint32_t op = rs_imm_op(imm), d = rs_imm_data(imm);
		switch (v) {
		case RS_RX_DATA:
			CHECK(op == RS_OP_DATA && val == d && val > 0 && val <= rx.granted &&
				      val <= rx.rbuf_size - rx.queued && rx.rmsg_free > 0,
			      "data %u accepted (granted %u, queued %u of %u, room %d)", val, rx.granted, rx.queued,
			      rx.rbuf_size, rx.rmsg_free);
			break;
		case RS_RX_CREDITS:
			CHECK(op == RS_OP_SGL && val == (d & 0xffff), "credits %u from %#x", val, imm);
			break;
		case RS_RX_IOMAP:
			CHECK(op == RS_OP_IOMAP_SGL && (int)val < rx.iomap_slots && !(d >> 16), "iomap %u of %d", val,
			      rx.iomap_slots);
			break;
		case RS_RX_DISCONNECT:
			CHECK(op == RS_OP_CTRL && d == RS_CTRL_DISCONNECT, "disconnect from %#x", imm);
			break;
		case RS_RX_SHUTDOWN:
			CHECK(op == RS_OP_CTRL && d == RS_CTRL_SHUTDOWN, "shutdown from %#x", imm);
			break;
		case RS_RX_KEEPALIVE:
			CHECK(op == RS_OP_CTRL && d == RS_CTRL_KEEPALIVE, "keepalive from %#x", imm);
			break;
		case RS_RX_BAD:
			CHECK(op != RS_OP_SGL, "credits refused: %#x", imm);
			break;
		}
		if (op == RS_OP_DATA_MORE || op == RS_OP_WRITE || op == RS_OP_DRA_MORE || op == RS_OP_RSVD)
			CHECK(v == RS_RX_BAD, "reserved opcode %u accepted", op);
	}
	CHECK(counts[RS_RX_DATA] > 1000 && counts[RS_RX_BAD] > 1000 && counts[RS_RX_CREDITS] > 1000,
	      "the fuzz reached too few verdicts: data %d bad %d credits %d", counts[RS_RX_DATA], counts[RS_RX_BAD],
	      counts[RS_RX_CREDITS]);
}

static void test_fixed(void)
{
	struct rs_rx rx = { .rbuf_size = 1 << 17, .queued = 0, .granted = 1 << 16, .iomap_slots = 2,
			    .rmsg_free = 384 };
	uint32_t v;

	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_DATA, 2048), &v) == RS_RX_DATA && v == 2048, "2 KiB of data");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_DATA, 1 << 16), &v) == RS_RX_DATA, "the whole half");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_DATA, (1 << 16) + 1), &v) == RS_RX_BAD, "past the half");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_SGL, 384 + 7), &v) == RS_RX_CREDITS && v == 391, "credits");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_SGL, 0x12345), &v) == RS_RX_CREDITS && v == 0x2345,
	      "credits wrap at 16 bits");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_IOMAP_SGL, 1), &v) == RS_RX_IOMAP && v == 1, "iomap 1 of 2");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_IOMAP_SGL, 2), &v) == RS_RX_BAD, "iomap 2 of 2");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_CTRL, RS_CTRL_DISCONNECT), &v) == RS_RX_DISCONNECT, "disconnect");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_CTRL, RS_CTRL_SHUTDOWN), &v) == RS_RX_SHUTDOWN, "shutdown");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_CTRL, RS_CTRL_KEEPALIVE), &v) == RS_RX_KEEPALIVE, "keepalive");
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_CTRL, 3), &v) == RS_RX_BAD, "control word 3");
	rx.rmsg_free = 0;
	CHECK(rs_rx_classify(&rx, rs_imm(RS_OP_DATA, 1), &v) == RS_RX_BAD, "data with a full queue");
	/* the encoding rdma-core's peers put on the wire */
	CHECK(rs_imm(RS_OP_CTRL, RS_CTRL_DISCONNECT) == 0xe0000000u, "the disconnect word");
	CHECK(rs_imm(RS_OP_SGL, 5) == 0x80000005u, "an SGL word");
	CHECK(rs_imm(RS_OP_IOMAP_SGL, 1) == 0xc0000001u, "an iomap word");
	CHECK(sizeof(struct rs_wire_conn) == 40 && sizeof(struct rs_wire_sge) == 16 &&
		      sizeof(struct rs_wire_iomap) == 24,
	      "wire sizes %zu %zu %zu", sizeof(struct rs_wire_conn), sizeof(struct rs_wire_sge),
	      sizeof(struct rs_wire_iomap));
}

static void test_conn(void)
{
	struct rs_wire_conn c = { 0 };
	uint8_t junk[64];
	int accepted = 0;

	c.version = 1;
	c.credits = htobe16(384);
	c.target_sgl.length = htobe32(2);
	c.data_buf.length = htobe32(65536);
	CHECK(rs_conn_check(&c, sizeof(c)) == 0, "good connection data");
	CHECK(rs_conn_check(&c, sizeof(c) - 1) == EPROTO, "39 bytes");
	CHECK(rs_conn_check(NULL, 0) == EPROTO, "none");
	c.version = 2;
	CHECK(rs_conn_check(&c, sizeof(c)) == EPROTO, "version 2");
	c.version = 1;
	c.credits = 0;
	CHECK(rs_conn_check(&c, sizeof(c)) == EPROTO, "no credits");
	c.credits = htobe16(1);
	c.data_buf.length = 0;
	CHECK(rs_conn_check(&c, sizeof(c)) == EPROTO, "an empty buffer");
	for (int i = 0; i < 200000; i++) {
		for (size_t k = 0; k < sizeof(junk); k++)
			junk[k] = (uint8_t)next32();
		if (i % 2)
			junk[0] = 1;
		int len = (int)(next32() % sizeof(junk));
		if (rs_conn_check(junk, len) == 0) {
			accepted++;
			struct rs_wire_conn j;
			memcpy(&j, junk, sizeof(j));
			CHECK(len >= 40 && j.version == 1 && j.credits && j.data_buf.length && j.target_sgl.length,
			      "junk accepted");
		}
	}
	CHECK(accepted > 0, "no junk ever passes: the fuzz is not reaching the checks");
}

static void test_scale(void)
{
	for (int v = 0; v <= 128; v++)
		CHECK(rs_unscale8(rs_scale8(v)) == v, "scale %d", v);
	CHECK(rs_scale8(256) == 129 && rs_unscale8(129) == 256, "256");
	CHECK(rs_unscale8(rs_scale8(0x7f00)) == 0x7f00, "0x7f00");
	CHECK(rs_scale8(0x7f00) <= 255, "fits 8 bits");
}

int main(void)
{
	test_fuzz_imm();
	test_fixed();
	test_conn();
	test_scale();
	if (failures) {
		fprintf(stderr, "rsocket_test: %d failures\n", failures);
		return 1;
	}
	printf("rsocket_test: ok\n");
	return 0;
}
