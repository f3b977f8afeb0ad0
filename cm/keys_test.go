package cm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// TestTextKeysListed: every Key constant of keys.go is in TextKeys, so
// ctext generates it.
func TestTextKeysListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := TextKeys()
	ast.Inspect(f, func(x ast.Node) bool {
		if v, ok := x.(*ast.ValueSpec); ok && len(v.Values) == 1 {
			if lit, ok := v.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if k := strings.Trim(lit.Value, `"`); !slices.Contains(keys, k) {
					t.Errorf("%s = %s is not in TextKeys", v.Names[0].Name, lit.Value)
				}
			}
		}
		return true
	})
}

// TestTextKeysParsed: every key of the CM's text that ctext generates is
// one a parser of the CM takes (no dead key): a ctl command, cm/new, an
// event record or cm/I/attr refuses a line with it for another reason than
// an unknown key, or takes it.
func TestTextKeysParsed(t *testing.T) {
	s := newWorld(t).localSide()
	cmds := []string{"bind", "resolve_addr", "resolve_route", "listen", "connect", "establish", "accept",
		"reject", "disconnect", "notify", "set_option", "migrate"}
	record := func(line string) error {
		var r [RecordSize]byte
		for i := range r {
			r[i] = ' '
		}
		copy(r[:], line)
		r[RecordSize-1] = '\n'
		_, err := ParseRecord(r[:])
		return err
	}
	parsers := []func(string) error{
		func(s string) error { _, _, _, err := ParseNew(s); return err },
		func(s string) error { return record("event=established id=1 status=0 " + s) },
		func(s string) error { _, err := ParseAttr(s); return err },
	}
	for _, c := range cmds {
		parsers = append(parsers, func(line string) error { return s.newID(PSTCP).Do(c + " " + line) })
	}
	for _, k := range TextKeys() {
		taken := false
		for _, p := range parsers {
			if err := p(k + "=1"); err == nil || !strings.Contains(err.Error(), "unknown key") {
				taken = true
				break
			}
		}
		if !taken {
			t.Errorf("key %s: no parser of the CM takes it", k)
		}
	}
	// What the CM prints, ParseAttr reads: a listener and a dialled id.
	for _, id := range []*ID{s.listen(PSTCP, 7471, ""), s.dial(PSTCP, "127.0.0.1", 7471)} {
		if _, err := ParseAttr(id.Attr()); err != nil {
			t.Errorf("ParseAttr(%q): %v", id.Attr(), err)
		}
	}
	for i, p := range parsers[:3] {
		if err := p("no_such_key=1"); err == nil || !strings.Contains(err.Error(), "unknown key") {
			t.Errorf("parser %d: no_such_key=1: %v, want an unknown key error", i, err)
		}
	}
}
