package qp

import (
	"reflect"
	"strings"
	"testing"
)

func attrFileSample(t Type) AttrFile {
	return AttrFile{Attr: textAttrPrinted(textAttrSample(), t), QPN: 0xabcdef, Type: t, PD: 1, SendCQ: 2,
		RecvCQ: 3, SRQ: 4, SQSigAll: true}
}

func TestAttrFileRoundTrip(t *testing.T) {
	for _, typ := range []Type{TypeRC, TypeUC, TypeUD} {
		f := attrFileSample(typ)
		if typ == TypeUD {
			f.SRQ, f.SQSigAll = 0, false
			f.McastGroups = []string{"ff0e::1", "ff0e::2"}
		}
		text := FormatAttrFile(&f)
		got, mask, err := ParseAttrFile(text)
		if err != nil {
			t.Fatalf("%v: %v\n%s", typ, err, text)
		}
		if !reflect.DeepEqual(got, f) {
			t.Fatalf("%v: round trip\n got %+v\nwant %+v\n%s", typ, got, f, text)
		}
		if mask&(MaskState|MaskCap|MaskPathMTU) != MaskState|MaskCap|MaskPathMTU {
			t.Errorf("%v: mask %v lacks state, cap, path_mtu", typ, mask)
		}
		// The attribute lines are modify tokens: the identity ones are not.
		for _, k := range AttrFileKeys {
			if _, _, err := ParseModify(k + "=1"); err == nil {
				t.Errorf("identity key %s is also a modify key", k)
			}
		}
	}
}

func TestAttrFileErrors(t *testing.T) {
	good := FormatAttrFile(&AttrFile{QPN: 5, Type: TypeRC, PD: 1, SendCQ: 1, RecvCQ: 1})
	for _, c := range []struct{ in, key, msg string }{
		{strings.Replace(good, "qp_num=5\n", "", 1), "qp_num", "missing required key"},
		{strings.Replace(good, "pd=1", "pd=0", 1), "pd", "out of range"},
		{strings.Replace(good, "qp_type=rc", "qp_type=xx", 1), "qp_type", "unknown QP type"},
		{good + "qp_num=6\n", "qp_num", "repeated key"},
		{good + "mcast_groups=ff0e::1,nope\n", "mcast_groups", "not an IPv6"},
		{good + "bogus=1\n", "bogus", "unknown key"},
	} {
		_, _, err := ParseAttrFile(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func FuzzParseAttrFile(f *testing.F) {
	for _, typ := range []Type{TypeRC, TypeUC, TypeUD} {
		s := attrFileSample(typ)
		f.Add(FormatAttrFile(&s))
	}
	f.Add("qp_num=1 qp_type=ud pd=1 send_cq=1 recv_cq=1 mcast_groups=ff0e::1")
	f.Fuzz(func(t *testing.T, s string) {
		a, _, err := ParseAttrFile(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		text := FormatAttrFile(&a)
		b, _, err := ParseAttrFile(text)
		if err != nil {
			t.Fatalf("printed attr file rejected: %v\n%s", err, text)
		}
		if again := FormatAttrFile(&b); again != text {
			t.Fatalf("attr file changed through text:\n%s\nthen\n%s", text, again)
		}
	})
}
