// Package lockcheck is an analyzer for the lock annotations of rdmafs:
// a struct field that names its lock is touched only where that lock is
// held. It runs in scripts/test.sh (cmd/lockcheck) over the packages that
// carry annotations.
//
// # Annotations
//
// A field's comment (above it or at the end of its line) says which lock
// guards it:
//
//	runq []*QP // lockcheck:guarded mu
//	state qpState // lockcheck:guarded dev.mu
//
// The path is read from the field's own struct: mu is a field beside it,
// dev.mu the field mu of the struct dev points to. A path may also start
// at a type of the package (Device.mu), for a struct that holds no way to
// its lock. Several guarded directives on one field mean all those locks.
// The last field of the path must be a lock: a type with a Lock method.
//
// A field written with two locks held and read with either names both:
//
//	ring *ring.Ring // lockcheck:guarded dev.mu|pollMu
//
// A write needs both, a read one of them. (A …Locked function that reads
// it without either asks its callers for the first.)
//
// A function whose name ends in Locked runs with its caller's locks: it
// may touch any guarded field, and what it touches without taking the
// lock itself (and what the …Locked functions it calls need) becomes what
// each of its callers must hold. A call of a …Locked function is checked
// like a touch of the fields it needs. A function whose name cannot say
// so (a small accessor called everywhere) has lockcheck:locked in its doc
// comment instead, and is checked the same way.
//
// An exception is written on the line of the touch or the call, or on the
// comment lines just above it, with its reason:
//
//	d.closed = true // lockcheck:ok construction, d not yet shared
//
// In a function's doc comment it exempts the whole function. An exception
// without a reason, or one that exempts nothing, is reported too, so the
// exceptions stay true as the code changes.
//
// A method that takes or lets go of a lock under another name than
// Lock/RLock/TryLock/Unlock/RUnlock says so in its doc comment with
// lockcheck:acquire or lockcheck:release. The lock is the field the
// method is called on, or the path after the word, read from the
// method's receiver (lockcheck:acquire takeMu: a wrapper that takes its
// object's takeMu). To the checker it is taken, even where the wrapper
// takes it only sometimes (an SRQ's takeMu, with several engines only).
//
// A lock method may cover other locks: lockcheck:covers T.f U.g in its
// doc comment says that whoever holds what it takes may touch what T.f
// and U.g guard, and its release lets go of them too. The device's whole
// lock does so for the locks its engines' turns take among themselves:
// a verb holding all of Device.mu excludes every turn.
//
// # What it does not see (the approximations)
//
//   - A lock is known by its field (the struct type and field that declare
//     it). Whether it is the right object's is checked only for a lock
//     beside its field (inbox and inMu), and only where the function
//     names both objects by the same variables and fields (q.inMu.Lock()
//     then peer.inbox is reported; a variable defined as d := q.dev
//     stands for q.dev, one assigned again for nothing known). A lock
//     reached through another struct (dev.mu, Device.mu) is any
//     object's: the device's objects reach their Device.mu through
//     different paths, d.mu and q.dev.mu, and must match. Across a call
//     of a …Locked function only the lock's field is checked.
//   - The flow is the function's syntax in order: Lock adds the lock,
//     Unlock removes it, a deferred Unlock holds it to the end. After an
//     if, switch, select or loop, a lock is held if it is held at the end
//     of every branch that falls through; a branch that returns, panics,
//     breaks, continues or jumps does not count. A lock whose release is
//     deferred is held after the branch that took it, even if another
//     branch did not (if several { mu.Lock(); defer mu.Unlock() }: the
//     code takes the lock for the rest of the function when it needs it,
//     which the checker cannot tell from the condition). TryLock holds its lock in
//     the branch where it succeeded (an if or a case of a switch without
//     a tag).
//   - A function literal runs with the locks held where it is written
//     (a callback, a deferred function), except after go, where it holds
//     none; a literal inside a …Locked function is part of it.
//   - A variable that the function made itself (v := &T{…}, new(T), T{…},
//     var v T) is not yet shared: v.f is free until the function ends.
//   - RLock allows reads; a write (assignment, ++, --) needs Lock.
//   - Handing a field's address to a call (g(&x.f)) is not a touch: what
//     the callee does through the pointer is not followed (the device's
//     tables are handed by address to lookup and destroy, which take the
//     lock). Any other &x.f is a read of x.f.
//   - Atomics are not covered: a field of an atomic type needs no
//     annotation, and one should not carry any.
//   - Each package is checked on its own: the annotations, the …Locked
//     summaries and the exceptions are the package's. A …Locked function
//     called from another package is not checked there.
//   - Calls through interfaces and function values are not followed, and a
//     function that is not …Locked is assumed to need no lock of its
//     caller's.
package lockcheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Analyzer is the lock check.
var Analyzer = &analysis.Analyzer{
	Name: "lockcheck",
	Doc:  "check that fields annotated 'lockcheck:guarded LOCK' are touched only with LOCK held (see package lockcheck)",
	Run:  run,
}

