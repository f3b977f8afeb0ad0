/* The ring ABI header compiles together with <infiniband/verbs.h> and says
 * what ring/doc.go says (checked at compile time), and the string and rate
 * helpers answer what libibverbs 44.0 answers: against a table here, and,
 * where the system library is installed, against the system library itself
 * for every value of each enum and then some.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "rdmafs-abi.h"

/* --- The ring header, at compile time ---------------------------------- */

#define IS_POW2(x) ((x) != 0 && ((x) & ((x) - 1)) == 0)

_Static_assert(RDMAFS_HEADER_SIZE == 256, "header is 256 bytes");
_Static_assert(RDMAFS_MAGIC == 0x474E5244, "magic reads DRNG little-endian");
_Static_assert(IS_POW2(RDMAFS_MIN_SLOT_SIZE) && RDMAFS_MIN_SLOT_SIZE >= 64,
	       "slots are powers of two of at least a cache line");
_Static_assert(RDMAFS_OFF_PRODUCER / 64 != RDMAFS_OFF_CONSUMER / 64,
	       "producer and consumer on separate cache lines");
_Static_assert(RDMAFS_OFF_FLAGS / 64 != RDMAFS_OFF_PRODUCER / 64 &&
	       RDMAFS_OFF_FLAGS / 64 != RDMAFS_OFF_CONSUMER / 64,
	       "flags away from both indices");
_Static_assert(RDMAFS_OFF_ARMED + 4 <= RDMAFS_HEADER_SIZE, "header words fit");
_Static_assert(RDMAFS_KIND_SQ != RDMAFS_KIND_CQ && RDMAFS_KIND_DOORBELL == 7, "kinds");
_Static_assert(IS_POW2(RDMAFS_BELL_BITS) && RDMAFS_BELL_BITS == RDMAFS_BELL_SLOTS * RDMAFS_MIN_SLOT_SIZE * 8,
	       "the doorbell's bitmap is its slots, a power of two of bits (rf_ring_bell masks with it)");
_Static_assert(RDMAFS_OFF_BELL_SUMMARY % 16 == 0 && RDMAFS_OFF_BELL_SUMMARY >= RDMAFS_OFF_ARMED + 4 &&
		       RDMAFS_OFF_BELL_SUMMARY + 4 * RDMAFS_BELL_SUMMARY_WORDS <= RDMAFS_HEADER_SIZE &&
		       RDMAFS_BELL_SUMMARY_BITS == 32 * RDMAFS_BELL_SUMMARY_WORDS &&
		       RDMAFS_BELL_SUMMARY_BITS * 32 == RDMAFS_BELL_BITS,
	       "the doorbell's summary: after the header's words, in the header, a bit per bitmap word");
_Static_assert(RDMAFS_ARM_NONE == 0 && RDMAFS_ARM_NEXT != RDMAFS_ARM_SOLICITED, "arm values");

/* The header as a C struct with natural alignment: the offsets need no
 * packing, so the library may use either the macros or a struct. */
struct ring_header {
	uint32_t magic, version, kind, slot_size, slot_count, data_offset;
	uint8_t reserved0[40];
	uint32_t producer;
	uint8_t pad1[60];
	uint32_t consumer;
	uint8_t pad2[60];
	uint32_t flags, event_seq, armed;
	uint8_t reserved1[52];
};
_Static_assert(sizeof(struct ring_header) == RDMAFS_HEADER_SIZE, "header size");
_Static_assert(offsetof(struct ring_header, magic) == RDMAFS_OFF_MAGIC, "magic");
_Static_assert(offsetof(struct ring_header, version) == RDMAFS_OFF_VERSION, "version");
_Static_assert(offsetof(struct ring_header, kind) == RDMAFS_OFF_KIND, "kind");
_Static_assert(offsetof(struct ring_header, slot_size) == RDMAFS_OFF_SLOT_SIZE, "slot_size");
_Static_assert(offsetof(struct ring_header, slot_count) == RDMAFS_OFF_SLOT_COUNT, "slot_count");
_Static_assert(offsetof(struct ring_header, data_offset) == RDMAFS_OFF_DATA_OFFSET, "data_offset");
_Static_assert(offsetof(struct ring_header, producer) == RDMAFS_OFF_PRODUCER, "producer");
_Static_assert(offsetof(struct ring_header, consumer) == RDMAFS_OFF_CONSUMER, "consumer");
_Static_assert(offsetof(struct ring_header, flags) == RDMAFS_OFF_FLAGS, "flags");
_Static_assert(offsetof(struct ring_header, event_seq) == RDMAFS_OFF_EVENT_SEQ, "event_seq");
_Static_assert(offsetof(struct ring_header, armed) == RDMAFS_OFF_ARMED, "armed");

