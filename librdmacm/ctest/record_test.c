/* The parsers of record.c against records and attr snapshots written as
 * cm/CONTRACT.md specifies them: a 1024-byte event record padded with
 * spaces, unknown keys skipped, bad records refused; an attr with every
 * key; the hex and address helpers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../libibverbs/ctest/check.h"
#include "rdmacm.h"

/* text as the daemon writes it: padded with spaces to 1023, then \n */
static void record(char *buf, const char *text)
{
	size_t n = strlen(text);

	memset(buf, ' ', RC_RECORD_SIZE);
	memcpy(buf, text, n);
	buf[RC_RECORD_SIZE - 1] = '\n';
}

static void test_records(void)
{
	char buf[RC_RECORD_SIZE];
	struct rc_record r;

	record(buf, "event=addr_resolved id=7 status=0");
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0, "addr_resolved");
	CHECK(r.type == RDMA_CM_EVENT_ADDR_RESOLVED && r.id == 7 && r.status == 0, "addr_resolved fields");
	CHECK(r.listen_id == -1 && r.private_data_len == -1 && r.qp_num == -1 && r.responder_resources == -1,
	      "absent keys are -1");

	record(buf, "event=connect_request id=12 status=0 listen_id=3 private_data=0102ff00 "
		    "responder_resources=1 initiator_depth=2 flow_control=1 retry_count=7 rnr_retry_count=6 "
		    "srq=0 qp_num=4660 src_addr=127.0.0.1 dst_addr=::1 src_port=40000 dst_port=7174 future_key=word");
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0, "connect_request");
	CHECK(r.type == RDMA_CM_EVENT_CONNECT_REQUEST && r.id == 12 && r.listen_id == 3, "ids");
	CHECK(r.private_data_len == 4 && r.private_data[0] == 1 && r.private_data[2] == 0xff && r.private_data[3] == 0,
	      "private data %d", r.private_data_len);
	CHECK(r.responder_resources == 1 && r.initiator_depth == 2 && r.flow_control == 1 && r.retry_count == 7 &&
		      r.rnr_retry_count == 6 && r.srq == 0 && r.qp_num == 4660,
	      "conn params");
	CHECK(!strcmp(r.src_addr, "127.0.0.1") && !strcmp(r.dst_addr, "::1") && r.src_port == 40000 &&
		      r.dst_port == 7174,
	      "addresses");

	/* 56 zero-padded bytes, as the kernel delivers a REQ's */
	char text[300] = "event=connect_request id=1 status=0 listen_id=2 private_data=";
	for (int i = 0; i < 56; i++)
		strcat(text, i == 0 ? "2a" : "00");
	record(buf, text);
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0 && r.private_data_len == 56 && r.private_data[0] == 42,
	      "56-byte private data");

	record(buf, "event=rejected id=5 status=28");
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0 && r.type == RDMA_CM_EVENT_REJECTED && r.status == 28,
	      "rejected 28");
	record(buf, "event=unreachable id=5 status=-110");
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0 && r.status == -110, "unreachable -110");
	record(buf, "event=established id=9 status=0 qp_num=77 qkey=19088743");
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0 && r.qp_num == 77 && r.qkey == RDMA_UDP_QKEY,
	      "UD established");

	static const char *const names[] = {"addr_resolved", "addr_error", "route_resolved", "route_error",
					    "connect_request", "connect_response", "connect_error",
					    "unreachable", "rejected", "established", "disconnected",
					    "device_removal", "timewait_exit"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char t[80];
		snprintf(t, sizeof(t), "event=%s id=1 status=0", names[i]);
		record(buf, t);
		CHECK(rc_parse_record(buf, sizeof(buf), &r) == 0, "%s", names[i]);
		CHECK(!strcasecmp(rdma_event_str(r.type) + strlen("RDMA_CM_EVENT_"), names[i]),
		      "%s is %s", names[i], rdma_event_str(r.type));
	}

	static const char *const bad[] = {
		"id=1 status=0",                             /* no event */
		"event=addr_resolved status=0",              /* no id */
		"event=no_such_event id=1 status=0",         /* unknown name */
		"event=addr_resolved id=0 status=0",         /* id 0 */
		"event=addr_resolved id=x status=0",         /* not a number */
		"event=addr_resolved id=1 status=0 garbage", /* not key=value */
		"event=connect_request id=1 private_data=abc", /* odd hex */
		"event=connect_request id=1 private_data=zz",  /* not hex */
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		record(buf, bad[i]);
		CHECK(rc_parse_record(buf, sizeof(buf), &r) == EINVAL, "accepted \"%s\"", bad[i]);
	}
	/* more private data than any message carries */
	char big[RC_RECORD_SIZE] = "event=connect_request id=1 private_data=";
	for (int i = 0; i < RC_MAX_PRIVATE + 1; i++)
		strcat(big, "00");
	record(buf, big);
	CHECK(rc_parse_record(buf, sizeof(buf), &r) == EINVAL, "accepted %d bytes of private data", RC_MAX_PRIVATE + 1);
}

