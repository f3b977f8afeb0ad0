package fsnode

import "testing"

// The FUSE connection comes from mountinfo, never from a stat of the
// mount (a request to the daemon itself): the newest FUSE mount on the
// directory, its device's minor, with mountinfo's escapes undone.
func TestFuseConnID(t *testing.T) {
	const info = `22 1 0:21 / /proc rw,nosuid - proc proc rw
40 22 8:1 / /mnt/a rw - ext4 /dev/sda1 rw
41 40 0:57 / /mnt/a rw,nosuid - fuse.rdmafs rdmafs rw,user_id=0
42 1 0:58 / /tmp/with\040space rw - fuse.rdmafs rdmafs rw
43 41 0:61 / /mnt/a rw,nosuid - fuse.rdmafs rdmafs rw,user_id=0
44 1 0:70 / /mnt/b rw - tmpfs tmpfs rw
45 1 0:71 / /mnt/c rw shared:5 master:2 - fuse.rdmafs rdmafs rw`
	for _, c := range []struct {
		dir  string
		want uint32
	}{
		{"/mnt/a", 61}, // the newest of two FUSE mounts over an ext4 one
		{"/tmp/with space", 58},
		{"/mnt/b", 0}, // not FUSE
		{"/mnt/c", 71},
		{"/nowhere", 0},
	} {
		if got := fuseConnID(info, c.dir); got != c.want {
			t.Errorf("%s: %d, want %d", c.dir, got, c.want)
		}
	}
}
