package qp_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"rdmafs/qp"
	"rdmafs/qp/internal/ctext"
)

// cLiteral is one string literal of a C source and the line it starts on.
type cLiteral struct {
	line int
	text string
}

// cLiterals returns the string literals of a C source, skipping comments
// and character constants (enough of C's lexer for the libraries' code).
func cLiterals(src string) []cLiteral {
	var out []cLiteral
	line := 1
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '\n':
			line++
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			line++
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return out
			}
			line += strings.Count(src[i:i+2+end], "\n")
			i += end + 3
		case c == '"' || c == '\'':
			start, j := line, i+1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' {
					j++
				}
				if j < len(src) && src[j] == '\n' {
					line++
				}
			}
			if c == '"' {
				out = append(out, cLiteral{start, src[i+1 : min(j, len(src))]})
			}
			i = j
		}
	}
	return out
}

// keyEq is a word followed by "=" in a literal: a key spelled by hand.
var keyEq = regexp.MustCompile(`(^|[^A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=`)

// handSpelled lists file:line: key= for each key of keys a C source of
// dirs spells by hand in a string literal instead of with RDMAFS_KEQ.
func handSpelled(t *testing.T, keys []string, dirs ...string) []string {
	var bad []string
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.c"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no C sources in %s (%v)", dir, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, lit := range cLiterals(string(src)) {
				for _, m := range keyEq.FindAllStringSubmatch(lit.text, -1) {
					if slices.Contains(keys, m[2]) {
						bad = append(bad, fmt.Sprintf("%s:%d: %s= (use RDMAFS_KEQ(%s))", f, lit.line, m[2], strings.ToUpper(m[2])))
					}
				}
			}
		}
	}
	return bad
}

// TestCSourcesUseKeys: no C source of libibverbs or librdmacm spells a key
// of the daemon's lines by hand ("pd=%u"); each writes RDMAFS_KEQ(PD) "%u"
// from rdmafs-text.h, so a key renamed in qp or cm renames in C at the next
// go generate, or fails to compile.
func TestCSourcesUseKeys(t *testing.T) {
	for _, b := range handSpelled(t, ctext.Keys(), "../libibverbs", "../librdmacm") {
		t.Error(b)
	}
}

// TestCSourcesUseKeysCatches: the scan finds a key spelled by hand, and
// not one in a comment, a macro's name or a word that is not a key.
func TestCSourcesUseKeysCatches(t *testing.T) {
	dir := t.TempDir()
	src := `/* pd=1 in a comment */
// length=2 in a comment
static const char c = '"';
int f(char *b) {
	snprintf(b, 9, RDMAFS_KEQ(PD) "%u", 1);
	snprintf(b, 9, "nokey=%u"
		     " iova=%u", 1, 2);
	return c;
}
`
	if err := os.WriteFile(filepath.Join(dir, "x.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := handSpelled(t, ctext.Keys(), dir)
	want := []string{filepath.Join(dir, "x.c") + ":7: iova= (use RDMAFS_KEQ(IOVA))"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestTextKeysListed: every Key constant of textkeys.go is in TextKeys, so
// ctext generates it.
func TestTextKeysListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "textkeys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := qp.TextKeys()
	n := 0
	ast.Inspect(f, func(x ast.Node) bool {
		if v, ok := x.(*ast.ValueSpec); ok && len(v.Values) == 1 {
			if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				n++
				if k := strings.Trim(lit.Value, `"`); !slices.Contains(keys, k) {
					t.Errorf("%s = %s is not in TextKeys", v.Names[0].Name, lit.Value)
				}
			}
		}
		return true
	})
	if n != len(keys) || n == 0 {
		t.Errorf("%d constants, %d TextKeys", n, len(keys))
	}
}

// TestTextKeysParsed: every key qp generates is one some parser of qp
// takes (no dead key): a line with it is refused for another reason than
// an unknown key, or taken.
func TestTextKeysParsed(t *testing.T) {
	parsers := []func(string) error{
		func(s string) error { _, err := qp.ParseCreateMR(s); return err },
		func(s string) error { _, err := qp.ParseReregMR(s); return err },
		func(s string) error { _, err := qp.ParseCreateMW(s); return err },
		func(s string) error { _, err := qp.ParseCreateCQ(s); return err },
		func(s string) error { _, err := qp.ParseCreateSRQ(s); return err },
		func(s string) error { _, err := qp.ParseModifySRQ(s); return err },
		func(s string) error { _, err := qp.ParseOpenXRCD(s); return err },
		func(s string) error { _, err := qp.ParseCreateAH(s); return err },
		func(s string) error { _, err := qp.ParseCreateQP(s); return err },
		func(s string) error { _, _, err := qp.ParseModify(s); return err },
		func(s string) error { _, _, err := qp.ParseAttrFile(s); return err },
		func(s string) error { _, err := qp.ParsePDAttr(s); return err },
		func(s string) error { _, err := qp.ParseMRAttr(s); return err },
		func(s string) error { _, err := qp.ParseMWAttr(s); return err },
		func(s string) error { _, err := qp.ParseCQAttr(s); return err },
		func(s string) error { _, err := qp.ParseSRQAttr(s); return err },
		func(s string) error { _, err := qp.ParseXRCDAttr(s); return err },
		func(s string) error { _, err := qp.ParseAHAttr(s); return err },
		func(s string) error { _, err := qp.ParseDeviceFile(s); return err },
		func(s string) error { _, err := qp.ParsePortAttr(s); return err },
		func(s string) error { _, err := qp.ParseClockFile(s); return err },
		// The events file: the event's own key, then the object's.
		func(s string) error {
			if strings.HasPrefix(s, qp.KeyEvent+"=") {
				_, _, _, err := qp.ParseEvent(qp.KeyEvent + "=comm_est qp=1")
				return err
			}
			_, _, _, err := qp.ParseEvent(qp.KeyEvent + "=comm_est " + s)
			return err
		},
	}
	for _, k := range qp.TextKeys() {
		taken := false
		for _, p := range parsers {
			err := p(k + "=1")
			if err == nil || !strings.Contains(err.Error(), "unknown key") {
				taken = true
				break
			}
		}
		if !taken {
			t.Errorf("key %s: no parser of qp takes it", k)
		}
	}
	// A key no parser knows is reported as such by each.
	for i, p := range parsers {
		if err := p("no_such_key=1"); err == nil || !strings.Contains(err.Error(), "unknown key") {
			t.Errorf("parser %d: no_such_key=1: %v, want an unknown key error", i, err)
		}
	}
}
