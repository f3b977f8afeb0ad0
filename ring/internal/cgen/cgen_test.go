package cgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"HeaderSize":         "HEADER_SIZE",
		"OffSlotSize":        "OFF_SLOT_SIZE",
		"SendOffWRID":        "SEND_OFF_WRID",
		"SGEOffLKey":         "SGE_OFF_L_KEY",
		"CQEOffQPNum":        "CQE_OFF_QP_NUM",
		"CQEOffDLIDPathBits": "CQE_OFF_DLID_PATH_BITS",
		"SendOffRemoteQPN":   "SEND_OFF_REMOTE_QPN",
		"MaxSendSGE":         "MAX_SEND_SGE",
		"KindSQ":             "KIND_SQ",
		"Version2Len":        "VERSION2_LEN",
		"X":                  "X",
	} {
		if got := Snake(in); got != want {
			t.Errorf("Snake(%q) = %q, want %q", in, got, want)
		}
	}
}

func genFrom(t *testing.T, src string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Generate(dir, "example/p")
	return string(h), err
}

func TestGenerate(t *testing.T) {
	h, err := genFrom(t, `package p

// Block doc.
const (
	A = iota // first
	B
	hidden = 7
	Hex    = 0x1F
	Shift  = 1 << 4
)

type K uint8

// Typed.
const KindOne K = 1
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"/* Block doc. */\n",
		"#define RDMAFS_A     0    /* p.A: first */\n",
		"#define RDMAFS_B     1    /* p.B */\n",
		"#define RDMAFS_HEX   0x1F /* p.Hex */\n",
		"#define RDMAFS_SHIFT 16   /* p.Shift */\n",
		"/* Typed. */\n#define RDMAFS_KIND_ONE 1 /* p.KindOne */\n",
		"#ifndef RDMAFS_ABI_H\n", "#endif /* RDMAFS_ABI_H */\n",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("header lacks %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "HIDDEN") {
		t.Errorf("an unexported constant reached the header:\n%s", h)
	}
}

// Anything the generator cannot write as a C integer fails loudly rather
// than leaving a hole in the ABI.
func TestGenerateRefuses(t *testing.T) {
	for name, src := range map[string]string{
		"string":   "package p\nconst Name = \"x\"\n",
		"negative": "package p\nconst Neg = -1\n",
		"float":    "package p\nconst F = 1.5\n",
		"clash":    "package p\nconst (\n\tAB = 1\n\tAb = 2\n)\n",
		"none":     "package p\nconst x = 1\n",
	} {
		if h, err := genFrom(t, src); err == nil {
			t.Errorf("%s: no error; header:\n%s", name, h)
		}
	}
}