var guardedRE = regexp.MustCompile(`lockcheck:guarded\s+([A-Za-z_][A-Za-z0-9_.|]*)`)

const (
	okWord      = "lockcheck:ok"
	coversWord  = "lockcheck:covers"
	lockedWord  = "lockcheck:locked"
	acquireWord = "lockcheck:acquire"
	releaseWord = "lockcheck:release"
)

// lockKey names a lock by the struct type and field that declare it
// ("rdmafs/device.engine.mu").
type lockKey string

// short is the key as a message shows it: engine.mu.
func (k lockKey) short() string {
	s := string(k)
	if i := strings.LastIndex(s, "/"); i >= 0 {
		s = s[i+1:]
	}
	if i := strings.Index(s, "."); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// lockSet maps each lock held to whether it is held exclusively (Lock,
// not RLock). As a requirement, the value says a write needs it
// exclusively.
type lockSet map[lockKey]bool

func (s lockSet) clone() lockSet {
	c := make(lockSet, len(s))
	for k, v := range s {
		c[k] = v
	}
	return c
}

// meet is what is held after two paths join: the locks both hold,
// exclusively only where both do, and a pinned lock either holds.
func (f *fn) meet(a, b lockSet) lockSet {
	m := lockSet{}
	for k, v := range a {
		if w, ok := b[k]; ok {
			m[k] = v && w
		} else if f.pinned[k] {
			m[k] = v
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok && f.pinned[k] {
			m[k] = w
		}
	}
	return m
}

// exception is one lockcheck:ok comment.
type exception struct {
	pos    token.Pos
	reason string
	used   bool
}

type checker struct {
	pass *analysis.Pass
	// guards are the locks of each annotated field: each guard one lock,
	// or the locks of which a read needs one and a write all.
	guards map[*types.Var][][]lockKey
	// sibling maps a field guarded by a lock of its own struct to that
	// lock: the one held must be the same object's.
	sibling map[*types.Var]lockKey
	// acquire and release are the methods with those directives, and
	// acquireAt and releaseAt the locks of those that name theirs.
	acquire, release     map[*types.Func]bool
	acquireAt, releaseAt map[*types.Func]lockKey
	// covers are the locks a lock method takes or lets go of with its own.
	covers map[*types.Func][]lockKey
	// needs is what each …Locked function's callers must hold.
	needs map[*types.Func]lockSet
	// locked are the functions marked lockcheck:locked.
	locked map[*ast.FuncDecl]bool
	// lineOK maps file and line to the exception that covers it; funcOK
	// the functions whose doc comment has one.
	lineOK map[string]map[int]*exception
	funcOK map[*ast.FuncDecl]*exception
	all    []*exception
	report bool
}

func run(pass *analysis.Pass) (any, error) {
	c := &checker{
		pass:      pass,
		guards:    map[*types.Var][][]lockKey{},
		sibling:   map[*types.Var]lockKey{},
		acquire:   map[*types.Func]bool{},
		release:   map[*types.Func]bool{},
		acquireAt: map[*types.Func]lockKey{},
		covers:    map[*types.Func][]lockKey{},
		releaseAt: map[*types.Func]lockKey{},
		needs:     map[*types.Func]lockSet{},
		locked:    map[*ast.FuncDecl]bool{},
		lineOK:    map[string]map[int]*exception{},
		funcOK:    map[*ast.FuncDecl]*exception{},
	}
	c.collect()
	var decls []*ast.FuncDecl
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				decls = append(decls, fd)
			}
		}
	}
	// What the …Locked functions need, to a fixed point: a set only grows
	// when a callee's grows, and the locks are finitely many.
	for changed := true; changed; {
		changed = false
		for _, fd := range decls {
			if !c.isLocked(fd) {
				continue
			}
			obj := c.funcObj(fd)
			got := c.check(fd)
			if !sameSet(got, c.needs[obj]) {
				c.needs[obj] = got
				changed = true
			}
		}
	}
	c.report = true
	for _, fd := range decls {
		c.check(fd)
	}
	for _, e := range c.all {
		if !e.used && e.reason != "" {
			pass.Reportf(e.pos, "%s exempts nothing here: remove it", okWord)
		}
	}
	return nil, nil
}

// isLocked reports whether fd runs with its caller's locks: a name
// ending in Locked, or lockcheck:locked.
func (c *checker) isLocked(fd *ast.FuncDecl) bool {
	name := fd.Name.Name
	return c.locked[fd] || len(name) > len("Locked") && strings.HasSuffix(name, "Locked")
}

func sameSet(a, b lockSet) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

func (c *checker) funcObj(fd *ast.FuncDecl) *types.Func {
	f, _ := c.pass.TypesInfo.Defs[fd.Name].(*types.Func)
	return f
}

