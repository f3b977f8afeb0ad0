/* Devices: one per rdmafs mount of the machine, found in
 * /proc/self/mountinfo (file system type fuse.rdmafs), named rdmafs0,
 * rdmafs1, ... in mount order. RDMAFS_DEVICE_MOUNT=PATH[:PATH...] limits
 * the list to those mounts (rdmafs exec --mount sets it).
 *
 * The device model (DESIGN.md §6): a mount without a network address is an
 * InfiniBand port with a LID, so every tool runs with default flags and
 * addresses its own device by LID; a mount with --addr is a RoCEv2 port on
 * Ethernet whose GID is ::ffff:IPv4, as Soft-RoCE presents it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rdmafs.h"

#define RF_MAX_DEVICES 64
#define RF_GID_TABLE 16

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rf_device *devices[RF_MAX_DEVICES];
static int ndevices;

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] && s[3]) {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

static void copy_str(char *dst, size_t n, const char *src)
{
	size_t l = strnlen(src, n - 1);

	memcpy(dst, src, l);
	dst[l] = 0;
}

static bool selected(const char *mount)
{
	const char *sel = getenv("RDMAFS_DEVICE_MOUNT");
	char want[PATH_MAX], real[PATH_MAX];

	if (!sel || !*sel)
		return true;
	while (*sel) {
		size_t n = strcspn(sel, ":");
		if (n && n < sizeof(want)) {
			memcpy(want, sel, n);
			want[n] = 0;
			if (!strcmp(want, mount) || (realpath(want, real) && !strcmp(real, mount)))
				return true;
		}
		sel += n;
		if (*sel == ':')
			sel++;
	}
	return false;
}

static uint64_t parse_guid(const char *devtext)
{
	uint64_t g = 0;

	rf_kv_u64(devtext, RDMAFS_KEY_NODE_GUID, &g);
	return htobe64(g);
}

/* Rescans the mounts; devices already known keep their objects (a program
 * may hold a device of an earlier list). */
static void scan(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		/* id parent maj:min root mountpoint opts... - fstype source superopts */
		char *sep = strstr(line, " - ");
		char *fields[6];
		int n = 0;
		char *save, *tok;

		if (!sep)
			continue;
		if (strncmp(sep + 3, "fuse.rdmafs ", 12) != 0)
			continue;
		*sep = 0;
		for (tok = strtok_r(line, " ", &save); tok && n < 6; tok = strtok_r(NULL, " ", &save))
			fields[n++] = tok;
		/* a bind of a subtree of a mount (rdmafs exec binds MOUNT/sys/
		 * infiniband at /sys/class/infiniband/DEV) is not a device */
		if (n < 5 || strcmp(fields[3], "/") != 0)
			continue;
		char *mnt = fields[4];
		unescape(mnt);
		if (!selected(mnt))
			continue;
		int known = 0;
		for (int i = 0; i < ndevices; i++)
			if (!strcmp(devices[i]->mount, mnt))
				known = 1;
		if (known || ndevices == RF_MAX_DEVICES)
			continue;

		char p[PATH_MAX + 16], text[4096];
		snprintf(p, sizeof(p), "%s/device", mnt);
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* a dead daemon's mount, or not ours to see */
		ssize_t r = read(fd, text, sizeof(text) - 1);
		close(fd);
		if (r <= 0)
			continue;
		text[r] = 0;

		struct rf_device *d = calloc(1, sizeof(*d));
		if (!d)
			break;
		d->index = ndevices;
		snprintf(d->mount, sizeof(d->mount), "%s", mnt);
		d->guid = parse_guid(text);
		d->dev.node_type = IBV_NODE_CA;
		d->dev.transport_type = IBV_TRANSPORT_IB;
		snprintf(d->dev.name, sizeof(d->dev.name), "rdmafs%d", d->index);
		/* dev_name is the uverbs character device's name under
		 * /dev/infiniband, which a kernel device has and ours does not
		 * (nothing is opened there: the mount is the device). UCX
		 * lists only devices for which "/dev/infiniband/" + dev_name
		 * is a character device it may read and write
		 * (uct_ib_device_is_accessible): for ours that resolves to
		 * /dev/null wherever /dev/infiniband exists, and a device is
		 * listed here only if its mount could be read. */
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "../null");
		/* under rdmafs exec's view (internal/execview) the device has
		 * the kernel's names: /dev/infiniband/uverbsN (a character
		 * device) and /sys/class/infiniband_verbs/uverbsN */
		char uv[64];
		snprintf(uv, sizeof(uv), "/dev/infiniband/uverbs%d", d->index);
		if (access(uv, R_OK | W_OK) == 0) {
			snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", d->index);
			snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d",
				 d->index);
		}
		/* the mount is the device's "sysfs" directory (longer paths are
		 * cut: the fields are 256 bytes) */
		if (strncmp(d->dev.dev_name, "uverbs", 6) != 0)
			copy_str(d->dev.dev_path, sizeof(d->dev.dev_path), d->mount);
		copy_str(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), d->mount);
		devices[ndevices++] = d;
	}
	fclose(f);
}

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **list;
	int n = 0;

	pthread_mutex_lock(&list_lock);
	scan();
	list = calloc(ndevices + 1, sizeof(*list));
	if (list) {
		for (int i = 0; i < ndevices; i++) {
			struct stat st;
			char p[PATH_MAX + 16];
			/* a device whose mount went away is not listed again */
			snprintf(p, sizeof(p), "%s/device", devices[i]->mount);
			if (stat(p, &st) == 0 && selected(devices[i]->mount))
				list[n++] = &devices[i]->dev;
		}
	}
	pthread_mutex_unlock(&list_lock);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (num)
		*num = n;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return rf_container_of(device, struct rf_device, dev)->index;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return rf_container_of(device, struct rf_device, dev)->guid;
}

