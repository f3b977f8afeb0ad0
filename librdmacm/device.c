/* Devices: the rdmafs mounts of the machine, found as libibverbs/ finds
 * them (/proc/self/mountinfo, type fuse.rdmafs, limited by
 * RDMAFS_DEVICE_MOUNT=PATH[:PATH...]). For each: the addresses it answers
 * for (MOUNT/cm/addrs) and its node GUID (MOUNT/device), by which it is
 * matched to the ibv_device of ibv_get_device_list; that context is
 * opened once, on first use, and shared by every id on the device, as
 * librdmacm's cma_device. */
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

/* The mounts RDMAFS_DEVICE_MOUNT names, in its order; rank -1 if it names
 * others, 0 when it is unset. */
static int selected(const char *mount)
{
	const char *sel = getenv("RDMAFS_DEVICE_MOUNT");
	char want[PATH_MAX], real[PATH_MAX];
	int rank = 0;

	if (!sel || !*sel)
		return 0;
	while (*sel) {
		size_t n = strcspn(sel, ":");
		if (n && n < sizeof(want)) {
			memcpy(want, sel, n);
			want[n] = 0;
			if (!strcmp(want, mount) || (realpath(want, real) && !strcmp(real, mount)))
				return rank;
			rank++;
		}
		sel += n;
		if (*sel == ':')
			sel++;
	}
	return -1;
}

static void add_mount(const char *mnt)
{
	char p[PATH_MAX + 32], text[4096];
	struct rc_device *d;
	int fd;
	ssize_t r;

	if (ndevices == RC_MAX_DEVICES || selected(mnt) < 0)
		return;
	for (int i = 0; i < ndevices; i++)
		if (!strcmp(devices[i]->mount, mnt))
			return;
	snprintf(p, sizeof(p), "%s/device", mnt);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return; /* a dead daemon's mount */
	r = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (r <= 0)
		return;
	text[r] = 0;
	d = calloc(1, sizeof(*d));
	if (!d)
		return;
	snprintf(d->mount, sizeof(d->mount), "%s", mnt);
	const char *g = strstr(text, "node_guid=");
	if (g)
		d->guid = strtoull(g + 10, NULL, 0);
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
	d->index = ndevices;
	devices[ndevices++] = d;
}

static void scan(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];

	scanned = true;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *sep = strstr(line, " - ");
		char *fields[5], *save, *tok;
		int n = 0;

		if (!sep || strncmp(sep + 3, "fuse.rdmafs ", 12) != 0)
			continue;
		*sep = 0;
		for (tok = strtok_r(line, " ", &save); tok && n < 5; tok = strtok_r(NULL, " ", &save))
			fields[n++] = tok;
		if (n < 5)
			continue;
		unescape(fields[4]);
		add_mount(fields[4]);
	}
	fclose(f);
	/* RDMAFS_DEVICE_MOUNT's order */
	for (int i = 1; i < ndevices; i++)
		for (int j = i; j > 0 && selected(devices[j]->mount) < selected(devices[j - 1]->mount); j--) {
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