// collect reads the package's annotations and exceptions.
func (c *checker) collect() {
	pass := c.pass
	for _, f := range pass.Files {
		docs := map[*ast.CommentGroup]*ast.FuncDecl{}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Doc == nil {
					continue
				}
				docs[d.Doc] = d
				if fn := c.funcObj(d); fn != nil {
					c.acquire[fn] = c.lockDirective(d, fn, acquireWord, c.acquireAt)
					c.release[fn] = c.lockDirective(d, fn, releaseWord, c.releaseAt)
					c.coverDirective(d, fn)
					c.locked[d] = hasDirective(d.Doc, lockedWord)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						c.collectStruct(ts)
					}
				}
			}
		}
		for _, g := range f.Comments {
			c.collectExceptions(g, docs[g])
		}
	}
}

// collectExceptions reads the lockcheck:ok comments of a group: a comment
// line that starts with it, the rest of the line its reason. It covers
// the lines of the group and the line after it, or the whole function
// whose doc comment it is in.
func (c *checker) collectExceptions(g *ast.CommentGroup, fd *ast.FuncDecl) {
	pass := c.pass
	for _, cm := range g.List {
		text := strings.TrimSpace(strings.TrimPrefix(cm.Text, "//"))
		rest, ok := strings.CutPrefix(text, okWord)
		if !ok {
			continue
		}
		// The reason ends where another comment in the line starts.
		rest, _, _ = strings.Cut(rest, "//")
		e := &exception{pos: cm.Pos(), reason: strings.TrimSpace(strings.TrimLeft(rest, ":,"))}
		if e.reason == "" {
			pass.Reportf(e.pos, "%s needs its reason: why is the lock not needed here?", okWord)
			continue
		}
		c.all = append(c.all, e)
		if fd != nil {
			c.funcOK[fd] = e
			continue
		}
		start, end := pass.Fset.Position(g.Pos()), pass.Fset.Position(g.End())
		lines := c.lineOK[start.Filename]
		if lines == nil {
			lines = map[int]*exception{}
			c.lineOK[start.Filename] = lines
		}
		for l := start.Line; l <= end.Line+1; l++ {
			lines[l] = e
		}
	}
}

// hasDirective reports whether a line of g starts with word (a mention
// within a sentence is not the directive).
func hasDirective(g *ast.CommentGroup, word string) bool {
	ok, _ := directive(g, word)
	return ok
}

// directive reports whether a line of g starts with word, and the word
// after it on that line, if any.
func directive(g *ast.CommentGroup, word string) (bool, string) {
	for _, c := range g.List {
		rest, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(c.Text, "//")), word)
		if !ok {
			continue
		}
		if f := strings.Fields(rest); len(f) > 0 {
			return true, f[0]
		}
		return true, ""
	}
	return false, ""
}

// coverDirective reads the locks a lock method covers, each path read
// from its receiver (or from a type of the package).
func (c *checker) coverDirective(fd *ast.FuncDecl, fn *types.Func) {
	recv := fn.Type().(*types.Signature).Recv()
	for _, cm := range fd.Doc.List {
		rest, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(cm.Text, "//")), coversWord)
		if !ok {
			continue
		}
		if recv == nil {
			c.pass.Reportf(fd.Pos(), "%s: only a lock method covers locks", coversWord)
			return
		}
		for _, path := range strings.Fields(rest) {
			key, err := c.resolve(recv.Type(), path)
			if err != "" {
				c.pass.Reportf(fd.Pos(), "%s %s: %s", coversWord, path, err)
				continue
			}
			c.covers[fn] = append(c.covers[fn], key)
		}
	}
}

// lockDirective reads an acquire or release directive of fd: whether it
// has one, and in at the lock it names, read from the receiver.
func (c *checker) lockDirective(fd *ast.FuncDecl, fn *types.Func, word string, at map[*types.Func]lockKey) bool {
	ok, path := directive(fd.Doc, word)
	if !ok || path == "" {
		return ok
	}
	recv := fn.Type().(*types.Signature).Recv()
	if recv == nil {
		c.pass.Reportf(fd.Pos(), "%s %s: only a method names its lock", word, path)
		return false
	}
	key, err := c.resolve(recv.Type(), path)
	if err != "" {
		c.pass.Reportf(fd.Pos(), "%s %s: %s", word, path, err)
		return false
	}
	at[fn] = key
	return true
}

