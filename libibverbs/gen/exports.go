package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Symbol is one dynamic symbol a library exports.
type Symbol struct {
	Name    string
	Version string // the version node it is bound to
	// Hidden: a non-default version (name@VER rather than name@@VER), which
	// only a program linked against that old version binds to. objdump -T
	// prints its version in parentheses.
	Hidden bool
	Object bool   // data (objdump "DO") rather than a function ("DF")
	Size   uint64 // bytes, for objects
}

// Key is the symbol's identity in an export set: a name can be exported
// once per version.
func (s Symbol) Key() string { return s.Name + "@" + s.Version }

// String is the symbol's line in exports.txt.
func (s Symbol) String() string {
	v := s.Version
	if s.Hidden {
		v = "(" + v + ")"
	}
	if s.Object {
		return fmt.Sprintf("object %s %s %d", v, s.Name, s.Size)
	}
	return fmt.Sprintf("func %s %s", v, s.Name)
}

// ExportSet is what a versioned shared library exports: its version nodes
// and the symbols bound to them.
type ExportSet struct {
	Nodes   []string // in inheritance order (see SortNodes)
	Symbols []Symbol // sorted by version node, then name
}

// Format writes the set in the form of exports.txt: one "node NAME" line
// per version node, then one line per symbol, "func VERSION NAME" or
// "object VERSION NAME SIZE", a hidden version in parentheses.
func (e *ExportSet) Format(w io.Writer, comment string) error {
	bw := bufio.NewWriter(w)
	for _, l := range strings.Split(strings.TrimRight(comment, "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(bw, "# %s\n", l)
		}
	}
	for _, n := range e.Nodes {
		fmt.Fprintf(bw, "node %s\n", n)
	}
	for _, s := range e.Symbols {
		fmt.Fprintln(bw, s)
	}
	return bw.Flush()
}