/* An SGE in a slot is laid out exactly as struct ibv_sge, so a WR's SGL can
 * be copied into a slot as it is. */
_Static_assert(sizeof(struct ibv_sge) == RDMAFS_SGE_SIZE, "sge size");
_Static_assert(offsetof(struct ibv_sge, addr) == RDMAFS_SGE_OFF_ADDR, "sge addr");
_Static_assert(offsetof(struct ibv_sge, length) == RDMAFS_SGE_OFF_LENGTH, "sge length");
_Static_assert(offsetof(struct ibv_sge, lkey) == RDMAFS_SGE_OFF_L_KEY, "sge lkey");

struct send_wqe {
	uint64_t wr_id;
	uint32_t send_flags;
	uint8_t opcode, num_sge;
	uint16_t inline_len;
	uint32_t imm, rkey;
	uint64_t remote_addr, compare_add, swap;
	uint32_t ah, remote_qpn, remote_qkey, reserved;
};
_Static_assert(sizeof(struct send_wqe) == RDMAFS_SEND_HEADER_SIZE, "send header");
_Static_assert(offsetof(struct send_wqe, wr_id) == RDMAFS_SEND_OFF_WRID, "wr_id");
_Static_assert(offsetof(struct send_wqe, send_flags) == RDMAFS_SEND_OFF_FLAGS, "send_flags");
_Static_assert(offsetof(struct send_wqe, opcode) == RDMAFS_SEND_OFF_OPCODE, "opcode");
_Static_assert(offsetof(struct send_wqe, num_sge) == RDMAFS_SEND_OFF_NUM_SGE, "num_sge");
_Static_assert(offsetof(struct send_wqe, inline_len) == RDMAFS_SEND_OFF_INLINE_LEN, "inline_len");
_Static_assert(offsetof(struct send_wqe, imm) == RDMAFS_SEND_OFF_IMM, "imm");
_Static_assert(offsetof(struct send_wqe, rkey) == RDMAFS_SEND_OFF_R_KEY, "rkey");
_Static_assert(offsetof(struct send_wqe, remote_addr) == RDMAFS_SEND_OFF_REMOTE_ADDR, "remote_addr");
_Static_assert(offsetof(struct send_wqe, compare_add) == RDMAFS_SEND_OFF_COMPARE_ADD, "compare_add");
_Static_assert(offsetof(struct send_wqe, swap) == RDMAFS_SEND_OFF_SWAP, "swap");
_Static_assert(offsetof(struct send_wqe, ah) == RDMAFS_SEND_OFF_AH, "ah");
_Static_assert(offsetof(struct send_wqe, remote_qpn) == RDMAFS_SEND_OFF_REMOTE_QPN, "remote_qpn");
_Static_assert(offsetof(struct send_wqe, remote_qkey) == RDMAFS_SEND_OFF_REMOTE_Q_KEY, "remote_qkey");
_Static_assert(offsetof(struct send_wqe, reserved) == RDMAFS_SEND_OFF_RESERVED, "reserved");