// rawText is a comment group's text with its directives kept (unlike
// CommentGroup.Text, which drops //word:word lines).
func rawText(g *ast.CommentGroup) string {
	var b strings.Builder
	for _, c := range g.List {
		b.WriteString(c.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// collectStruct reads the guarded directives of a named struct's fields.
func (c *checker) collectStruct(ts *ast.TypeSpec) {
	st, ok := ts.Type.(*ast.StructType)
	if !ok {
		return
	}
	tn, ok := c.pass.TypesInfo.Defs[ts.Name].(*types.TypeName)
	if !ok {
		return
	}
	for _, field := range st.Fields.List {
		var text string
		for _, g := range []*ast.CommentGroup{field.Doc, field.Comment} {
			if g != nil {
				text += rawText(g)
			}
		}
	guards:
		for _, m := range guardedRE.FindAllStringSubmatch(text, -1) {
			var guard []lockKey
			for _, path := range strings.Split(m[1], "|") {
				key, err := c.resolve(tn.Type(), path)
				if err != "" {
					c.pass.Reportf(field.Pos(), "lockcheck:guarded %s: %s", path, err)
					continue guards
				}
				guard = append(guard, key)
			}
			// A lock beside the field guards its own object's: the
			// instance is checked too.
			sibling := !strings.ContainsAny(m[1], ".|") && guard[0] == ownKey(tn, m[1])
			for _, name := range field.Names {
				if v, ok := c.pass.TypesInfo.Defs[name].(*types.Var); ok {
					c.guards[v] = append(c.guards[v], guard)
					if sibling {
						c.sibling[v] = guard[0]
					}
				}
			}
		}
	}
}

// ownKey is the key of tn's own field name (declared in tn, not
// promoted).
func ownKey(tn *types.TypeName, name string) lockKey {
	pkg := ""
	if tn.Pkg() != nil {
		pkg = tn.Pkg().Path() + "."
	}
	return lockKey(pkg + tn.Name() + "." + name)
}

// resolve follows a lock's path from the struct type t to the field that
// declares the lock.
func (c *checker) resolve(t types.Type, path string) (lockKey, string) {
	var key lockKey
	names := strings.Split(path, ".")
	if obj, _, _ := types.LookupFieldOrMethod(t, true, c.pass.Pkg, names[0]); obj == nil && len(names) > 1 {
		if tn, ok := c.pass.Pkg.Scope().Lookup(names[0]).(*types.TypeName); ok {
			t, names = tn.Type(), names[1:]
		}
	}
	for _, name := range names {
		obj, index, _ := types.LookupFieldOrMethod(t, true, c.pass.Pkg, name)
		v, ok := obj.(*types.Var)
		if !ok || !v.IsField() {
			return "", "no field " + name + " in " + t.String()
		}
		key = fieldKey(t, index)
		if key == "" {
			return "", name + " is not a field of a named struct"
		}
		t = v.Type()
	}
	if m, _, _ := types.LookupFieldOrMethod(t, true, c.pass.Pkg, "Lock"); m == nil {
		return "", "not a lock (" + t.String() + " has no Lock method)"
	}
	return key, ""
}

// fieldKey names the field that index reaches from t (through embedded
// fields) by the named struct that declares it.
func fieldKey(t types.Type, index []int) lockKey {
	var owner *types.Named
	var f *types.Var
	for _, i := range index {
		t = types.Unalias(t)
		if p, ok := t.Underlying().(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		n, ok := t.(*types.Named)
		if !ok {
			return ""
		}
		st, ok := n.Underlying().(*types.Struct)
		if !ok {
			return ""
		}
		owner, f = n.Origin(), st.Field(i)
		t = f.Type()
	}
	if owner == nil {
		return ""
	}
	o := owner.Obj()
	pkg := ""
	if o.Pkg() != nil {
		pkg = o.Pkg().Path() + "."
	}
	return lockKey(pkg + o.Name() + "." + f.Name())
}

// fn is the walk of one function body (or of a literal within one).
type fn struct {
	c      *checker
	locked bool                // a …Locked function: what is missing goes to need
	need   lockSet             // what a …Locked function's callers must hold
	okAll  *exception          // the function's own exception, if any
	fresh  map[*types.Var]bool // variables the function made itself
	// pinned are the locks whose release is deferred: held to the end.
	pinned map[lockKey]bool
	// alias maps a variable defined from a path (d := q.dev) to it.
	alias map[*types.Var]string
}

// check walks a function declaration and returns what its callers must
// hold (…Locked functions only).
func (c *checker) check(fd *ast.FuncDecl) lockSet {
	f := &fn{c: c, locked: c.isLocked(fd), need: lockSet{}, okAll: c.funcOK[fd],
		fresh: map[*types.Var]bool{}, pinned: map[lockKey]bool{}, alias: map[*types.Var]string{}}
	f.block(fd.Body.List, lockSet{})
	return f.need
}

// block walks statements in order; it reports whether control cannot
// fall off the end.
func (f *fn) block(list []ast.Stmt, s lockSet) (lockSet, bool) {
	for _, st := range list {
		var term bool
		if s, term = f.stmt(st, s); term {
			return s, true
		}
	}
	return s, false
}

// join is the state after branches: the meet of those that fall through
// (ends with term false), or term if none does.
func (f *fn) join(ends []lockSet, terms []bool) (lockSet, bool) {
	var out lockSet
	for i, e := range ends {
		if terms[i] {
			continue
		}
		if out == nil {
			out = e
		} else {
			out = f.meet(out, e)
		}
	}
	if out == nil {
		return lockSet{}, true
	}
	return out, false
}

func (f *fn) stmt(st ast.Stmt, s lockSet) (lockSet, bool) {
	switch st := st.(type) {
	case *ast.ExprStmt:
		s = f.expr(st.X, s)
		if call, ok := ast.Unparen(st.X).(*ast.CallExpr); ok && f.isPanic(call) {
			return s, true
		}
	case *ast.AssignStmt:
		for _, r := range st.Rhs {
			s = f.expr(r, s)
		}
		for i, l := range st.Lhs {
			s = f.lhs(l, s)
			if id, ok := l.(*ast.Ident); ok && len(st.Lhs) == len(st.Rhs) {
				f.assign(id, st.Rhs[i])
			}
		}
	case *ast.IncDecStmt:
		s = f.lhs(st.X, s)
	case *ast.DeclStmt:
		if gd, ok := st.Decl.(*ast.GenDecl); ok {
			for _, sp := range gd.Specs {
				vs, ok := sp.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					s = f.expr(v, s)
				}
				for i, id := range vs.Names {
					if len(vs.Values) == 0 {
						f.assign(id, nil)
					} else if len(vs.Values) == len(vs.Names) {
						f.assign(id, vs.Values[i])
					}
				}
			}
		}
	case *ast.SendStmt:
		s = f.expr(st.Chan, s)
		s = f.expr(st.Value, s)
	case *ast.BlockStmt:
		return f.block(st.List, s)
	case *ast.LabeledStmt:
		return f.stmt(st.Stmt, s)
	case *ast.ReturnStmt:
		for _, r := range st.Results {
			s = f.expr(r, s)
		}
		return s, true
	case *ast.BranchStmt:
		return s, st.Tok != token.FALLTHROUGH
	case *ast.IfStmt:
		if st.Init != nil {
			s, _ = f.stmt(st.Init, s)
		}
		yes, no := f.cond(st.Cond, s)
		e1, t1 := f.block(st.Body.List, yes)
		e2, t2 := no, false
		if st.Else != nil {
			e2, t2 = f.stmt(st.Else, no)
		}
		return f.join([]lockSet{e1, e2}, []bool{t1, t2})
	case *ast.ForStmt:
		if st.Init != nil {
			s, _ = f.stmt(st.Init, s)
		}
		if st.Cond != nil {
			s = f.expr(st.Cond, s)
		}
		end, term := f.block(st.Body.List, s.clone())
		if st.Post != nil && !term {
			end, _ = f.stmt(st.Post, end)
		}
		out, _ := f.join([]lockSet{s, end}, []bool{false, term})
		return out, false
	case *ast.RangeStmt:
		s = f.expr(st.X, s)
		if st.Tok == token.ASSIGN {
			for _, l := range []ast.Expr{st.Key, st.Value} {
				if l != nil {
					s = f.lhs(l, s)
				}
			}
		}
		end, term := f.block(st.Body.List, s.clone())
		out, _ := f.join([]lockSet{s, end}, []bool{false, term})
		return out, false
	case *ast.SwitchStmt:
		if st.Init != nil {
			s, _ = f.stmt(st.Init, s)
		}
		if st.Tag != nil {
			s = f.expr(st.Tag, s)
		}
		return f.clauses(st.Body, s, st.Tag == nil)
	case *ast.TypeSwitchStmt:
		if st.Init != nil {
			s, _ = f.stmt(st.Init, s)
		}
		s, _ = f.stmt(st.Assign, s)
		return f.clauses(st.Body, s, false)
	case *ast.SelectStmt:
		return f.clauses(st.Body, s, false)
	case *ast.GoStmt:
		// The arguments are evaluated here; the call runs on a goroutine
		// that holds nothing and has no caller to pass a need to.
		// What the function made is shared with the goroutine now.
		g := &fn{c: f.c, need: lockSet{}, okAll: f.okAll, fresh: map[*types.Var]bool{},
			pinned: map[lockKey]bool{}, alias: f.alias}
		if sel, ok := ast.Unparen(st.Call.Fun).(*ast.SelectorExpr); ok {
			s = f.expr(sel.X, s) // the receiver, evaluated here too
		}
		for _, a := range st.Call.Args {
			s = f.expr(a, s)
		}
		if lit, ok := ast.Unparen(st.Call.Fun).(*ast.FuncLit); ok {
			g.block(lit.Body.List, lockSet{})
		} else {
			g.call(st.Call, lockSet{}, false)
		}
	case *ast.DeferStmt:
		// Runs at the end, with what is held here (a deferred Unlock keeps
		// the lock held to the end); its effects are not followed.
		if lit, ok := ast.Unparen(st.Call.Fun).(*ast.FuncLit); ok {
			f.block(lit.Body.List, s.clone())
		} else if key, release := f.releaseOp(st.Call); release {
			if _, held := s[key]; held {
				f.pinned[key] = true
			}
		} else if !f.isLockOp(st.Call) {
			f.expr(st.Call, s.clone())
		}
	}
	return s, false
}

// clauses walks the cases of a switch or select; with cond (a switch
// without a tag) each case's one expression is its condition.
func (f *fn) clauses(body *ast.BlockStmt, s lockSet, cond bool) (lockSet, bool) {
	var ends []lockSet
	var terms []bool
	hasDefault := false
	for _, cl := range body.List {
		in := s
		var list []ast.Stmt
		switch cl := cl.(type) {
		case *ast.CaseClause:
			hasDefault = hasDefault || cl.List == nil
			if cond && len(cl.List) == 1 {
				in, _ = f.cond(cl.List[0], s)
			} else {
				in = f.exprs(cl.List, in)
			}
			list = cl.Body
		case *ast.CommClause:
			hasDefault = hasDefault || cl.Comm == nil
			if cl.Comm != nil {
				in, _ = f.stmt(cl.Comm, in.clone())
			}
			list = cl.Body
		}
		end, term := f.block(list, in.clone())
		ends, terms = append(ends, end), append(terms, term)
	}
	if !hasDefault {
		ends, terms = append(ends, s), append(terms, false)
	}
	return f.join(ends, terms)
}

// cond walks a condition and returns what is held where it is true and
// where it is false (TryLock).
func (f *fn) cond(e ast.Expr, s lockSet) (yes, no lockSet) {
	switch x := ast.Unparen(e).(type) {
	case *ast.UnaryExpr:
		if x.Op == token.NOT {
			y, n := f.cond(x.X, s)
			return n, y
		}
	case *ast.BinaryExpr:
		switch x.Op {
		case token.LAND:
			ay, an := f.cond(x.X, s)
			by, bn := f.cond(x.Y, ay.clone())
			return by, f.meet(an, bn)
		case token.LOR:
			ay, an := f.cond(x.X, s)
			by, bn := f.cond(x.Y, an.clone())
			return f.meet(ay, by), bn
		}
	case *ast.CallExpr:
		if key, shared, ok := f.tryLock(x); ok {
			s = f.exprs(x.Args, f.expr(x.Fun, s))
			yes = s.clone()
			yes[key] = !shared
			_, _, fun := f.lockCall(x)
			for _, k := range f.c.covers[fun] {
				yes[k] = !shared
			}
			return yes, s
		}
	}
	s = f.expr(e, s)
	return s, s.clone()
}

func (f *fn) exprs(list []ast.Expr, s lockSet) lockSet {
	for _, e := range list {
		s = f.expr(e, s)
	}
	return s
}

// lhs walks an expression that is written.
func (f *fn) lhs(e ast.Expr, s lockSet) lockSet {
	switch x := e.(type) {
	case *ast.ParenExpr:
		return f.lhs(x.X, s)
	case *ast.SelectorExpr:
		s = f.expr(x.X, s)
		f.touch(x, s, true)
		return s
	case *ast.IndexExpr:
		s = f.expr(x.Index, s)
		return f.lhs(x.X, s)
	case *ast.StarExpr:
		return f.lhs(x.X, s)
	case *ast.Ident:
		return s
	}
	return f.expr(e, s)
}

// expr walks an expression that is read, in order, and returns what is
// held after it (a call may take or let go of a lock).
func (f *fn) expr(e ast.Expr, s lockSet) lockSet {
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncLit:
			f.block(x.Body.List, s.clone())
			return false
		case *ast.CallExpr:
			if sel, ok := ast.Unparen(x.Fun).(*ast.SelectorExpr); ok {
				s = f.expr(sel.X, s)
			} else {
				s = f.expr(x.Fun, s)
			}
			for _, a := range x.Args {
				// A field's address handed to the callee is no touch.
				if u, ok := ast.Unparen(a).(*ast.UnaryExpr); ok && u.Op == token.AND {
					if sel, ok := ast.Unparen(u.X).(*ast.SelectorExpr); ok {
						a = sel.X
					}
				}
				s = f.expr(a, s)
			}
			s = f.call(x, s, true)
			return false
		case *ast.SelectorExpr:
			f.touch(x, s, false)
		}
		return true
	})
	return s
}

