package roce

import "testing"

// The engine's classes come from the same table as the wire's headers:
// each valid opcode is a request or a response, has a place in its
// message, and its header and payload flags agree with Headers and
// HasPayload.
func TestOpcodeClasses(t *testing.T) {
	for i := 0; i < opcodeCount; i++ {
		o := Opcode(i)
		c := o.Class()
		if !o.Valid() {
			if c != 0 {
				t.Errorf("%v: invalid with class %b", o, c)
			}
			continue
		}
		if (c&ClassRequest != 0) == (c&ClassResponse != 0) {
			t.Errorf("%v: class %b is not exactly one of request and response", o, c)
		}
		if c&(ClassFirst|ClassMiddle|ClassLast) == 0 || c&ClassMiddle != 0 && c&ClassOnly != 0 {
			t.Errorf("%v: class %b has no place in a message", o, c)
		}
		h, _ := o.Headers()
		for _, x := range []struct {
			h Headers
			c Class
		}{{HdrImmDt, ClassImm}, {HdrIETH, ClassInv}, {HdrRETH, ClassRETH}, {HdrAETH, ClassAETH}} {
			if (h&x.h != 0) != (c&x.c != 0) {
				t.Errorf("%v: headers %b and class %b disagree", o, h, c)
			}
		}
		if o.HasPayload() != (c&ClassPayload != 0) {
			t.Errorf("%v: payload %v, class %b", o, o.HasPayload(), c)
		}
	}
	for _, x := range []struct {
		o    Opcode
		want Class
	}{
		{RCSendFirst, ClassRequest | ClassSend | ClassFirst | ClassRecvWQE | ClassPayload},
		{UCWriteLastImm, ClassRequest | ClassWrite | ClassLast | ClassRecvWQE | ClassImm | ClassPayload},
		{UDSendOnlyImm, ClassRequest | ClassSend | ClassOnly | ClassRecvWQE | ClassImm | ClassPayload},
		{RCReadResponseMiddle, ClassResponse | ClassRead | ClassMiddle | ClassPayload},
		{RCAtomicAcknowledge, ClassResponse | ClassAtomic | ClassOnly | ClassAETH},
		{RCAtomicWrite, ClassRequest | ClassAtomicWrite | ClassOnly | ClassRETH | ClassPayload},
		{RCSendOnlyInv, ClassRequest | ClassSend | ClassOnly | ClassRecvWQE | ClassInv | ClassPayload},
	} {
		if got := x.o.Class(); got != x.want {
			t.Errorf("%v: class %b, want %b", x.o, got, x.want)
		}
	}
}
