package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The generated files of dist/ are what the command generates now: a
// flag added, a help text or the mount's README changed without make
// dist fails here, so the installed manual pages and completion cannot
// drift from the command.
func TestDistIsCurrent(t *testing.T) {
	for _, c := range []struct {
		file string
		args []string
	}{
		{"rdmafs.8", []string{"help", "--man", "8"}},
		{"rdmafs.5", []string{"help", "--man", "5"}},
		{"rdmafs.bash", []string{"help", "--completion"}},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 0 {
			t.Fatalf("rdmafs %s: exit %d: %s", strings.Join(c.args, " "), code, errb.String())
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "dist", c.file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Errorf("dist/%s is stale: run make dist", c.file)
		}
	}
}

// Every command of usage has a section in rdmafs(8), with every flag it
// has, and the completion offers each flag.
func TestManPageHasEveryFlag(t *testing.T) {
	var man, comp bytes.Buffer
	writeMan8(&man)
	writeCompletion(&comp)
	for _, c := range collectCommands() {
		if len(c.synopses) == 0 {
			t.Errorf("%s: not in usage", c.name)
		}
		if c.name != "help" && c.flags == nil {
			t.Errorf("%s: no flag set seen (does it use newFlags?)", c.name)
			continue
		}
		if c.flags == nil {
			continue
		}
		for _, name := range flagNames(c) {
			if !strings.Contains(man.String(), `\fB\-\-`+strings.ReplaceAll(name, "-", `\-`)+`\fR`) {
				t.Errorf("rdmafs.8 lacks %s --%s", c.name, name)
			}
			if !strings.Contains(comp.String(), "--"+name) {
				t.Errorf("completion lacks %s --%s", c.name, name)
			}
		}
	}
}

func flagNames(c cmdInfo) []string {
	var names []string
	for _, line := range strings.Split(c.flags.FlagUsages(), "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			f := strings.Fields(line[i+2:])
			names = append(names, strings.SplitN(f[0], "[", 2)[0])
		}
	}
	return names
}