// lockCall reports the lock a call of a lock method is about: the field
// it is called on, or the embedded lock field the method comes from.
func (f *fn) lockCall(call *ast.CallExpr) (key lockKey, name string, fun *types.Func) {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return "", "", nil
	}
	info := f.c.pass.TypesInfo
	m, ok := info.Selections[sel]
	if !ok || m.Kind() != types.MethodVal {
		return "", "", nil
	}
	fun, _ = m.Obj().(*types.Func)
	name = m.Obj().Name()
	if fun != nil {
		fun = fun.Origin()
		if k, ok := f.c.acquireAt[fun]; ok {
			return k, name, fun
		}
		if k, ok := f.c.releaseAt[fun]; ok {
			return k, name, fun
		}
	}
	if idx := m.Index(); len(idx) > 1 {
		return fieldKey(m.Recv(), idx[:len(idx)-1]), name, fun
	}
	if x, ok := ast.Unparen(sel.X).(*ast.SelectorExpr); ok {
		if xs, ok := info.Selections[x]; ok && xs.Kind() == types.FieldVal {
			return fieldKey(xs.Recv(), xs.Index()), name, fun
		}
	}
	return "", name, fun
}

func (f *fn) tryLock(call *ast.CallExpr) (lockKey, bool, bool) {
	key, name, _ := f.lockCall(call)
	if key == "" || (name != "TryLock" && name != "TryRLock") {
		return "", false, false
	}
	return key, name == "TryRLock", true
}