int rf_parse_gid(const char *s, union ibv_gid *gid)
{
	char buf[64];
	size_t n = strcspn(s, " \n\t");

	if (n >= sizeof(buf))
		return EINVAL;
	memcpy(buf, s, n);
	buf[n] = 0;
	if (inet_pton(AF_INET6, buf, gid->raw) != 1)
		return EINVAL;
	return 0;
}

static enum ibv_mtu mtu_enum(uint64_t bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	default: return IBV_MTU_4096;
	}
}

static uint64_t kv(const char *text, const char *key)
{
	uint64_t v = 0;

	rf_kv_u64(text, key, &v);
	return v;
}

static int load_attrs(struct rf_context *ctx)
{
	char text[4096];
	struct ibv_device_attr *a = &ctx->attr;
	const char *s;
	int err;

	if ((err = rf_read_file(ctx, "device", text, sizeof(text))))
		return err;
	memset(a, 0, sizeof(*a));
	s = rf_kv(text, RDMAFS_KEY_FW_VER);
	if (s) {
		size_t n = strcspn(s, "\n");
		if (n >= sizeof(a->fw_ver))
			n = sizeof(a->fw_ver) - 1;
		memcpy(a->fw_ver, s, n);
	}
	a->node_guid = htobe64(kv(text, RDMAFS_KEY_NODE_GUID));
	a->sys_image_guid = htobe64(kv(text, RDMAFS_KEY_SYS_IMAGE_GUID));
	a->max_mr_size = kv(text, RDMAFS_KEY_MAX_MR_SIZE);
	a->page_size_cap = kv(text, RDMAFS_KEY_PAGE_SIZE_CAP);
	a->vendor_id = kv(text, RDMAFS_KEY_VENDOR_ID);
	a->vendor_part_id = kv(text, RDMAFS_KEY_VENDOR_PART_ID);
	a->hw_ver = kv(text, RDMAFS_KEY_HW_VER);
	a->max_qp = kv(text, RDMAFS_KEY_MAX_QP);
	a->max_qp_wr = kv(text, RDMAFS_KEY_MAX_QP_WR);
	/* SRQ_RESIZE among them: ibv_modify_srq with IBV_SRQ_MAX_WR moves
	 * the SRQ to a new ring (srq.c). */
	a->device_cap_flags = kv(text, RDMAFS_KEY_DEVICE_CAP_FLAGS);
	/* The bits past 31 are the kernel's IB_UVERBS_DEVICE_* (ATOMIC_WRITE
	 * is 1 << 40), which libibverbs passes through as they are. */
	ctx->cap_flags_ex = kv(text, RDMAFS_KEY_DEVICE_CAP_FLAGS_EX) | a->device_cap_flags;
	/* The device clock of completion timestamps and of
	 * ibv_query_rt_values_ex, in kHz. */
	ctx->hca_core_clock = kv(text, RDMAFS_KEY_HCA_CORE_CLOCK);
	ctx->ts_mask = kv(text, RDMAFS_KEY_COMPLETION_TIMESTAMP_MASK);
	a->max_sge = kv(text, RDMAFS_KEY_MAX_SGE);
	a->max_sge_rd = kv(text, RDMAFS_KEY_MAX_SGE_RD);
	a->max_cq = kv(text, RDMAFS_KEY_MAX_CQ);
	a->max_cqe = kv(text, RDMAFS_KEY_MAX_CQE);
	a->max_mr = kv(text, RDMAFS_KEY_MAX_MR);
	a->max_pd = kv(text, RDMAFS_KEY_MAX_PD);
	a->max_qp_rd_atom = kv(text, RDMAFS_KEY_MAX_QP_RD_ATOM);
	a->max_ee_rd_atom = 0;
	a->max_res_rd_atom = kv(text, RDMAFS_KEY_MAX_RES_RD_ATOM);
	a->max_qp_init_rd_atom = kv(text, RDMAFS_KEY_MAX_QP_INIT_RD_ATOM);
	a->max_ee_init_rd_atom = 0;
	s = rf_kv(text, RDMAFS_KEY_ATOMIC_CAP);
	a->atomic_cap = s && !strncmp(s, "hca", 3) && s[3] != '_' ? IBV_ATOMIC_HCA :
			s && !strncmp(s, "glob", 4) ? IBV_ATOMIC_GLOB : IBV_ATOMIC_NONE;
	a->max_mw = kv(text, RDMAFS_KEY_MAX_MW);
	a->max_ah = kv(text, RDMAFS_KEY_MAX_AH);
	a->max_srq = kv(text, RDMAFS_KEY_MAX_SRQ);
	a->max_srq_wr = kv(text, RDMAFS_KEY_MAX_SRQ_WR);
	a->max_srq_sge = kv(text, RDMAFS_KEY_MAX_SRQ_SGE);
	a->max_pkeys = kv(text, RDMAFS_KEY_MAX_PKEYS);
	a->local_ca_ack_delay = kv(text, RDMAFS_KEY_LOCAL_CA_ACK_DELAY);
	a->phys_port_cnt = kv(text, RDMAFS_KEY_PHYS_PORT_CNT);
	a->max_mcast_grp = kv(text, RDMAFS_KEY_MAX_MCAST_GRP);
	a->max_mcast_qp_attach = kv(text, RDMAFS_KEY_MAX_MCAST_QP_ATTACH);
	a->max_total_mcast_qp_attach = kv(text, RDMAFS_KEY_MAX_TOTAL_MCAST_QP_ATTACH);
	ctx->max_inline = kv(text, RDMAFS_KEY_MAX_INLINE_DATA);

	if ((err = rf_read_file(ctx, "port", text, sizeof(text))))
		return err;
	struct rf_port *p = &ctx->port;
	memset(p, 0, sizeof(*p));
	s = rf_kv(text, RDMAFS_KEY_STATE);
	p->state = s && !strncmp(s, "ACTIVE", 6) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	p->max_mtu = mtu_enum(kv(text, RDMAFS_KEY_MAX_MTU));
	p->active_mtu = mtu_enum(kv(text, RDMAFS_KEY_ACTIVE_MTU));
	p->max_msg_sz = kv(text, RDMAFS_KEY_MAX_MSG_SZ);
	s = rf_kv(text, RDMAFS_KEY_GID);
	if (!s || rf_parse_gid(s, &p->gid))
		memset(&p->gid, 0, sizeof(p->gid));
	/* On the wire the GID is IPv4-mapped (::ffff:a.b.c.d). */
	static const uint8_t v4pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	p->roce = !memcmp(p->gid.raw, v4pre, 12);
	if (p->roce) {
		p->link_layer = IBV_LINK_LAYER_ETHERNET;
		p->lid = 0;
	} else {
		p->link_layer = IBV_LINK_LAYER_INFINIBAND;
		/* A unicast LID (1..0xbfff) from the GUID, stable per mount. */
		uint64_t g = be64toh(ctx->attr.node_guid);
		p->lid = 1 + (uint16_t)((g ^ (g >> 16) ^ (g >> 32)) % 0xbffe);
	}
	return 0;
}

