package qp

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// wantTextErr checks that err is an *Error for key whose message contains
// msg.
func wantTextErr(t *testing.T, in string, err error, key, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%q: got error %v (%T), want *Error for %q", in, err, err, key)
		return
	}
	if e.Key != key || !strings.Contains(e.Msg, msg) {
		t.Errorf("%q: got Key=%q Msg=%q, want Key=%q Msg containing %q", in, e.Key, e.Msg, key, msg)
	}
	if errors.Is(err, ErrUnsupported) {
		t.Errorf("%q: grammar error %v must not be ErrUnsupported", in, err)
	}
}

func TestTextNumber(t *testing.T) {
	good := []struct {
		in   string
		max  uint64
		want uint64
	}{
		{"0", 10, 0},
		{"10", 10, 10},
		{"010", 10, 10}, // decimal, never octal
		{"0x0", 10, 0},
		{"0xa", 10, 10},
		{"0XA", 10, 10},
		{"0x00000a", 10, 10},
		{"18446744073709551615", ^uint64(0), ^uint64(0)},
		{"0xffffffffffffffff", ^uint64(0), ^uint64(0)},
	}
	for _, c := range good {
		got, err := textNumber("k", c.in, c.max)
		if err != nil || got != c.want {
			t.Errorf("textNumber(%q, %d) = %d, %v; want %d", c.in, c.max, got, err, c.want)
		}
	}
	bad := []struct {
		in  string
		max uint64
		msg string
	}{
		{"11", 10, "out of range: 11 > 10"},
		{"0xb", 10, "out of range: 0xb > 10"},
		{"18446744073709551616", ^uint64(0), "out of range: 18446744073709551616 > 18446744073709551615"},
		{"0x10000000000000000", ^uint64(0), "out of range"},
		{"-1", 10, "out of range: -1 < 0"},
		{"-0x1", 10, "out of range: -0x1 < 0"},
		{"abc", 10, `not a number: "abc"`},
		{"0x", 10, `not a number: "0x"`},
		{"0xg", 10, "not a number"},
		{"+1", 10, "not a number"},
		{"1_0", 10, "not a number"},
		{"0b1", 10, "not a number"},
		{"0o7", 10, "not a number"},
		{"1.5", 10, "not a number"},
		{"1e3", 10, "not a number"},
		{"--1", 10, "not a number"},
		{"-", 10, "not a number"},
		{"", 10, "not a number"},
		{" 1", 10, "not a number"},
		{"\x00", 10, `not a number: "\x00"`},
	}
	for _, c := range bad {
		_, err := textNumber("k", c.in, c.max)
		wantTextErr(t, c.in, err, "k", c.msg)
	}
}

