package fsnode_test

import (
	"fmt"
	"strings"
	"testing"

	"rdmafs/device"
	"rdmafs/fsnode"
)

// TestUserShare: a second uid gets ENOMEM with a reason naming the
// per-user limit once it holds its share (25% of max_pd 8: 2 PDs); root,
// the mount's owner, still creates up to the device limit.
func TestUserShare(t *testing.T) {
	m := mountWith(t, device.Config{MaxPD: 8, MaxQP: 8, UserShare: 25}, fsnode.Options{})
	if d := m.attrs("device"); d["max_pd_per_user"] != "2" || d["max_qp_per_user"] != "2" || d["user_share"] != "25" {
		t.Errorf("device file: max_pd_per_user=%s max_qp_per_user=%s user_share=%s", d["max_pd_per_user"], d["max_qp_per_user"], d["user_share"])
	}
	out, stderr, err := bash(nobody, fmt.Sprintf(`M=%s
for i in 1 2 3; do { echo "" >&0; read -r pd; } <>$M/pd/new; echo "$pd"; done`, m.dir))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 {
		t.Fatalf("uid %d: %q %q %v", nobody, out, stderr, err)
	}
	if !strings.Contains(stderr, "Cannot allocate memory") ||
		!strings.HasPrefix(lines[2], "error: alloc_pd: max_pd per user (2: --user-share 25% of 8) reached by uid 65534") {
		t.Fatalf("uid %d's 3rd pd: answer %q, stderr %q", nobody, lines[2], stderr)
	}
	// Root takes the rest of the device: 8 - 2.
	for range 6 {
		m.create("pd", "")
	}
	if name, err := m.tryCreate("pd", ""); err == nil || strings.Contains(name, "per user") {
		t.Errorf("root past max_pd: %q %v, want the device limit", name, err)
	}
}