static void test_attr(void)
{
	struct rc_attr a;
	const char *text = "state=route_resolved ps=tcp qp_type=rc channel=2\n"
			   "src_addr=127.0.82.1 src_port=40001 dst_addr=127.0.82.2 dst_port=7174\n"
			   "listen_id=4\n"
			   "sgid=::ffff:127.0.82.1 dgid=::ffff:127.0.82.2 slid=0 dlid=65535 hop_limit=64 "
			   "traffic_class=32 flow_label=0\n"
			   "path_mtu=4096 packet_life_time=18 pkey=0xffff sl=0\n"
			   "tos=32 ack_timeout=14\n"
			   "local_comm_id=100 remote_comm_id=200 service_id=0x0000000001061c06\n"
			   "qp_num=17 psn=1193046 remote_qp_num=18 remote_psn=6636321 remote_qkey=0\n"
			   "responder_resources=4 initiator_depth=3 flow_control=1 retry_count=7\n"
			   "rnr_retry_count=6 srq=0 local_ack_timeout=19\n";

	CHECK(rc_parse_attr(text, &a) == 0, "attr");
	CHECK(!strcmp(a.state, "route_resolved"), "state %s", a.state);
	CHECK(a.src.ss_family == AF_INET && rc_port_of((struct sockaddr *)&a.src) == 40001, "src");
	CHECK(a.dst.ss_family == AF_INET && rc_port_of((struct sockaddr *)&a.dst) == 7174, "dst");
	CHECK(((struct sockaddr_in *)&a.dst)->sin_addr.s_addr == inet_addr("127.0.82.2"), "dst addr");
	CHECK(a.has_gids && a.sgid.raw[10] == 0xff && a.sgid.raw[15] == 1 && a.dgid.raw[15] == 2, "gids");
	CHECK(a.listen_id == 4 && a.dlid == 65535 && a.hop_limit == 64 && a.traffic_class == 32, "path");
	CHECK(a.path_mtu == 4096 && rc_mtu_enum(a.path_mtu) == IBV_MTU_4096 && a.packet_life_time == 18 &&
		      a.pkey == 0xffff,
	      "mtu, pkey");
	CHECK(a.qp_num == 17 && a.psn == 1193046 && a.remote_qp_num == 18 && a.remote_psn == 6636321 &&
		      a.remote_qkey == 0,
	      "qps");
	CHECK(a.responder_resources == 4 && a.initiator_depth == 3 && a.retry_count == 7 && a.rnr_retry_count == 6 &&
		      a.local_ack_timeout == 19 && a.tos == 32,
	      "depths, timeouts");

	CHECK(rc_parse_attr("state=idle ps=udp qp_type=ud channel=1\n", &a) == 0, "idle attr");
	CHECK(a.src.ss_family == AF_UNSPEC && !a.has_gids && a.remote_qp_num == -1 && a.tos == -1, "absent keys");
	CHECK(rc_parse_attr("state=addr_bound src_addr=fe80::1 src_port=5\n", &a) == 0 &&
		      a.src.ss_family == AF_INET6 && rc_port_of((struct sockaddr *)&a.src) == 5,
	      "IPv6 source");
	CHECK(rc_parse_attr("src_addr=not-an-address src_port=1\n", &a) == EINVAL, "a bad address was accepted");
}

static void test_helpers(void)
{
	uint8_t in[5] = {0, 1, 0xab, 0x7f, 0xff}, out[8];
	char hex[11];
	struct sockaddr_storage ss;
	char t[INET6_ADDRSTRLEN];

	rc_hex(in, sizeof(in), hex);
	CHECK(!strcmp(hex, "0001ab7fff"), "hex %s", hex);
	CHECK(rc_unhex(hex, strlen(hex), out, sizeof(out)) == 5 && !memcmp(in, out, 5), "unhex");
	CHECK(rc_unhex("ABcd", 4, out, sizeof(out)) == 2 && out[0] == 0xab && out[1] == 0xcd, "upper-case hex");
	CHECK(rc_unhex("0011", 4, out, 1) == -1, "unhex past max");

	CHECK(rc_sockaddr("10.1.2.3", 80, &ss) == 0 && ss.ss_family == AF_INET, "v4");
	CHECK(rc_addr_text((struct sockaddr *)&ss, t, sizeof(t)) == 0 && !strcmp(t, "10.1.2.3"), "v4 text");
	CHECK(!rc_addr_any((struct sockaddr *)&ss) && rc_sockaddr_len((struct sockaddr *)&ss) == sizeof(struct sockaddr_in),
	      "v4 any, len");
	CHECK(rc_sockaddr("0.0.0.0", 0, &ss) == 0 && rc_addr_any((struct sockaddr *)&ss), "v4 any");
	CHECK(rc_sockaddr("::", 9, &ss) == 0 && rc_addr_any((struct sockaddr *)&ss) &&
		      rc_port_of((struct sockaddr *)&ss) == 9,
	      "v6 any");
	CHECK(rc_sockaddr("1.2.3.4", 65536, &ss) == EINVAL, "port range");
	CHECK(!strcmp(rc_ps_name(RDMA_PS_TCP), "tcp") && !strcmp(rc_ps_name(RDMA_PS_UDP), "udp") &&
		      !strcmp(rc_ps_name(RDMA_PS_IB), "ib") && !strcmp(rc_ps_name(RDMA_PS_IPOIB), "ipoib") &&
		      rc_ps_name((enum rdma_port_space)0x999) == NULL,
	      "port spaces");
	CHECK(rc_event_type("timewait_exit", 13) == RDMA_CM_EVENT_TIMEWAIT_EXIT && rc_event_type("timewait", 8) == -1,
	      "event names");
}

int main(void)
{
	test_records();
	test_attr();
	test_helpers();
	if (failures) {
		fprintf(stderr, "record_test: %d failures\n", failures);
		return 1;
	}
	printf("record_test: ok\n");
	return 0;
}