struct recv_wqe {
	uint64_t wr_id;
	uint32_t num_sge, reserved;
};
_Static_assert(sizeof(struct recv_wqe) == RDMAFS_RECV_HEADER_SIZE, "recv header");
_Static_assert(offsetof(struct recv_wqe, wr_id) == RDMAFS_RECV_OFF_WRID, "recv wr_id");
_Static_assert(offsetof(struct recv_wqe, num_sge) == RDMAFS_RECV_OFF_NUM_SGE, "recv num_sge");
_Static_assert(offsetof(struct recv_wqe, reserved) == RDMAFS_RECV_OFF_RESERVED, "recv reserved");

struct cqe {
	uint64_t wr_id;
	uint8_t status, opcode;
	uint16_t wc_flags;
	uint32_t vendor_err, byte_len, imm, qp_num, src_qp;
	uint16_t pkey_index, slid;
	uint8_t sl, dlid_path_bits;
	uint8_t reserved[2];
	uint64_t completion_ts, completion_wallclock_ns;
	uint8_t reserved2[8];
};
_Static_assert(sizeof(struct cqe) == RDMAFS_CQE_SIZE, "cqe size");
_Static_assert(RDMAFS_CQE_SIZE == RDMAFS_MIN_SLOT_SIZE, "a CQE fills a minimal slot");
_Static_assert(offsetof(struct cqe, wr_id) == RDMAFS_CQE_OFF_WRID, "cqe wr_id");
_Static_assert(offsetof(struct cqe, status) == RDMAFS_CQE_OFF_STATUS, "cqe status");
_Static_assert(offsetof(struct cqe, opcode) == RDMAFS_CQE_OFF_OPCODE, "cqe opcode");
_Static_assert(offsetof(struct cqe, wc_flags) == RDMAFS_CQE_OFF_WC_FLAGS, "cqe wc_flags");
_Static_assert(offsetof(struct cqe, vendor_err) == RDMAFS_CQE_OFF_VENDOR_ERR, "cqe vendor_err");
_Static_assert(offsetof(struct cqe, byte_len) == RDMAFS_CQE_OFF_BYTE_LEN, "cqe byte_len");
_Static_assert(offsetof(struct cqe, imm) == RDMAFS_CQE_OFF_IMM, "cqe imm");
_Static_assert(offsetof(struct cqe, qp_num) == RDMAFS_CQE_OFF_QP_NUM, "cqe qp_num");
_Static_assert(offsetof(struct cqe, src_qp) == RDMAFS_CQE_OFF_SRC_QP, "cqe src_qp");
_Static_assert(offsetof(struct cqe, pkey_index) == RDMAFS_CQE_OFF_P_KEY_INDEX, "cqe pkey_index");
_Static_assert(offsetof(struct cqe, slid) == RDMAFS_CQE_OFF_SLID, "cqe slid");
_Static_assert(offsetof(struct cqe, sl) == RDMAFS_CQE_OFF_SL, "cqe sl");
_Static_assert(offsetof(struct cqe, dlid_path_bits) == RDMAFS_CQE_OFF_DLID_PATH_BITS, "cqe dlid_path_bits");
_Static_assert(offsetof(struct cqe, reserved) == RDMAFS_CQE_OFF_RESERVED, "cqe reserved");
_Static_assert(offsetof(struct cqe, completion_ts) == RDMAFS_CQE_OFF_COMPLETION_TS, "cqe completion_ts");
_Static_assert(offsetof(struct cqe, completion_wallclock_ns) == RDMAFS_CQE_OFF_COMPLETION_WALLCLOCK,
	       "cqe completion_wallclock_ns");
_Static_assert(offsetof(struct cqe, reserved2) == RDMAFS_CQE_OFF_RESERVED2, "cqe reserved2");

/* The slot fields hold the verbs.h values they are documented to hold. */
_Static_assert(IBV_SEND_FENCE == 1 && IBV_SEND_SIGNALED == 2 &&
	       IBV_SEND_SOLICITED == 4 && IBV_SEND_INLINE == 8,
	       "send_flags bits as ring/doc.go lists them");
