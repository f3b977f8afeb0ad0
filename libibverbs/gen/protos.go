package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Proto is a C function prototype: the return type and the parameter
// types, without parameter names (as gcc -aux-info prints them).
type Proto struct {
	Ret    string
	Params []string // ["void"] for none; "..." last when variadic
	From   string   // where it was declared
}

// auxLine matches one declaration that gcc -aux-info writes:
//
//	/* /usr/include/infiniband/verbs.h:2437:NC */ extern struct ibv_pd *ibv_alloc_pd (struct ibv_context *);
//
// NC is a prototype (N) that is a declaration (C), not a definition.
var auxLine = regexp.MustCompile(`^/\* (\S+):([0-9]+):NC \*/ extern (.*[^A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*) \((.*)\);$`)

// ReadProtos reads gcc -aux-info output and keeps the prototypes declared
// in headers whose path contains under (such as "/infiniband/").
func ReadProtos(r io.Reader, under string) (map[string]Proto, error) {
	protos := map[string]Proto{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := auxLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(m[1], under) {
			continue
		}
		params, err := splitParams(m[5])
		if err != nil {
			return nil, fmt.Errorf("%s:%s: %s: %w", m[1], m[2], m[4], err)
		}
		protos[m[4]] = Proto{
			Ret:    strings.TrimSpace(m[3]),
			Params: params,
			From:   m[1] + ":" + m[2],
		}
	}
	return protos, sc.Err()
}

// splitParams splits a parameter list at the commas outside parentheses
// and brackets.
func splitParams(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced %q", s)
			}
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced %q", s)
	}
	out = append(out, strings.TrimSpace(s[start:]))
	if len(out) == 1 && out[0] == "" {
		out = []string{"void"}
	}
	return out, nil
}

// ParseProto reads "RET (PARAMS)", the form of the uninstalled table.
func ParseProto(s string) (Proto, error) {
	ret, params, ok := strings.Cut(s, "(")
	if !ok || !strings.HasSuffix(params, ")") {
		return Proto{}, fmt.Errorf("prototype %q: want RET (PARAMS)", s)
	}
	p, err := splitParams(strings.TrimSuffix(params, ")"))
	if err != nil {
		return Proto{}, err
	}
	return Proto{Ret: strings.TrimSpace(ret), Params: p}, nil
}

// Named returns the parameter list with names p0, p1, ... inserted, and the
// names, for a definition: "struct ibv_pd *p0", "void (*p1)(void *)",
// "uint8_t p2[6]".
func (p Proto) Named() (list string, names []string) {
	if len(p.Params) == 1 && p.Params[0] == "void" {
		return "void", nil
	}
	parts := make([]string, len(p.Params))
	for i, t := range p.Params {
		if t == "..." {
			parts[i] = t
			continue
		}
		n := fmt.Sprintf("p%d", i)
		names = append(names, n)
		switch {
		case strings.Contains(t, "(*)"):
			parts[i] = strings.Replace(t, "(*)", "(*"+n+")", 1)
		case strings.HasSuffix(t, "]"):
			j := strings.Index(t, "[")
			parts[i] = strings.TrimSpace(t[:j]) + " " + n + t[j:]
		case strings.HasSuffix(t, "*"):
			parts[i] = t + n
		default:
			parts[i] = t + " " + n
		}
	}
	return strings.Join(parts, ", "), names
}

// Decl is the C declaration of name with this prototype; paren keeps a
// function-like macro of the same name (verbs.h has ibv_query_port and
// ibv_reg_mr) from expanding.
func (p Proto) Decl(name string, paren bool) (decl string, names []string) {
	list, names := p.Named()
	if paren {
		name = "(" + name + ")"
	}
	sep := " "
	if strings.HasSuffix(p.Ret, "*") {
		sep = ""
	}
	return p.Ret + sep + name + "(" + list + ")", names
}