// ReadExportSet reads an export set from the output of objdump -T or from
// the exports.txt form (Format); each line is one or the other. Symbols the
// library imports (*UND*) are skipped. A flag this program would not know
// how to reproduce (a weak or unique symbol, a TLS or indirect function) is
// an error, so the generated library never silently differs.
func ReadExportSet(r io.Reader) (*ExportSet, error) {
	e := &ExportSet{}
	nodes := map[string]bool{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(line, "#") || isObjdumpChatter(line) {
			continue
		}
		var s Symbol
		var node string
		var err error
		switch f[0] {
		case "node", "func", "object":
			s, node, err = parseExportLine(f)
		default:
			s, node, err = parseObjdumpLine(f)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %q: %w", ln, line, err)
		}
		if node != "" {
			nodes[node] = true
			continue
		}
		if s.Name == "" {
			continue // an import
		}
		if seen[s.Key()] {
			return nil, fmt.Errorf("line %d: %s exported twice", ln, s.Key())
		}
		seen[s.Key()] = true
		e.Symbols = append(e.Symbols, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, s := range e.Symbols {
		if !nodes[s.Version] {
			return nil, fmt.Errorf("%s: version node %s is not defined", s.Name, s.Version)
		}
	}
	for n := range nodes {
		e.Nodes = append(e.Nodes, n)
	}
	e.Nodes = SortNodes(e.Nodes)
	order := map[string]int{}
	for i, n := range e.Nodes {
		order[n] = i
	}
	slices.SortFunc(e.Symbols, func(a, b Symbol) int {
		return cmp.Or(cmp.Compare(order[a.Version], order[b.Version]),
			cmp.Compare(a.Name, b.Name), boolCmp(a.Hidden, b.Hidden))
	})
	return e, nil
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func isObjdumpChatter(line string) bool {
	return strings.HasPrefix(line, "DYNAMIC SYMBOL TABLE") ||
		strings.Contains(line, "file format ")
}

func parseExportLine(f []string) (s Symbol, node string, err error) {
	switch {
	case f[0] == "node" && len(f) == 2:
		return Symbol{}, f[1], nil
	case f[0] == "func" && len(f) == 3:
		s = Symbol{Name: f[2]}
	case f[0] == "object" && len(f) == 4:
		s = Symbol{Name: f[2], Object: true}
		if s.Size, err = strconv.ParseUint(f[3], 10, 64); err != nil {
			return s, "", err
		}
	default:
		return s, "", fmt.Errorf("want node NAME, func VERSION NAME or object VERSION NAME SIZE")
	}
	s.Version, s.Hidden = strings.CutPrefix(f[1], "(")
	if s.Hidden {
		s.Version, s.Hidden = strings.CutSuffix(s.Version, ")")
		if !s.Hidden {
			return s, "", fmt.Errorf("unbalanced parenthesis in %q", f[1])
		}
	}
	return s, "", nil
}

// parseObjdumpLine reads one line of objdump -T's table:
//
//	ADDRESS FLAGS SECTION SIZE [VERSION] NAME
//
// where FLAGS is a 7-column field with blanks in it ("g    DF") and
// VERSION is a node, a node in parentheses (hidden) or "Base". A version
// node itself appears as an *ABS* object whose name is the node's.
func parseObjdumpLine(f []string) (s Symbol, node string, err error) {
	sec := slices.IndexFunc(f, func(x string) bool {
		return strings.HasPrefix(x, ".") || strings.HasPrefix(x, "*")
	})
	if sec < 2 || len(f) < sec+3 {
		return s, "", fmt.Errorf("not a line of objdump -T")
	}
	flags := strings.Join(f[1:sec], "")
	section := f[sec]
	size, err := strconv.ParseUint(f[sec+1], 16, 64)
	if err != nil {
		return s, "", fmt.Errorf("size: %w", err)
	}
	rest := f[sec+2:]
	s.Name = rest[len(rest)-1]
	if len(rest) == 2 {
		s.Version, s.Hidden = strings.CutPrefix(rest[0], "(")
		if s.Hidden {
			s.Version = strings.TrimSuffix(s.Version, ")")
		}
	}
	if section == "*UND*" {
		return Symbol{}, "", nil
	}
	if section == "*ABS*" && s.Name == s.Version && size == 0 {
		return Symbol{}, s.Name, nil
	}
	if s.Version == "" || s.Version == "Base" {
		return s, "", fmt.Errorf("%s is exported without a version node", s.Name)
	}
	for _, c := range flags {
		switch c {
		case 'g', 'D': // global; a dynamic symbol
		case 'F':
		case 'O':
			s.Object = true
		default:
			return s, "", fmt.Errorf("flag %q of %s: only plain global functions and objects can be generated", c, s.Name)
		}
	}
	if !strings.ContainsAny(flags, "g") || !strings.ContainsAny(flags, "FO") {
		return s, "", fmt.Errorf("%s: flags %q: want a global function or object", s.Name, flags)
	}
	if s.Object {
		s.Size = size
	}
	return s, "", nil
}

// Objdump runs objdump -T on lib and reads its export set.
func Objdump(objdump, lib string) (*ExportSet, error) {
	out, err := exec.Command(objdump, "-T", lib).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("%s -T %s: %v: %s", objdump, lib, err, ee.Stderr)
		}
		return nil, fmt.Errorf("%s -T %s: %v", objdump, lib, err)
	}
	e, err := ReadExportSet(strings.NewReader(string(out)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", lib, err)
	}
	return e, nil
}

var chainNode = regexp.MustCompile(`^(.*)_([0-9]+)\.([0-9]+)$`)

// SortNodes orders version nodes for a version script. Nodes named
// PREFIX_MAJOR.MINOR form one chain per prefix in numeric order (1.0, 1.1,
// 1.5, ..., 1.14), each inheriting from the one before, as libibverbs'
// public nodes do; any other node (IBVERBS_PRIVATE_34) stands alone and
// comes after the chains.
func SortNodes(nodes []string) []string {
	type key struct {
		chained      bool
		prefix       string
		major, minor int
		name         string
	}
	keys := make([]key, 0, len(nodes))
	for _, n := range nodes {
		k := key{name: n}
		if m := chainNode.FindStringSubmatch(n); m != nil {
			k.chained, k.prefix = true, m[1]
			k.major, _ = strconv.Atoi(m[2])
			k.minor, _ = strconv.Atoi(m[3])
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(boolCmp(!a.chained, !b.chained), cmp.Compare(a.prefix, b.prefix),
			cmp.Compare(a.major, b.major), cmp.Compare(a.minor, b.minor), cmp.Compare(a.name, b.name))
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.name
	}
	return out
}

// Parent is the node that node inherits from in SortNodes' order, or "".
func Parent(sorted []string, node string) string {
	m := chainNode.FindStringSubmatch(node)
	if m == nil {
		return ""
	}
	i := slices.Index(sorted, node)
	if i <= 0 {
		return ""
	}
	if p := chainNode.FindStringSubmatch(sorted[i-1]); p != nil && p[1] == m[1] {
		return sorted[i-1]
	}
	return ""
}

// Defined is what the implementation objects define, from nm
// --defined-only: the plain global names, and the explicitly versioned
// ones (name@VER from a .symver) by their Key.
type Defined struct {
	Names     map[string]bool
	Versioned map[string]bool // "name@VER", default (@@) or not
}

// ReadDefined reads nm --defined-only output: "ADDRESS TYPE NAME" lines,
// "FILE:" headers and blank lines. Local symbols (lower-case types) are not
// the objects' to export and are skipped.
func ReadDefined(r io.Reader) (*Defined, error) {
	d := &Defined{Names: map[string]bool{}, Versioned: map[string]bool{}}
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || (len(f) == 1 && strings.HasSuffix(f[0], ":")) {
			continue
		}
		if len(f) != 3 || len(f[1]) != 1 {
			return nil, fmt.Errorf("nm line %d: %q: want ADDRESS TYPE NAME", ln, sc.Text())
		}
		t, name := f[1][0], f[2]
		if t < 'A' || t > 'Z' || t == 'U' {
			continue
		}
		if base, ver, ok := strings.Cut(name, "@"); ok {
			d.Versioned[base+"@"+strings.TrimPrefix(ver, "@")] = true
			continue
		}
		d.Names[name] = true
	}
	return d, sc.Err()
}