func TestTextSplit(t *testing.T) {
	good := []struct {
		in   string
		want []textToken
	}{
		{"", nil},
		{" \t\n ", nil},
		{"a=1", []textToken{{"a", "1"}}},
		{"  a=1\t\tb=2  ", []textToken{{"a", "1"}, {"b", "2"}}},
		{"a=1\nb=2\r\n", []textToken{{"a", "1"}, {"b", "2"}}},
		{"a=b=c", []textToken{{"a", "b=c"}}}, // the first '=' splits
	}
	for _, c := range good {
		got, err := textSplit(c.in)
		if err != nil || len(got) != len(c.want) {
			t.Errorf("textSplit(%q) = %v, %v; want %v", c.in, got, err, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("textSplit(%q)[%d] = %v; want %v", c.in, i, got[i], c.want[i])
			}
		}
	}
	bad := []struct{ in, key, msg string }{
		{"a", "a", "not a key=value token"},
		{"a=1 b", "b", "not a key=value token"},
		{"=1", "=1", "empty key"},
		{"=", "=", "empty key"},
		{"a=", "a", "empty value"},
		{"a= 1", "a", "empty value"},
		{"a =1", "a", "not a key=value token"},
		{"\x00\x01", `\x00\x01`, "not a key=value token"},
	}
	for _, c := range bad {
		_, err := textSplit(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestTextShowBounded(t *testing.T) {
	huge := strings.Repeat("é", 10000)
	for _, in := range []string{huge, strings.Repeat("\xff", 10000), strings.Repeat("x", 100) + "\x00"} {
		_, _, err := ParseModify(in)
		if err == nil {
			t.Fatalf("huge garbage accepted")
		}
		if len(err.Error()) > 3*textMaxShown+100 {
			t.Errorf("error message of %d bytes for garbage input: %.80q", len(err.Error()), err.Error())
		}
		if strings.ContainsAny(err.Error(), "\x00\n") {
			t.Errorf("error message is not one printable line: %q", err.Error())
		}
	}
	if got := textShow(huge); !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "é") {
		t.Errorf("textShow cut badly: %q", got)
	}
	if got := textShow("ok_key"); got != "ok_key" {
		t.Errorf("textShow changed a plain key: %q", got)
	}
}

func TestTextFlags(t *testing.T) {
	good := []struct {
		in   string
		want Access
	}{
		{"0", 0},
		{"local_write", AccessLocalWrite},
		{"LOCAL_WRITE,Remote_Read", AccessLocalWrite | AccessRemoteRead},
		{"local_write,remote_write,remote_read,remote_atomic,mw_bind,zero_based", 63},
		{"0x4", AccessRemoteRead},
		{"12", AccessRemoteRead | AccessRemoteAtomic},
		{"010", 10}, // decimal, as every number of the grammar
		{"local_write,local_write", AccessLocalWrite},
		{"0x80000000", 1 << 31},
		{"4294967295", 1<<32 - 1},
	}
	for _, c := range good {
		got, err := textAccess("access", c.in)
		if err != nil || got != c.want {
			t.Errorf("textAccess(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		// What Access.String prints parses back.
		back, err := textAccess("access", got.String())
		if err != nil || back != got {
			t.Errorf("textAccess(%q.String()=%q) = %v, %v", c.in, got.String(), back, err)
		}
	}
	bad := []struct{ in, msg string }{
		{"local_writ", `unknown flag "local_writ"`},
		{"local_write,", "empty flag"},
		{",local_write", "empty flag"},
		{"local_write,,remote_read", "empty flag"},
		{"4294967296", "out of range"},
		{"-1", "unknown flag"},
		{"0xz", "not a number"},
		{"1_0", "not a number"},
	}
	for _, c := range bad {
		_, err := textAccess("access", c.in)
		wantTextErr(t, c.in, err, "access", c.msg)
	}
}

func TestGID(t *testing.T) {
	cases := []struct{ in, out string }{
		{"::", "::"},
		{"fe80::1", "fe80::1"},
		{"FE80:0000:0000:0000:0000:0000:0000:0001", "fe80::1"},
		{"2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"},
		{"::ffff:0a00:0001", "::ffff:10.0.0.1"},
		{"10.0.0.1", "::ffff:10.0.0.1"},
		{"0.0.0.0", "::ffff:0.0.0.0"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	}
	for _, c := range cases {
		g, err := ParseGID(c.in)
		if err != nil {
			t.Errorf("ParseGID(%q): %v", c.in, err)
			continue
		}
		if got := FormatGID(g); got != c.out {
			t.Errorf("FormatGID(ParseGID(%q)) = %q, want %q", c.in, got, c.out)
		}
		if g2, err := ParseGID(FormatGID(g)); err != nil || g2 != g {
			t.Errorf("GID %q does not round-trip: %v", c.in, err)
		}
	}
	g, _ := ParseGID("1.2.3.4")
	want := [16]byte{10: 0xff, 11: 0xff, 12: 1, 13: 2, 14: 3, 15: 4}
	if g != want {
		t.Errorf("ParseGID(1.2.3.4) = %x, want %x", g, want)
	}
	for _, in := range []string{"", "x", "1.2.3", "1.2.3.256", "fe80::1%eth0", ":::", "fe80::1/64", "[::1]", "0x1"} {
		_, err := ParseGID(in)
		wantTextErr(t, in, err, "dgid", "")
	}
}

// Every unsigned key parser is checked against the same value classes; the
// per-file tests name the keys and widths.
type textNumCase struct {
	key string
	max uint64
}

// textNumValues yields good values (with their number) and bad values (with
// the message they must draw) for a field of maximum max.
func textNumValues(max uint64) (good map[string]uint64, bad map[string]string) {
	good = map[string]uint64{
		"0":                                0,
		"1":                                1,
		strconv.FormatUint(max, 10):        max,
		"0x" + strconv.FormatUint(max, 16): max,
		"0X" + strings.ToUpper(strconv.FormatUint(max, 16)): max,
		"00" + strconv.FormatUint(max, 10):                  max,
	}
	bad = map[string]string{
		"abc":                     "not a number",
		"-1":                      "out of range: -1 < 0",
		"0x":                      "not a number",
		"1.0":                     "not a number",
		"+1":                      "not a number",
		"0x-1":                    "not a number",
		"99999999999999999999999": "out of range",
	}
	if max < ^uint64(0) {
		over := strconv.FormatUint(max+1, 10)
		bad[over] = "out of range: " + over + " > " + strconv.FormatUint(max, 10)
		bad["0x"+strconv.FormatUint(max+1, 16)] = "out of range"
	}
	return good, bad
}
