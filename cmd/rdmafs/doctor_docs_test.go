package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documents show no command, flag, script or linked file that is not
// there: every `rdmafs CMD --flag` in their code is a command and a flag
// the command has (its flag set, as --help prints it), every
// scripts/NAME.sh exists, and every relative link resolves. A renamed
// flag or a removed script fails here instead of misleading a reader.
func TestDocumentsShowWhatExists(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, f := range []string{"README.md", "BENCHMARKS.md", "TESTING.md", "RELIABILITY.md"} {
		docs = append(docs, filepath.Join(root, f))
	}
	flags := map[string]map[string]bool{}
	for _, c := range collectCommands() {
		set := map[string]bool{"--help": true, "-h": true}
		if c.flags != nil {
			for _, n := range flagNames(c) {
				set["--"+n] = true
			}
			for _, line := range strings.Split(c.flags.FlagUsages(), "\n") {
				if f := strings.Fields(line); len(f) > 0 && len(f[0]) == 3 && f[0][0] == '-' && f[0][2] == ',' {
					set[f[0][:2]] = true
				}
			}
		}
		flags[c.name] = set
	}
	flags["unmount"] = flags["umount"]
	flags["help"]["--man"], flags["help"]["--completion"] = true, true // helpGen
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(doc, root+"/")
		for _, code := range codeOf(string(b)) {
			for _, line := range strings.Split(code, "\n") {
				checkCommandLine(t, name, line, flags)
			}
		}
		for _, m := range scriptRef.FindAllString(string(b), -1) {
			if _, err := os.Stat(filepath.Join(root, m)); err != nil {
				t.Errorf("%s names %s, which does not exist", name, m)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", name, m[1])
			}
		}
	}
}

var (
	fence     = regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```")
	span      = regexp.MustCompile("`([^`\n]+)`")
	cmdRef    = regexp.MustCompile(`(?:^|[\s(;&|$"])rdmafs ([a-z][a-z-]*)(.*)`)
	scriptRef = regexp.MustCompile(`scripts/[A-Za-z0-9_.-]+\.(?:sh|py)`)
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// codeOf is the shell of a Markdown text: fenced sh blocks and inline
// spans. Fenced blocks without a language are a program's output, quoted
// (the reports' runs), where "rdmafs" is a word of prose.
func codeOf(md string) []string {
	var out []string
	for _, m := range fence.FindAllStringSubmatch(md, -1) {
		if m[1] == "sh" || m[1] == "bash" || m[1] == "console" {
			out = append(out, m[2])
		}
	}
	for _, m := range span.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		out = append(out, m[1])
	}
	return out
}

func checkCommandLine(t *testing.T, doc, line string, flags map[string]map[string]bool) {
	t.Helper()
	for _, m := range cmdRef.FindAllStringSubmatch(line, -1) {
		cmd, rest := m[1], m[2]
		set, ok := flags[cmd]
		if !ok {
			t.Errorf("%s: `rdmafs %s`: no such command (in %q)", doc, cmd, line)
			continue
		}
		// The command's own words end at a shell separator, a comment,
		// or exec's --.
		if i := strings.IndexAny(rest, "|;&#)`"); i >= 0 {
			rest = rest[:i]
		}
		if i := strings.Index(rest, " -- "); i >= 0 {
			rest = rest[:i]
		}
		for _, tok := range strings.Fields(rest) {
			tok, _, _ = strings.Cut(tok, "=")
			tok = strings.Trim(tok, `"'[],`)
			if !strings.HasPrefix(tok, "-") || tok == "-" || tok == "--" || strings.IndexAny(tok[1:2], "0123456789") == 0 {
				continue
			}
			if !set[tok] {
				t.Errorf("%s: `rdmafs %s %s`: no such flag (in %q)", doc, cmd, tok, line)
			}
		}
	}
}