// instance names the object whose lock a lock call takes: key@path, or
// key@? when the path is not known (then any object's will do).
func (f *fn) instance(key lockKey, call *ast.CallExpr) lockKey {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return key + "@?"
	}
	if x, ok := ast.Unparen(sel.X).(*ast.SelectorExpr); ok {
		if p, ok := f.path(x.X); ok && x.Sel.Name == string(key[strings.LastIndex(string(key), ".")+1:]) {
			return key + "@" + lockKey(p)
		}
	}
	return key + "@?"
}

// drop lets go of instance inst of lock key; the lock is no longer held
// when no instance of it is.
func (f *fn) drop(s lockSet, key, inst lockKey) {
	delete(s, inst)
	for k := range s {
		if strings.HasPrefix(string(k), string(key)+"@") {
			return
		}
	}
	delete(s, key)
}

// path names the object an expression denotes, as far as the function
// can tell: a variable (or the path it was defined from) and the fields
// after it.
func (f *fn) path(e ast.Expr) (string, bool) {
	info := f.c.pass.TypesInfo
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		v, ok := info.Uses[x].(*types.Var)
		if !ok {
			return "", false
		}
		if p, ok := f.alias[v]; ok {
			return p, p != ""
		}
		return fmt.Sprintf("%s#%d", v.Name(), v.Pos()), true
	case *ast.SelectorExpr:
		if m, ok := info.Selections[x]; !ok || m.Kind() != types.FieldVal {
			return "", false
		}
		p, ok := f.path(x.X)
		return p + "." + x.Sel.Name, ok
	case *ast.StarExpr:
		return f.path(x.X)
	case *ast.UnaryExpr:
		if x.Op == token.AND {
			return f.path(x.X)
		}
	}
	return "", false
}