static int rf_query_device(struct ibv_context *c, struct ibv_device_attr *attr)
{
	*attr = to_rctx(c)->attr;
	return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	return rf_query_device(context, device_attr);
}

int rf_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;

	if (in && in->comp_mask)
		return EINVAL;
	if (len < sizeof(struct ibv_device_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	a.orig_attr = to_rctx(c)->attr;
	a.comp_mask = 0;
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	a.max_dm_size = RF_MAX_DM_SIZE;
	a.device_cap_flags_ex = to_rctx(c)->cap_flags_ex;
	a.hca_core_clock = to_rctx(c)->hca_core_clock;
	a.completion_timestamp_mask = to_rctx(c)->ts_mask;
	/* On-demand paging: the daemon reaches an ODP MR through the
	 * program's address space (mr.c), for every operation of every
	 * transport, and the implicit MR over all of it. */
	a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	a.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
						    IBV_ODP_SUPPORT_SRQ_RECV;
	a.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
						    IBV_ODP_SUPPORT_SRQ_RECV;
	a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	/* XRC: RC's operations, receives only into XRC SRQs */
	a.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
			 IBV_ODP_SUPPORT_SRQ_RECV;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* ibv_query_rt_values_ex: the device clock now, from MOUNT/clock. As
 * mlx5 reports it, the raw ticks (hca_core_clock kHz) are in tv_nsec and
 * tv_sec is 0. */
static int rf_query_rt_values(struct ibv_context *c, struct ibv_values_ex *values)
{
	char text[256];
	uint64_t raw = 0;
	int err;

	if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	if (!(values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
		return 0;
	if ((err = rf_read_file(to_rctx(c), "clock", text, sizeof(text))))
		return err;
	if (rf_kv_u64(text, RDMAFS_KEY_RAW_CLOCK, &raw)) {
		rf_log("query_rt_values: the daemon's clock file has no raw_clock: %s", text);
		return EIO;
	}
	values->raw_clock.tv_sec = 0;
	values->raw_clock.tv_nsec = raw;
	values->comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
	return 0;
}

int rf_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct rf_context *ctx = to_rctx(c);
	struct ibv_port_attr a;

	if (port != 1)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	a.state = ctx->port.state;
	a.max_mtu = ctx->port.max_mtu;
	a.active_mtu = ctx->port.active_mtu;
	a.gid_tbl_len = RF_GID_TABLE;
	a.port_cap_flags = IBV_PORT_CM_SUP;
	if (ctx->port.roce)
		a.port_cap_flags |= IBV_PORT_IP_BASED_GIDS;
	a.max_msg_sz = ctx->port.max_msg_sz ? ctx->port.max_msg_sz : 1u << 31;
	a.pkey_tbl_len = 1;
	a.lid = ctx->port.lid;
	a.sm_lid = ctx->port.roce ? 0 : ctx->port.lid;
	a.lmc = 0;
	a.max_vl_num = 1;
	a.sm_sl = 0;
	a.subnet_timeout = ctx->port.roce ? 0 : 18;
	a.active_width = 2;  /* 4X */
	a.active_speed = 32; /* EDR */
	a.phys_state = ctx->port.state == IBV_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
	a.link_layer = ctx->port.link_layer;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The exported symbol takes the short, older port struct (verbs.h
 * routes new programs through verbs_context.query_port instead). */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	return rf_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
			     offsetof(struct ibv_port_attr, flags));
}

/* The GID table has RF_GID_TABLE entries of which only the first is set
 * (a port has one address); the others read as zero, as unused entries of
 * a real table do. */
int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (port_num != 1 || index < 0 || index >= RF_GID_TABLE) {
		errno = EINVAL;
		return -1;
	}
	if (index == 0)
		*gid = to_rctx(context)->port.gid;
	else
		memset(gid, 0, sizeof(*gid));
	return 0;
}

static void gid_entry(struct rf_context *ctx, struct ibv_gid_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->gid = ctx->port.gid;
	e->gid_index = 0;
	e->port_num = 1;
	e->gid_type = ctx->port.roce ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
	e->ndev_ifindex = 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;

	if (flags || entry_size < sizeof(e))
		return EINVAL;
	if (port_num != 1 || gid_index >= RF_GID_TABLE)
		return EINVAL;
	if (gid_index != 0)
		return ENODATA;
	gid_entry(to_rctx(context), &e);
	memcpy(entry, &e, sizeof(e));
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	if (flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	if (max_entries < 1)
		return -EINVAL;
	gid_entry(to_rctx(context), entries);
	return 1;
}

/* rdma-core's private ibv_query_gid_type (ibv_devinfo calls it): 0 is
 * "IB/RoCE v1", 1 "RoCE v2" (enum ibv_gid_type_sysfs). */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type)
{
	if (port_num != 1 || index >= RF_GID_TABLE) {
		errno = EINVAL;
		return -1;
	}
	*type = to_rctx(context)->port.roce ? 1 : 0;
	return 0;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	(void)context;
	if (port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	(void)context;
	if (port_num == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff)
		return 0;
	errno = ENOENT;
	return -1;
}

static int rf_ring_bell_fd(struct rf_ring *r)
{
	static const char b = 1;

	return write(r->fd, &b, 1) == 1 ? 0 : errno;
}

/* rf_or_bit sets bit m of the shared word w, or leaves it if it is set. */
static void rf_or_bit(uint32_t *w, uint32_t m)
{
	if (!(__atomic_load_n(w, __ATOMIC_SEQ_CST) & m))
		__atomic_fetch_or(w, m, __ATOMIC_SEQ_CST);
}

/* rf_ring_bell wakes the parked engine for QP qpn, whose send ring r asked
 * for a doorbell. The device doorbell first marks the QP in the page's
 * bitmap (bit qpn mod its size; ring/doc.go, Doorbell), then the bitmap
 * word's bit in the header's summary, so that the daemon reads that word
 * and looks at this QP, not at every word or QP; a bit already set is left
 * alone, the daemon not having taken it yet (each bit checked on its own,
 * as ring.MarkBell does). Then the futex word, as a CQ event. */
void rf_ring_bell(struct rf_context *ctx, struct rf_ring *r, uint32_t qpn)
{
	if (ctx->bell.base) {
		struct rf_ring *b = &ctx->bell;
		uint32_t bit = qpn & (b->slot_size * b->slot_count * 8 - 1);
		uint32_t s = bit / 32 % RDMAFS_BELL_SUMMARY_BITS;

		rf_or_bit((uint32_t *)b->data + bit / 32, 1u << (bit % 32));
		rf_or_bit((uint32_t *)(b->base + RDMAFS_OFF_BELL_SUMMARY) + s / 32, 1u << (s % 32));
		__atomic_add_fetch(ctx->bell.event, 1, __ATOMIC_SEQ_CST);
		syscall(SYS_futex, ctx->bell.event, 1 /* FUTEX_WAKE, shared */, INT32_MAX, NULL, NULL, 0);
		return;
	}
	rf_ring_bell_fd(r);
}

/* open_ctx opens a context on device d: a new one (imported < 0: its own
 * lease, unless RDMAFS_PERSISTENT), or one on a command fd another context
 * made (ibv_import_device): then cmd_fd is that lease (imported 1) or
 * mount root (imported 2), and the context owns it from here on, closing
 * it at ibv_close_device as rdma-core's does. */
static struct ibv_context *open_ctx(struct rf_device *d, int cmd_fd, int imported)
{
	struct rf_context *ctx = calloc(1, sizeof(*ctx));
	struct ibv_context *c;
	int pipefd[2], err;

	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->dev = d;
	ctx->lease_fd = -1;
	ctx->bell.fd = -1;
	ctx->async_wr = -1;
	snprintf(ctx->mount, sizeof(ctx->mount), "%s", d->mount);
	if (imported == 2)
		ctx->mount_fd = cmd_fd;
	else
		ctx->mount_fd = open(ctx->mount, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ctx->mount_fd < 0) {
		err = rf_errno_of_write(errno);
		free(ctx);
		errno = err;
		return NULL;
	}
	if (imported == 1)
		ctx->lease_fd = cmd_fd;
	if ((err = load_attrs(ctx)))
		goto fail;
	if (imported < 0 && !getenv("RDMAFS_PERSISTENT")) {
		ctx->lease_fd = openat(ctx->mount_fd, "lease", O_RDWR | O_CLOEXEC);
		if (ctx->lease_fd < 0) {
			err = rf_errno_of_write(errno);
			goto fail;
		}
	}
	if (rf_ring_map(ctx->mount_fd, "doorbell", RDMAFS_KIND_DOORBELL, &ctx->bell))
		ctx->bell.base = NULL; /* older daemon: write() doorbells */
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		err = errno;
		goto fail;
	}
	ctx->async_wr = pipefd[1];
	pthread_mutex_init(&ctx->lock, NULL);

	c = &ctx->vctx.context;
	c->device = &d->dev;
	c->cmd_fd = ctx->lease_fd >= 0 ? ctx->lease_fd : ctx->mount_fd;
	c->async_fd = pipefd[0];
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.sz = sizeof(ctx->vctx);

	c->ops._compat_query_device = rf_query_device;
	c->ops.post_send = rf_post_send;
	c->ops.post_recv = rf_post_recv;
	c->ops.post_srq_recv = rf_post_srq_recv;
	c->ops.poll_cq = rf_poll_cq;
	c->ops.req_notify_cq = rf_req_notify_cq;
	c->ops.alloc_mw = rf_alloc_mw;
	c->ops.dealloc_mw = rf_dealloc_mw;
	c->ops.bind_mw = rf_bind_mw;
	ctx->vctx.query_port = rf_query_port;
	ctx->vctx.query_device_ex = rf_query_device_ex;
	ctx->vctx.query_rt_values = rf_query_rt_values;
	ctx->vctx.advise_mr = rf_advise_mr;
	ctx->vctx.create_qp_ex = rf_create_qp_ex;
	ctx->vctx.create_cq_ex = rf_create_cq_ex;
	ctx->vctx.create_srq_ex = rf_create_srq_ex;
	ctx->vctx.open_xrcd = rf_open_xrcd;
	ctx->vctx.close_xrcd = rf_close_xrcd;
	ctx->vctx.get_srq_num = rf_get_srq_num;
	ctx->vctx.open_qp = rf_open_qp;
	ctx->vctx.alloc_parent_domain = rf_alloc_parent_domain;
	ctx->vctx.alloc_td = rf_alloc_td;
	ctx->vctx.alloc_dm = rf_alloc_dm;
	ctx->vctx.free_dm = rf_free_dm;
	ctx->vctx.reg_dm_mr = rf_reg_dm_mr;
	ctx->vctx.dealloc_td = rf_dealloc_td;

	if ((err = rf_async_start(ctx)))
		goto fail;
	return c;
fail:
	if (ctx->async_wr >= 0) {
		close(ctx->async_wr);
		close(pipefd[0]);
	}
	rf_ring_unmap(&ctx->bell);
	/* a failed import leaves the caller's fd open */
	if (ctx->lease_fd >= 0 && imported != 1)
		close(ctx->lease_fd);
	if (imported != 2)
		close(ctx->mount_fd);
	free(ctx);
	errno = err;
	return NULL;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	return open_ctx(rf_container_of(device, struct rf_device, dev), -1, -1);
}

/* ibv_import_device: a context on the command fd of another context (its
 * ibv_context.cmd_fd, this process's or another's by SCM_RIGHTS): the
 * context's MOUNT/lease (or, under RDMAFS_PERSISTENT, its O_PATH of the
 * mount root). The fd names its mount by its st_dev; the device is the one
 * of this process's list on that mount (ENODEV when there is none). The
 * new context's objects go into the same lease, so they live while any
 * process holds the fd, as a kernel uverbs file's. What it may touch is
 * what the caller's uid may: the daemon checks each file's owner, not who
 * opened the fd. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct rf_device *d = NULL;
	struct stat st, ms;
	char p[PATH_MAX + 16];
	int kind = 0;

	if (cmd_fd < 0 || fstat(cmd_fd, &st) < 0) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&list_lock);
	scan();
	for (int i = 0; i < ndevices && !d; i++) {
		if (stat(devices[i]->mount, &ms) < 0 || ms.st_dev != st.st_dev)
			continue;
		if (S_ISDIR(st.st_mode) && ms.st_ino == st.st_ino)
			kind = 2;
		snprintf(p, sizeof(p), "%s/lease", devices[i]->mount);
		if (S_ISREG(st.st_mode) && stat(p, &ms) == 0 && ms.st_ino == st.st_ino)
			kind = 1;
		d = devices[i];
	}
	pthread_mutex_unlock(&list_lock);
	if (!d) {
		errno = ENODEV;
		return NULL;
	}
	if (!kind) {
		errno = EINVAL; /* a file of the mount, not a command fd */
		return NULL;
	}
	return open_ctx(d, cmd_fd, kind);
}