_Static_assert(RDMAFS_MAX_SEND_SGE == UINT8_MAX, "num_sge is a u8");
_Static_assert(RDMAFS_MAX_INLINE_LEN == UINT16_MAX, "inline_len is a u16");
_Static_assert(IBV_WR_DRIVER1 <= UINT8_MAX && IBV_WC_TM_RNDV_INCOMPLETE <= UINT8_MAX &&
	       IBV_WC_DRIVER3 <= UINT8_MAX, "opcodes and statuses fit a u8");
_Static_assert(IBV_WC_TM_DATA_VALID <= UINT16_MAX, "wc_flags fit a u16");

/* --- The helpers, at run time -------------------------------------------- */

static void check_str(const char *what, int v, const char *got, const char *want)
{
	CHECK(got && strcmp(got, want) == 0, "%s(%d) = \"%s\", want \"%s\"", what, v,
	      got ? got : "(null)", want);
}

static void check_tables(void)
{
	static const char *const wc[] = {
		"success", "local length error", "local QP operation error",
		"local EE context operation error", "local protection error",
		"Work Request Flushed Error", "memory management operation error",
		"bad response error", "local access error",
		"remote invalid request error", "remote access error",
		"remote operation error", "transport retry counter exceeded",
		"RNR retry counter exceeded", "local RDD violation error",
		"remote invalid RD request", "aborted error",
		"invalid EE context number", "invalid EE context state",
		"fatal error", "response timeout error", "general error",
		"TM error", "TM software rendezvous",
	};
	static const char *const ev[] = {
		"CQ error", "local work queue catastrophic error",
		"invalid request local work queue error",
		"local access violation work queue error",
		"communication established", "send queue drained",
		"path migrated", "path migration request error",
		"local catastrophic error", "port active", "port error",
		"LID change", "P_Key change", "SM change",
		"SRQ catastrophic error", "SRQ limit reached",
		"last WQE reached", "client reregistration",
		"GID table change", "WQ fatal",
	};
	static const char *const node[] = {
		"unknown", "InfiniBand channel adapter", "InfiniBand switch",
		"InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP",
		"unspecified",
	};
	static const char *const port[] = {
		"no state change (NOP)", "down", "init", "armed", "active",
		"active defer",
	};
	int n;

	n = sizeof(wc) / sizeof(wc[0]);
	CHECK(n == IBV_WC_TM_RNDV_INCOMPLETE + 1, "wc table has %d entries", n);
	for (int i = 0; i < n; i++)
		check_str("ibv_wc_status_str", i, ibv_wc_status_str(i), wc[i]);
	check_str("ibv_wc_status_str", n, ibv_wc_status_str(n), "unknown");
	check_str("ibv_wc_status_str", -1, ibv_wc_status_str(-1), "unknown");

	n = sizeof(ev) / sizeof(ev[0]);
	CHECK(n == IBV_EVENT_WQ_FATAL + 1, "event table has %d entries", n);
	for (int i = 0; i < n; i++)
		check_str("ibv_event_type_str", i, ibv_event_type_str(i), ev[i]);
	check_str("ibv_event_type_str", n, ibv_event_type_str(n), "unknown");

	n = sizeof(node) / sizeof(node[0]);
	for (int i = 0; i < n; i++)
		check_str("ibv_node_type_str", i, ibv_node_type_str(i), node[i]);
	check_str("ibv_node_type_str", -1, ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");
	check_str("ibv_node_type_str", n, ibv_node_type_str(n), "unknown");

	n = sizeof(port) / sizeof(port[0]);
	for (int i = 0; i < n; i++)
		check_str("ibv_port_state_str", i, ibv_port_state_str(i), port[i]);
	check_str("ibv_port_state_str", n, ibv_port_state_str(n), "unknown");

	CHECK(ibv_rate_to_mult(IBV_RATE_2_5_GBPS) == 1, "2.5 Gb/s is 1x");
	CHECK(ibv_rate_to_mult(IBV_RATE_120_GBPS) == 48, "120 Gb/s is 48x");
	CHECK(ibv_rate_to_mult(IBV_RATE_56_GBPS) == -1, "56 Gb/s is no multiple");
	CHECK(ibv_rate_to_mult(IBV_RATE_MAX) == -1, "IBV_RATE_MAX has no multiple");
	CHECK(mult_to_ibv_rate(11) == IBV_RATE_28_GBPS, "11x is 28 Gb/s");
	CHECK(mult_to_ibv_rate(3) == IBV_RATE_MAX, "3x is no rate");
	CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125, "100 Gb/s in Mb/s");
	CHECK(ibv_rate_to_mbps(IBV_RATE_MAX) == -1, "IBV_RATE_MAX in Mb/s");
	CHECK(mbps_to_ibv_rate(14062) == IBV_RATE_14_GBPS, "14062 Mb/s");
	CHECK(mbps_to_ibv_rate(0) == IBV_RATE_MAX, "0 Mb/s");
}

