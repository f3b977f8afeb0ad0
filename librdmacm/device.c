/* Devices: the ibv_devices of ibv_get_device_list, which rdmafs's
 * libibverbs finds in /proc/self/mountinfo (fuse.rdmafs, limited by
 * RDMAFS_DEVICE_MOUNT=PATH[:PATH...]) and whose ibdev_path is the mount.
 * For each: the addresses it answers for (MOUNT/cm/addrs) and its node
 * GUID, by which its context is opened once, on first use, and shared by
 * every id on the device, as librdmacm's cma_device. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm.h"

static struct rc_device *devices[RC_MAX_DEVICES];
static int ndevices;
static bool scanned;

/* mount's place in RDMAFS_DEVICE_MOUNT (rdma_create_id's default device is
 * the first it names); 0 when it is unset, RC_MAX_DEVICES if it is not
 * named (libibverbs lists only named mounts then). */
static int rank(const char *mount)
{
	const char *sel = getenv("RDMAFS_DEVICE_MOUNT");
	char want[PATH_MAX], real[PATH_MAX];
	int r = 0;

	if (!sel || !*sel)
		return 0;
	while (*sel) {
		size_t n = strcspn(sel, ":");
		if (n && n < sizeof(want)) {
			memcpy(want, sel, n);
			want[n] = 0;
			if (!strcmp(want, mount) || (realpath(want, real) && !strcmp(real, mount)))
				return r;
			r++;
		}
		sel += n;
		if (*sel == ':')
			sel++;
	}
	return RC_MAX_DEVICES;
}

static void add_device(struct ibv_device *dev)
{
	const char *mnt = dev->ibdev_path;
	struct rc_device *d;

	if (ndevices == RC_MAX_DEVICES || !*mnt)
		return;
	d = calloc(1, sizeof(*d));
	if (!d)
		return;
	snprintf(d->mount, sizeof(d->mount), "%s", mnt);
	d->guid = be64toh(ibv_get_device_guid(dev));
	d->mount_fd = open(mnt, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (d->mount_fd < 0) {
		free(d);
		return;
	}
	if (rc_read(d, "cm/addrs", d->addrs, sizeof(d->addrs))) {
		rc_log("%s: no cm/addrs: a daemon without the CM", mnt);
		close(d->mount_fd);
		free(d);
		return;
	}
	d->on_wire = !strstr(d->addrs, "127.0.0.1\n") && strcmp(d->addrs, "127.0.0.1") != 0;
	d->lease_fd = openat(d->mount_fd, "lease", O_RDWR | O_CLOEXEC);
	devices[ndevices++] = d;
}

static void scan(void)
{
	struct ibv_device **list;
	int n;

	scanned = true;
	list = ibv_get_device_list(&n);
	if (!list)
		return;
	for (int i = 0; i < n; i++)
		add_device(list[i]);
	ibv_free_device_list(list);
	/* RDMAFS_DEVICE_MOUNT's order */
	for (int i = 1; i < ndevices; i++)
		for (int j = i; j > 0 && rank(devices[j]->mount) < rank(devices[j - 1]->mount); j--) {
			struct rc_device *t = devices[j];
			devices[j] = devices[j - 1];
			devices[j - 1] = t;
		}
	for (int i = 0; i < ndevices; i++)
		devices[i]->index = i;
}

/* rc_lock held */
int rc_devices(struct rc_device ***list)
{
	if (!scanned)
		scan();
	*list = devices;
	return ndevices;
}

/* addr's text, IPv4-mapped IPv6 as IPv4 */
static int plain_text(const struct sockaddr *sa, char *out, size_t len)
{
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a))
			return inet_ntop(AF_INET, &a->s6_addr[12], out, len) ? 0 : EINVAL;
	}
	return rc_addr_text(sa, out, len);
}

static bool answers(struct rc_device *d, const char *addr)
{
	const char *p = d->addrs;
	size_t al = strlen(addr);

	while (*p) {
		size_t n = strcspn(p, "\n");
		if (n == al && !memcmp(p, addr, n))
			return true;
		p += n;
		if (*p)
			p++;
	}
	return false;
}

struct rc_device *rc_device_for(const struct sockaddr *addr)
{
	char text[INET6_ADDRSTRLEN];
	struct rc_device **l;
	int n = rc_devices(&l);

	if (plain_text(addr, text, sizeof(text)))
		return NULL;
	for (int i = 0; i < n; i++)
		if (answers(l[i], text))
			return l[i];
	return NULL;
}

struct rc_device *rc_device_default(void)
{
	struct rc_device **l;
	const char *sel = getenv("RDMAFS_DEVICE_MOUNT");
	int n = rc_devices(&l);

	return sel && *sel && n ? l[0] : NULL;
}

struct rc_device *rc_device_first_wire(void)
{
	struct rc_device **l;
	int n = rc_devices(&l);

	for (int i = 0; i < n; i++)
		if (l[i]->on_wire)
			return l[i];
	return NULL;
}

/* rc_lock held */
int rc_device_open(struct rc_device *d)
{
	struct ibv_device **list;
	int n, err = ENODEV;

	if (d->verbs)
		return 0;
	list = ibv_get_device_list(&n);
	if (!list)
		return errno ? errno : ENODEV;
	for (int i = 0; i < n; i++) {
		if (be64toh(ibv_get_device_guid(list[i])) != d->guid)
			continue;
		struct ibv_context *c = ibv_open_device(list[i]);
		if (!c) {
			err = errno ? errno : ENODEV;
			break;
		}
		if (ibv_query_device(c, &d->attr) || ibv_query_port(c, 1, &d->port)) {
			err = errno ? errno : EIO;
			ibv_close_device(c);
			break;
		}
		d->pd = ibv_alloc_pd(c);
		if (!d->pd) {
			err = errno ? errno : ENOMEM;
			ibv_close_device(c);
			break;
		}
		d->verbs = c;
		err = 0;
		break;
	}
	ibv_free_device_list(list);
	if (err)
		rc_log("%s: no verbs device with node GUID %#llx: %s", d->mount,
		       (unsigned long long)d->guid, strerror(err));
	return err;
}

struct rc_device *rc_device_of_verbs(struct ibv_context *verbs)
{
	struct rc_device **l;
	int n = rc_devices(&l);

	for (int i = 0; i < n; i++)
		if (l[i]->verbs == verbs)
			return l[i];
	return NULL;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **out;
	struct rc_device **l;
	int n, k = 0;

	pthread_mutex_lock(&rc_lock);
	n = rc_devices(&l);
	out = calloc(n + 1, sizeof(*out));
	if (out)
		for (int i = 0; i < n; i++)
			if (!rc_device_open(l[i]))
				out[k++] = l[i]->verbs;
	pthread_mutex_unlock(&rc_lock);
	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	if (num_devices)
		*num_devices = k;
	return out;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}