int ibv_close_device(struct ibv_context *context)
{
	struct rf_context *ctx = to_rctx(context);

	rf_async_stop(ctx);
	close(context->async_fd);
	close(ctx->async_wr);
	rf_ring_unmap(&ctx->bell);
	/* Closing the lease destroys every object this context still has;
	 * their memory stays mapped (the program may still read it). */
	if (ctx->lease_fd >= 0)
		close(ctx->lease_fd);
	close(ctx->mount_fd);
	pthread_mutex_destroy(&ctx->lock);
	pthread_mutex_destroy(&context->mutex);
	while (ctx->objs) {
		struct rf_obj *o = ctx->objs;
		ctx->objs = o->next;
		free(o);
	}
	while (ctx->async_head) {
		struct rf_async_ev *e = ctx->async_head;
		ctx->async_head = e->next;
		free(e);
	}
	free(ctx);
	return 0;
}

/* rdma-core reads its sysfs tree; for our devices the mount is the
 * directory, so ibv_read_sysfs_file(ibdev_path, "device") works. */
const char *ibv_get_sysfs_path(void)
{
	const char *e = getenv("SYSFS_PATH");

	return e && *e ? e : "/sys";
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[PATH_MAX];
	int fd, len;

	if (!size)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len > 0) {
		if ((size_t)len == size)
			len--;
		if (buf[len - 1] == '\n')
			buf[--len] = 0;
		else
			buf[len] = 0;
	}
	return len;
}