/* Every helper against the system's libibverbs, loaded a second time under
 * its own path: its own copies of the functions answer. */
static void check_against_system(void)
{
	const char *path = RDMAFS_SYSTEM_LIB;
	void *sys;

	if (!*path) {
		if (getenv("CI") && strcmp(getenv("CI"), "true") == 0) {
			CHECK(0, "no system libibverbs to compare with (CI must have libibverbs1)");
			return;
		}
		printf("no system libibverbs: comparison skipped\n");
		return;
	}
	sys = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CHECK(sys, "dlopen %s: %s", path, dlerror());
	if (!sys)
		return;

	/* theirs has the type of ours: no call through a mismatched pointer. */
#define COMPARE(fn, lo, hi, eq, fmt, show)                                     \
	do {                                                                  \
		__typeof__(&fn) theirs = (__typeof__(&fn))dlsym(sys, #fn);     \
		CHECK(theirs && theirs != fn, #fn " in %s", path);             \
		for (long v = (lo); theirs && theirs != fn && v <= (hi); v++) { \
			__typeof__(fn(0)) a = fn(v), b = theirs(v);            \
			CHECK(eq(a, b), #fn "(%ld) = " fmt ", system " fmt, v,  \
			      show(a), show(b));                               \
		}                                                             \
	} while (0)
#define STREQ(a, b) ((a) && (b) && strcmp((a), (b)) == 0)
#define INTEQ(a, b) ((a) == (b))
#define SHOWSTR(x) ((x) ? (x) : "(null)")
#define SHOWINT(x) ((int)(x))
	COMPARE(ibv_wc_status_str, -3, 63, STREQ, "\"%s\"", SHOWSTR);
	COMPARE(ibv_event_type_str, -3, 63, STREQ, "\"%s\"", SHOWSTR);
	COMPARE(ibv_node_type_str, -3, 63, STREQ, "\"%s\"", SHOWSTR);
	COMPARE(ibv_port_state_str, -3, 63, STREQ, "\"%s\"", SHOWSTR);
	COMPARE(ibv_rate_to_mult, -2, 40, INTEQ, "%d", SHOWINT);
	COMPARE(ibv_rate_to_mbps, -2, 40, INTEQ, "%d", SHOWINT);
	COMPARE(mult_to_ibv_rate, -2, 1000, INTEQ, "%d", SHOWINT);
	COMPARE(mbps_to_ibv_rate, -2, 1300000, INTEQ, "%d", SHOWINT);
	dlclose(sys);
}

/* The library this test runs against is the one just built. */
static void check_loaded(void)
{
	Dl_info info;
	char *got, *want;

	CHECK(dladdr((void *)ibv_wc_status_str, &info) && info.dli_fname,
	      "dladdr(ibv_wc_status_str)");
	got = realpath(info.dli_fname, NULL);
	want = realpath(RDMAFS_TEST_LIB, NULL);
	CHECK(got && want && strcmp(got, want) == 0, "running against %s, not %s",
	      got ? got : info.dli_fname, RDMAFS_TEST_LIB);
	free(got);
	free(want);
}

int main(void)
{
	check_loaded();
	check_tables();
	check_against_system();
	if (failures) {
		fprintf(stderr, "abi_test: %d failures\n", failures);
		return 1;
	}
	printf("abi_test: ok\n");
	return 0;
}