// releaseOp reports whether call lets go of a lock, and which.
func (f *fn) releaseOp(call *ast.CallExpr) (lockKey, bool) {
	key, name, fun := f.lockCall(call)
	if key == "" {
		return "", false
	}
	return key, name == "Unlock" || name == "RUnlock" || fun != nil && f.c.release[fun]
}

func (f *fn) isLockOp(call *ast.CallExpr) bool {
	_, name, fun := f.lockCall(call)
	switch name {
	case "Lock", "RLock", "Unlock", "RUnlock":
		return true
	}
	return fun != nil && (f.c.acquire[fun] || f.c.release[fun])
}

// call applies a call's effect on the locks held, and checks a …Locked
// callee's need. passOn says a missing lock may go to this function's
// own need (false on a new goroutine).
func (f *fn) call(call *ast.CallExpr, s lockSet, passOn bool) lockSet {
	key, name, fun := f.lockCall(call)
	if key != "" {
		switch {
		case name == "Lock" || fun != nil && f.c.acquire[fun]:
			s = s.clone()
			s[key] = true
			s[f.instance(key, call)] = true
			for _, k := range f.c.covers[fun] {
				s[k] = true
				s[k+"@?"] = true // every object's
			}
			return s
		case name == "RLock":
			s = s.clone()
			if !s[key] {
				s[key] = false
			}
			s[f.instance(key, call)] = true
			return s
		case name == "Unlock" || name == "RUnlock" || fun != nil && f.c.release[fun]:
			s = s.clone()
			f.drop(s, key, f.instance(key, call))
			for _, k := range f.c.covers[fun] {
				f.drop(s, k, k+"@?")
			}
			return s
		}
	}
	callee := calleeFunc(f.c.pass.TypesInfo, call)
	if callee == nil {
		return s
	}
	need := f.c.needs[callee]
	keys := sortedKeys(need)
	for _, k := range keys {
		if held, ok := s[k]; ok && (held || !need[k]) {
			continue
		}
		if f.exempt(call.Pos()) {
			continue
		}
		if f.locked && passOn {
			f.need[k] = f.need[k] || need[k]
			continue
		}
		if f.c.report {
			f.c.pass.Reportf(call.Pos(), "call of %s needs %s held (%s)", callee.Name(), k.short(), holdHint(need[k]))
		}
	}
	return s
}

func holdHint(write bool) string {
	if write {
		return "Lock, not RLock"
	}
	return "take it, call from a …Locked function, or add lockcheck:ok with a reason"
}

