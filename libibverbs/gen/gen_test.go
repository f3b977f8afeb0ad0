package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// need skips a test that needs a tool or file this machine lacks, except in
// CI, which installs everything the C library needs.
func need(t *testing.T, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI must have %s", what)
	}
	t.Skipf("no %s", what)
}

// systemLib is the installed libibverbs.so.1, as the Makefile finds it.
func systemLib(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	need(t, "a C compiler (cc)", err == nil)
	out, err := exec.Command(cc, "-print-file-name=libibverbs.so.1").Output()
	p := strings.TrimSpace(string(out))
	need(t, "the system libibverbs.so.1 (libibverbs1)", err == nil && filepath.IsAbs(p))
	return p
}

// TestExportsTxtIsTheSystemSet: exports.txt, the input on machines without
// the library, is the installed library's export set.
func TestExportsTxtIsTheSystemSet(t *testing.T) {
	lib := systemLib(t)
	_, err := exec.LookPath("objdump")
	need(t, "objdump (binutils)", err == nil)
	sys, err := Objdump("objdump", lib)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../exports.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	txt, err := ReadExportSet(f)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	sys.Format(&a, "")
	txt.Format(&b, "")
	if a.String() != b.String() {
		t.Errorf("exports.txt differs from %s; regenerate it:\n  go run ./libibverbs/gen exports %s > libibverbs/exports.txt\n%s",
			lib, lib, lineDiff(b.String(), a.String()))
	}
	if len(sys.Symbols) != 180 || len(sys.Nodes) != 13 {
		t.Logf("note: %s exports %d symbols in %d nodes (Debian's rdma-core 44.0: 180 in 13)", lib, len(sys.Symbols), len(sys.Nodes))
	}
}