func sortedKeys(s lockSet) []lockKey {
	keys := make([]lockKey, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// calleeFunc is the function or method a call names statically.
func calleeFunc(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch x := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		if m, ok := info.Selections[x]; ok && m.Kind() != types.MethodVal {
			return nil
		}
		id = x.Sel
	case *ast.IndexExpr: // a generic function with its type arguments
		return calleeFunc(info, &ast.CallExpr{Fun: x.X})
	}
	if id == nil {
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	if fn != nil {
		fn = fn.Origin()
	}
	return fn
}

// touch checks one read or write of a field.
func (f *fn) touch(sel *ast.SelectorExpr, s lockSet, write bool) {
	info := f.c.pass.TypesInfo
	m, ok := info.Selections[sel]
	if !ok || m.Kind() != types.FieldVal {
		return
	}
	v, _ := m.Obj().(*types.Var)
	if v == nil {
		return
	}
	guards := f.c.guards[v.Origin()]
	if len(guards) == 0 {
		return
	}
	if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok {
		if xv, ok := info.Uses[id].(*types.Var); ok && f.fresh[xv] {
			return
		}
	}
	if k, ok := f.c.sibling[v.Origin()]; ok {
		f.sameObject(sel, k, s)
	}
	for _, g := range guards {
		for _, k := range missing(g, s, write) {
			if f.exempt(sel.Pos()) {
				continue
			}
			if f.locked {
				f.need[k] = f.need[k] || write
				continue
			}
			if !f.c.report {
				continue
			}
			verb, name := "read", k.short()
			if write {
				verb = "write"
			} else if len(g) > 1 {
				var names []string
				for _, k := range g {
					names = append(names, k.short())
				}
				name = strings.Join(names, " or ")
			}
			held := ""
			if _, ok := s[k]; ok {
				held = " exclusively (RLock is held)"
			}
			f.c.pass.Reportf(sel.Sel.Pos(), "%s of %s without %s held%s: take it, touch it in a …Locked function, or add lockcheck:ok with a reason", verb, sel.Sel.Name, name, held)
		}
	}
}

// missing is what of guard g a touch lacks: for a write each lock not
// held exclusively; for a read, when none of g is held, g's first.
func missing(g []lockKey, s lockSet, write bool) []lockKey {
	var out []lockKey
	for _, k := range g {
		held, ok := s[k]
		if !write && ok {
			return nil
		}
		if write && !(ok && held) {
			out = append(out, k)
		}
	}
	if !write {
		return g[:1]
	}
	return out
}

// sameObject reports a touch of sel with its lock held only for other
// objects: every instance of k held is known, and none is sel's.
func (f *fn) sameObject(sel *ast.SelectorExpr, k lockKey, s lockSet) {
	p, ok := f.path(sel.X)
	if !ok {
		return
	}
	if _, ok := s[k+"@"+lockKey(p)]; ok {
		return
	}
	var others []string
	for h := range s {
		rest, ok := strings.CutPrefix(string(h), string(k)+"@")
		if !ok {
			continue
		}
		if rest == "?" {
			return
		}
		others = append(others, readable(rest))
	}
	if len(others) == 0 || f.exempt(sel.Pos()) || !f.c.report {
		return
	}
	sort.Strings(others)
	f.c.pass.Reportf(sel.Sel.Pos(), "%s touched with %s held for another object (%s's), not %s's",
		sel.Sel.Name, k.short(), strings.Join(others, ", "), readable(p))
}

// readable is a path without its variables' positions.
func readable(p string) string {
	var b strings.Builder
	skip := false
	for _, r := range p {
		switch {
		case r == '#':
			skip = true
		case r == '.':
			skip = false
			b.WriteRune(r)
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// exempt reports whether an exception covers pos, and marks it used.
func (f *fn) exempt(pos token.Pos) bool {
	if f.okAll != nil {
		f.okAll.used = true
		return true
	}
	p := f.c.pass.Fset.Position(pos)
	if e := f.c.lineOK[p.Filename][p.Line]; e != nil {
		e.used = true
		return true
	}
	return false
}

// assign notes whether a variable now holds an object the function made
// (nil: declared without a value, so its zero value).
func (f *fn) assign(id *ast.Ident, val ast.Expr) {
	info := f.c.pass.TypesInfo
	v, _ := info.Defs[id].(*types.Var)
	if v == nil {
		v, _ = info.Uses[id].(*types.Var)
	}
	if v == nil {
		return
	}
	if val == nil || isFresh(info, val) {
		f.fresh[v] = true
	} else {
		delete(f.fresh, v)
	}
	// An alias is known while the variable holds what it was defined
	// from; assigned again, it names no known object ("").
	if _, defined := f.alias[v]; defined || info.Defs[id] == nil {
		f.alias[v] = ""
	} else if val != nil {
		if p, ok := f.path(val); ok {
			f.alias[v] = p
		}
	}
}

// isFresh reports whether e makes a new object: T{…}, &T{…} or new(T).
func isFresh(info *types.Info, e ast.Expr) bool {
	switch x := ast.Unparen(e).(type) {
	case *ast.CompositeLit:
		return true
	case *ast.UnaryExpr:
		_, ok := ast.Unparen(x.X).(*ast.CompositeLit)
		return x.Op == token.AND && ok
	case *ast.CallExpr:
		id, ok := ast.Unparen(x.Fun).(*ast.Ident)
		if !ok {
			return false
		}
		b, ok := info.Uses[id].(*types.Builtin)
		return ok && b.Name() == "new"
	}
	return false
}

func (f *fn) isPanic(call *ast.CallExpr) bool {
	id, ok := ast.Unparen(call.Fun).(*ast.Ident)
	if !ok {
		return false
	}
	b, ok := f.c.pass.TypesInfo.Uses[id].(*types.Builtin)
	return ok && b.Name() == "panic"
}