func lineDiff(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	var out []string
	for _, l := range h {
		if !slices.Contains(w, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range w {
		if !slices.Contains(h, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

const objdumpSample = `
/usr/lib/x86_64-linux-gnu/libibverbs.so.1:     file format elf64-x86-64

DYNAMIC SYMBOL TABLE:
0000000000000000      DF *UND*	0000000000000000 (GLIBC_2.2.5) free
0000000000000000      DF *UND*	0000000000000000  Base        nl_connect
0000000000010dd0 g    DF .text	00000000000000a5 (IBVERBS_1.0) ibv_ack_async_event
0000000000020281 g    DO .bss	0000000000000001  IBVERBS_PRIVATE_34 verbs_allow_disassociate_destroy
0000000000000000 g    DO *ABS*	0000000000000000  IBVERBS_1.0 IBVERBS_1.0
0000000000000000 g    DO *ABS*	0000000000000000  IBVERBS_1.10 IBVERBS_1.10
0000000000000000 g    DO *ABS*	0000000000000000  IBVERBS_1.1 IBVERBS_1.1
0000000000000000 g    DO *ABS*	0000000000000000  IBVERBS_PRIVATE_34 IBVERBS_PRIVATE_34
00000000000114d0 g    DF .text	0000000000000001 (IBVERBS_1.1) ibv_register_driver
0000000000010e10 g    DF .text	00000000000000a5  IBVERBS_1.1 ibv_ack_async_event
0000000000010e10 g    DF .text	00000000000000a5  IBVERBS_1.10 ibv_import_pd
0000000000010e10 g    DF .text	00000000000000a5  IBVERBS_1.0 ibv_rate_to_mult
`

func TestReadExportSet(t *testing.T) {
	set, err := ReadExportSet(strings.NewReader(objdumpSample))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"IBVERBS_1.0", "IBVERBS_1.1", "IBVERBS_1.10", "IBVERBS_PRIVATE_34"}; !slices.Equal(set.Nodes, want) {
		t.Errorf("nodes %v, want %v", set.Nodes, want)
	}
	var b bytes.Buffer
	set.Format(&b, "")
	want := `node IBVERBS_1.0
node IBVERBS_1.1
node IBVERBS_1.10
node IBVERBS_PRIVATE_34
func (IBVERBS_1.0) ibv_ack_async_event
func IBVERBS_1.0 ibv_rate_to_mult
func IBVERBS_1.1 ibv_ack_async_event
func (IBVERBS_1.1) ibv_register_driver
func IBVERBS_1.10 ibv_import_pd
object IBVERBS_PRIVATE_34 verbs_allow_disassociate_destroy 1
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	// The normal form reads back to itself.
	again, err := ReadExportSet(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	again.Format(&c, "")
	if c.String() != want {
		t.Errorf("round trip:\n%s", c.String())
	}
}

func TestReadExportSetRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"weak":       "0000000000010dd0 w    DF .text	00000000000000a5  V_1.0 f\n0 g DO *ABS* 0 V_1.0 V_1.0\n",
		"ifunc":      "0000000000010dd0 g   iDF .text	00000000000000a5  V_1.0 f\n0 g DO *ABS* 0 V_1.0 V_1.0\n",
		"unversion":  "0000000000010dd0 g    DF .text	00000000000000a5  Base f\n",
		"no node":    "func V_1.0 f\n",
		"twice":      "node V_1.0\nfunc V_1.0 f\nfunc V_1.0 f\n",
		"bad object": "node V_1.0\nobject V_1.0 x\n",
	} {
		if _, err := ReadExportSet(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSortNodes(t *testing.T) {
	in := []string{"IBVERBS_PRIVATE_34", "IBVERBS_1.14", "IBVERBS_1.5", "IBVERBS_1.1", "IBVERBS_1.10", "IBVERBS_1.0", "IBVERBS_1.9"}
	got := SortNodes(in)
	want := []string{"IBVERBS_1.0", "IBVERBS_1.1", "IBVERBS_1.5", "IBVERBS_1.9", "IBVERBS_1.10", "IBVERBS_1.14", "IBVERBS_PRIVATE_34"}
	if !slices.Equal(got, want) {
		t.Fatalf("SortNodes = %v", got)
	}
	for n, p := range map[string]string{
		"IBVERBS_1.0": "", "IBVERBS_1.1": "IBVERBS_1.0", "IBVERBS_1.10": "IBVERBS_1.9",
		"IBVERBS_PRIVATE_34": "",
	} {
		if got := Parent(want, n); got != p {
			t.Errorf("Parent(%s) = %q, want %q", n, got, p)
		}
	}
}

func TestReadDefined(t *testing.T) {
	nm := `
build/a.o:
0000000000000000 T ibv_alloc_pd
0000000000000010 t helper_static
0000000000000020 T rf_log
0000000000000000 B verbs_allow_disassociate_destroy

build/b.o:
0000000000000000 T ibv_query_port@IBVERBS_1.0
0000000000000000 T ibv_foo@@IBVERBS_1.1
`
	d, err := ReadDefined(strings.NewReader(nm))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ibv_alloc_pd", "rf_log", "verbs_allow_disassociate_destroy"} {
		if !d.Names[n] {
			t.Errorf("%s not defined", n)
		}
	}
	if d.Names["helper_static"] {
		t.Error("a local symbol counts as defined")
	}
	if !d.Versioned["ibv_query_port@IBVERBS_1.0"] || !d.Versioned["ibv_foo@IBVERBS_1.1"] {
		t.Errorf("versioned: %v", d.Versioned)
	}
}

func TestProtos(t *testing.T) {
	aux := `/* /usr/include/infiniband/verbs.h:2437:NC */ extern struct ibv_pd *ibv_alloc_pd (struct ibv_context *);
/* /usr/include/infiniband/verbs.h:2360:NC */ extern int ibv_query_port (struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
/* /usr/include/infiniband/verbs.h:3445:NC */ extern int ibv_resolve_eth_l2_from_gid (struct ibv_context *, struct ibv_ah_attr *, uint8_t *, uint16_t *);
/* /usr/include/infiniband/verbs.h:9:NF */ static int ibv_post_send (struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr); /* (qp, wr, bad_wr) struct ibv_qp *qp; ... */
/* /usr/include/stdlib.h:10:NC */ extern void free (void *);
/* /usr/include/infiniband/verbs.h:2262:NC */ extern void ibv_free_device_list (struct ibv_device **);
`
	p, err := ReadProtos(strings.NewReader(aux), "/infiniband/")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p["free"]; ok {
		t.Error("a libc prototype was kept")
	}
	if _, ok := p["ibv_post_send"]; ok {
		t.Error("a static inline definition was kept")
	}
	for name, want := range map[string]string{
		"ibv_alloc_pd":         "struct ibv_pd *(ibv_alloc_pd)(struct ibv_context *p0)",
		"ibv_query_port":       "int (ibv_query_port)(struct ibv_context *p0, uint8_t p1, struct _compat_ibv_port_attr *p2)",
		"ibv_free_device_list": "void (ibv_free_device_list)(struct ibv_device **p0)",
	} {
		got, _ := p[name].Decl(name, true)
		if got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	for in, want := range map[string]string{
		"void (*)(void *), int":       "void (*p0)(void *), int p1",
		"uint8_t[6], const char *":    "uint8_t p0[6], const char *p1",
		"void *, uint32_t, ...":       "void *p0, uint32_t p1, ...",
		"void":                        "void",
		"struct ibv_wc *, size_t":     "struct ibv_wc *p0, size_t p1",
		"unsigned int, void *":        "unsigned int p0, void *p1",
		"int (*)(int, int), char **":  "int (*p0)(int, int), char **p1",
		"const union ibv_gid *, int":  "const union ibv_gid *p0, int p1",
		"enum ibv_rate":               "enum ibv_rate p0",
		"struct ibv_cq **, void **":   "struct ibv_cq **p0, void **p1",
		"uint8_t, unsigned int, int":  "uint8_t p0, unsigned int p1, int p2",
		"struct ibv_device *, void *": "struct ibv_device *p0, void *p1",
	} {
		pr, err := ParseProto("int (" + in + ")")
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := pr.Named(); got != want {
			t.Errorf("Named(%s) = %s, want %s", in, got, want)
		}
	}
}

// Every entry of the uninstalled table parses and has a convention.
func TestUninstalledTable(t *testing.T) {
	for name := range uninstalled {
		p, ok, err := uninstalledProto(name)
		if !ok || err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := Rule(name, p); err != nil {
			t.Error(err)
		}
		if _, err := callClass(p.Ret); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRule(t *testing.T) {
	for name, c := range map[string]struct {
		ret, want string
	}{
		"ibv_alloc_pd":                {"struct ibv_pd *", "NULL"},
		"ibv_dealloc_pd":              {"int", "EOPNOTSUPP"},
		"ibv_query_gid":               {"int", "-1"},
		"ibv_get_cq_event":            {"int", "-1"},
		"_ibv_query_gid_table":        {"ssize_t", "-EOPNOTSUPP"},
		"ibv_resolve_eth_l2_from_gid": {"int", "-EOPNOTSUPP"},
		"ibv_rereg_mr":                {"int", "IBV_REREG_MR_ERR_INPUT"},
		"ibv_ack_cq_events":           {"void", ""},
		"ibv_get_device_guid":         {"__be64", "0"},
	} {
		r, err := Rule(name, Proto{Ret: c.ret})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if r.ret != c.want {
			t.Errorf("%s returns %q, want %q", name, r.ret, c.want)
		}
	}
	if _, err := Rule("ibv_new_thing", Proto{Ret: "uint32_t"}); err == nil {
		t.Error("a return type without a convention was accepted")
	}
}

func TestPlan(t *testing.T) {
	set, err := ReadExportSet(strings.NewReader(objdumpSample))
	if err != nil {
		t.Fatal(err)
	}
	protos, err := ReadProtos(strings.NewReader(
		`/* /usr/include/infiniband/verbs.h:1:NC */ extern void ibv_ack_async_event (struct ibv_async_event *);
/* /usr/include/infiniband/verbs.h:2:NC */ extern int ibv_rate_to_mult (enum ibv_rate);
/* /usr/include/infiniband/verbs.h:3:NC */ extern struct ibv_pd *ibv_import_pd (struct ibv_context *, uint32_t);
`), "/infiniband/")
	if err != nil {
		t.Fatal(err)
	}
	def := &Defined{
		Names:     map[string]bool{"ibv_rate_to_mult": true, "ibv_ack_async_event": true, "rf_log": true},
		Versioned: map[string]bool{},
	}
	p, err := MakePlan(set, "sample", def, protos)
	if err != nil {
		t.Fatal(err)
	}
	var impl, stubs []string
	for _, s := range p.Implemented {
		impl = append(impl, s.Key())
	}
	for _, s := range p.Stubs {
		stubs = append(stubs, s.CName)
	}
	if want := []string{"ibv_rate_to_mult@IBVERBS_1.0", "ibv_ack_async_event@IBVERBS_1.1"}; !slices.Equal(impl, want) {
		t.Errorf("implemented %v, want %v", impl, want)
	}
	if want := []string{"rdmafs_compat_ibv_ack_async_event_IBVERBS_1_0", "rdmafs_compat_ibv_register_driver_IBVERBS_1_1", "ibv_import_pd", "verbs_allow_disassociate_destroy"}; !slices.Equal(stubs, want) {
		t.Errorf("stubs %v, want %v", stubs, want)
	}

	m := string(p.Map())
	for _, want := range []string{
		"IBVERBS_1.0 {\n\tglobal:\n\t\tibv_rate_to_mult;\n};\n",
		"IBVERBS_1.1 {\n\tglobal:\n\t\tibv_ack_async_event;\n} IBVERBS_1.0;\n",
		"IBVERBS_1.10 {\n\tglobal:\n\t\tibv_import_pd;\n} IBVERBS_1.1;\n",
		"IBVERBS_PRIVATE_34 {\n\tglobal:\n\t\tverbs_allow_disassociate_destroy;\n\tlocal:\n\t\t*;\n};",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("map lacks %q:\n%s", want, m)
		}
	}
	c := string(p.StubsC())
	for _, want := range []string{
		"__asm__(\".symver rdmafs_compat_ibv_ack_async_event_IBVERBS_1_0, ibv_ack_async_event@IBVERBS_1.0\");",
		"struct ibv_pd *(ibv_import_pd)(struct ibv_context *p0, uint32_t p1)\n{\n\t(void)p0;\n\t(void)p1;\n\terrno = EOPNOTSUPP;\n\treturn NULL;\n}",
		"void rdmafs_compat_ibv_register_driver_IBVERBS_1_1(const char *, void *);",
		"bool verbs_allow_disassociate_destroy;",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("stubs.c lacks %q:\n%s", want, c)
		}
	}
	tab := string(p.Table())
	for _, want := range []string{
		`RDMAFS_STUB("ibv_import_pd", "IBVERBS_1.10", 0, PTR, 0, 1)`,
		`RDMAFS_STUB("ibv_register_driver", "IBVERBS_1.1", 1, VOID, 0, 0)`,
		`RDMAFS_OBJECT("verbs_allow_disassociate_destroy", "IBVERBS_PRIVATE_34", 1)`,
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}

	// A hidden version the objects bind themselves is not stubbed.
	def.Versioned["ibv_ack_async_event@IBVERBS_1.0"] = true
	if p, err = MakePlan(set, "sample", def, protos); err != nil {
		t.Fatal(err)
	}
	if len(p.Stubs) != 3 {
		t.Errorf("with the compat version implemented, %d stubs", len(p.Stubs))
	}

	// An export with no prototype anywhere stops the build.
	delete(def.Names, "ibv_rate_to_mult")
	delete(protos, "ibv_rate_to_mult")
	if _, err := MakePlan(set, "sample", def, protos); err == nil || !strings.Contains(err.Error(), "ibv_rate_to_mult") {
		t.Errorf("no prototype: %v", err)
	}
}

// TestLibrdmacmProfile: librdmacm's stubs fail as librdmacm does: -1 with
// errno, ENOSYS for every rsocket call (whatever it returns), EOPNOTSUPP
// for the rest; the table names the errno.
func TestLibrdmacmProfile(t *testing.T) {
	set, err := ReadExportSet(strings.NewReader(`node RDMACM_1.0
node RDMACM_1.1
node RDMACM_1.2
func RDMACM_1.0 rdma_create_id
func RDMACM_1.0 rdma_join_multicast
func RDMACM_1.0 rread
func RDMACM_1.0 riomap
func RDMACM_1.1 rdma_join_multicast_ex
func RDMACM_1.2 rdma_establish
`))
	if err != nil {
		t.Fatal(err)
	}
	protos, err := ReadProtos(strings.NewReader(
		`/* /usr/include/rdma/rdma_cma.h:1:NC */ extern int rdma_create_id (struct rdma_event_channel *, struct rdma_cm_id **, void *, enum rdma_port_space);
/* /usr/include/rdma/rdma_cma.h:2:NC */ extern int rdma_join_multicast (struct rdma_cm_id *, struct sockaddr *, void *);
/* /usr/include/rdma/rdma_cma.h:3:NC */ extern int rdma_join_multicast_ex (struct rdma_cm_id *, struct rdma_cm_join_mc_attr_ex *, void *);
/* /usr/include/rdma/rdma_cma.h:4:NC */ extern int rdma_establish (struct rdma_cm_id *);
/* /usr/include/rdma/rsocket.h:5:NC */ extern ssize_t rread (int, void *, size_t);
/* /usr/include/rdma/rsocket.h:6:NC */ extern off_t riomap (int, void *, size_t, int, int, off_t);
/* /usr/include/infiniband/verbs.h:7:NC */ extern int ibv_fork_init (void);
`), Librdmacm.HeaderDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := protos["ibv_fork_init"]; ok {
		t.Error("a verbs.h prototype was read for librdmacm")
	}
	def := &Defined{Names: map[string]bool{"rdma_create_id": true, "rdma_establish": true}, Versioned: map[string]bool{}}
	p, err := MakeProfilePlan(Librdmacm, set, "sample", def, protos)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Implemented) != 2 || len(p.Stubs) != 4 {
		t.Fatalf("%d implemented, %d stubs", len(p.Implemented), len(p.Stubs))
	}
	c := string(p.StubsC())
	for _, want := range []string{
		"#include <rdma/rsocket.h>",
		"ssize_t (rread)(int p0, void *p1, size_t p2)\n{\n\t(void)p0;\n\t(void)p1;\n\t(void)p2;\n\terrno = ENOSYS;\n\treturn -1;\n}",
		"int (rdma_join_multicast)(struct rdma_cm_id *p0, struct sockaddr *p1, void *p2)\n{\n\t(void)p0;\n\t(void)p1;\n\t(void)p2;\n\terrno = EOPNOTSUPP;\n\treturn -1;\n}",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("stubs.c lacks %q:\n%s", want, c)
		}
	}
	tab := string(p.Table())
	for _, want := range []string{
		`RDMAFS_STUB("rread", "RDMACM_1.0", 0, LONG, -1, ENOSYS)`,
		`RDMAFS_STUB("riomap", "RDMACM_1.0", 0, LONG, -1, ENOSYS)`,
		`RDMAFS_STUB("rdma_join_multicast_ex", "RDMACM_1.1", 0, INT, -1, EOPNOTSUPP)`,
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	m := string(p.Map())
	if !strings.Contains(m, "RDMACM_1.2 {\n\tglobal:\n\t\trdma_establish;\n\tlocal:\n\t\t*;\n} RDMACM_1.1;") {
		t.Errorf("map:\n%s", m)
	}
	if _, err := librdmacmRule("rdma_new_thing", Proto{Ret: "uint32_t"}); err == nil {
		t.Error("a return type without a convention was accepted")
	}
}

// TestLibrdmacmExportsTxt: librdmacm/exports.txt is the installed
// librdmacm.so.1's export set.
func TestLibrdmacmExportsTxt(t *testing.T) {
	cc, err := exec.LookPath("cc")
	need(t, "a C compiler (cc)", err == nil)
	out, err := exec.Command(cc, "-print-file-name=librdmacm.so.1").Output()
	lib := strings.TrimSpace(string(out))
	need(t, "the system librdmacm.so.1 (librdmacm1)", err == nil && filepath.IsAbs(lib))
	_, err = exec.LookPath("objdump")
	need(t, "objdump (binutils)", err == nil)
	sys, err := Objdump("objdump", lib)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("../../librdmacm/exports.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	txt, err := ReadExportSet(f)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	sys.Format(&a, "")
	txt.Format(&b, "")
	if a.String() != b.String() {
		t.Errorf("librdmacm/exports.txt differs from %s; regenerate it:\n  go run ./libibverbs/gen exports -lib librdmacm %s > librdmacm/exports.txt\n%s",
			lib, lib, lineDiff(b.String(), a.String()))
	}
}
