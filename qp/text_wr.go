package qp

import (
	"encoding/hex"
	"strconv"
	"strings"
)

// Work requests (post_send, post_recv) and completions (cq/H/poll) as text.

// textMaxInline is the largest inline_data a text WR may carry (decoded
// bytes). It bounds the grammar, not the QP: max_inline_data is checked at
// post time.
const textMaxInline = 64 << 10

// textSGE parses LKEY:ADDR:LENGTH.
func textSGE(k, v string) (SGE, error) {
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return SGE{}, textErr(k, "want LKEY:ADDR:LENGTH, got "+textQuote(v))
	}
	var s SGE
	var err error
	if s.LKey, err = textFull[uint32](k, parts[0]); err != nil {
		return SGE{}, textSGEPart(err, "LKEY")
	}
	if s.Addr, err = textFull[uint64](k, parts[1]); err != nil {
		return SGE{}, textSGEPart(err, "ADDR")
	}
	if s.Length, err = textFull[uint32](k, parts[2]); err != nil {
		return SGE{}, textSGEPart(err, "LENGTH")
	}
	return s, nil
}

// textSGEPart names which of the three numbers was wrong.
func textSGEPart(err error, part string) error {
	if e, ok := err.(*Error); ok {
		e.Msg = part + " " + e.Msg
	}
	return err
}

func textFormatSGE(s SGE) string {
	return strconv.FormatUint(uint64(s.LKey), 10) + ":" +
		strconv.FormatUint(s.Addr, 10) + ":" +
		strconv.FormatUint(uint64(s.Length), 10)
}

// textWROpcode accepts an ibv_wr_opcode name in any case or its number.
func textWROpcode(k, v string) (WROpcode, error) {
	if o, ok := ParseWROpcode(v); ok {
		return o, nil
	}
	if !textIsNumber(v) {
		return 0, textErr(k, "unknown opcode "+textQuote(v))
	}
	o, err := textUint[WROpcode](k, v, uint64(numWROpcodes-1))
	if err == nil && !o.Valid() {
		// A number libibverbs has (TSO, FLUSH, ...) that rdmafs has not.
		err = textErr(k, "unknown opcode "+v)
	}
	return o, err
}

// textSendKeys parses every send-WR key but sge (which repeats) and
// inline_data (which also sets a flag and excludes sge).
var textSendKeys = map[string]func(w *SendWR, k, v string) error{
	"opcode": func(w *SendWR, k, v string) (err error) { w.Opcode, err = textWROpcode(k, v); return },
	"wr_id":  func(w *SendWR, k, v string) (err error) { w.WRID, err = textFull[uint64](k, v); return },
	"send_flags": func(w *SendWR, k, v string) error {
		f, err := textFlags(k, v, sendFlagNames)
		w.SendFlags |= SendFlags(f)
		return err
	},
	"imm_data": func(w *SendWR, k, v string) (err error) { w.ImmData, err = textFull[uint32](k, v); return },
	"invalidate_rkey": func(w *SendWR, k, v string) (err error) {
		w.InvalidateRKey, err = textFull[uint32](k, v)
		return
	},
	"remote_addr": func(w *SendWR, k, v string) (err error) { w.RemoteAddr, err = textFull[uint64](k, v); return },
	"rkey":        func(w *SendWR, k, v string) (err error) { w.RKey, err = textFull[uint32](k, v); return },
	"compare_add": func(w *SendWR, k, v string) (err error) { w.CompareAdd, err = textFull[uint64](k, v); return },
	"swap":        func(w *SendWR, k, v string) (err error) { w.Swap, err = textFull[uint64](k, v); return },
	"ah":          func(w *SendWR, k, v string) (err error) { w.AH, err = textFull[uint32](k, v); return },
	// A QPN is 24 bits wide (BTH.DestQP).
	"remote_qpn": func(w *SendWR, k, v string) (err error) { w.RemoteQPN, err = textUint[uint32](k, v, PSNMask); return },
	// An XRC SRQ number lives where UD's remote QPN does (SendWR.RemoteQPN).
	"remote_srqn": func(w *SendWR, k, v string) (err error) { w.RemoteQPN, err = textUint[uint32](k, v, PSNMask); return },
	"remote_qkey": func(w *SendWR, k, v string) (err error) { w.RemoteQKey, err = textFull[uint32](k, v); return },
	"mw":          func(w *SendWR, k, v string) (err error) { w.MW, err = textFull[uint32](k, v); return },
	"bind_lkey":   func(w *SendWR, k, v string) (err error) { w.BindLKey, err = textFull[uint32](k, v); return },
	"bind_addr":   func(w *SendWR, k, v string) (err error) { w.BindAddr, err = textFull[uint64](k, v); return },
	"bind_length": func(w *SendWR, k, v string) (err error) { w.BindLength, err = textFull[uint64](k, v); return },
	"bind_access": func(w *SendWR, k, v string) (err error) { w.BindAccess, err = textAccess(k, v); return },
}

// ParseSendWR parses one post_send line. Only the grammar is checked (and
// that opcode is given); whether the WR suits the QP is ValidateSendWR's.
// inline_data sets SendInline and excludes sge.
func ParseSendWR(s string) (SendWR, error) {
	var w SendWR
	toks, err := textSplit(s)
	if err != nil {
		return SendWR{}, err
	}
	seen := textSeen{}
	for _, t := range toks {
		switch t.key {
		case "sge":
			sge, err := textSGE(t.key, t.val)
			if err != nil {
				return SendWR{}, err
			}
			w.SGL = append(w.SGL, sge)
			seen["sge"] = true
			continue
		case "inline_data":
			if err := seen.add(t.key); err != nil {
				return SendWR{}, err
			}
			if w.InlineData, err = textHex(t.key, t.val, textMaxInline); err != nil {
				return SendWR{}, err
			}
			w.SendFlags |= SendInline
			continue
		}
		set, ok := textSendKeys[t.key]
		if !ok {
			return SendWR{}, textErr(t.key, "unknown key")
		}
		if err := seen.add(t.key); err != nil {
			return SendWR{}, err
		}
		if err := set(&w, t.key, t.val); err != nil {
			return SendWR{}, err
		}
	}
	if err := seen.require("opcode"); err != nil {
		return SendWR{}, err
	}
	if seen["inline_data"] && seen["sge"] {
		return SendWR{}, textErr("inline_data", "inline_data and sge exclude each other")
	}
	return w, nil
}

// textHex decodes an even-length hex string of at most max bytes. The length
// is checked before decoding so a huge line allocates nothing.
func textHex(k, v string, max int) ([]byte, error) {
	if len(v)%2 != 0 {
		return nil, textErr(k, "odd number of hex digits")
	}
	if len(v)/2 > max {
		return nil, textErr(k, "too long: "+strconv.Itoa(len(v)/2)+" bytes > "+strconv.Itoa(max))
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil, textErr(k, "not hex: "+textQuote(v))
	}
	return b, nil
}

// textWRField is a bit set of the fields an opcode uses; FormatSendWR prints
// those always and the others only when set, so a line shows what the
// operation needs without clutter.
type textWRField uint16

const (
	textWFImm textWRField = 1 << iota
	textWFInv
	textWFRemote // remote_addr, rkey
	textWFCompare
	textWFSwap
	textWFBind // mw, rkey, bind_*
)

var textWRFields = [numWROpcodes]textWRField{
	WRRDMAWrite:         textWFRemote,
	WRRDMAWriteWithImm:  textWFRemote | textWFImm,
	WRSendWithImm:       textWFImm,
	WRRDMARead:          textWFRemote,
	WRAtomicCmpAndSwp:   textWFRemote | textWFCompare | textWFSwap,
	WRAtomicFetchAndAdd: textWFRemote | textWFCompare,
	WRLocalInv:          textWFInv,
	WRBindMW:            textWFBind,
	WRSendWithInv:       textWFInv,
	WRAtomicWrite:       textWFRemote | textWFCompare,
}

// FormatSendWR prints w as one post_send line (no newline) that
// ParseSendWR reads back to an equal WR.
func FormatSendWR(w *SendWR) string {
	var need textWRField
	var l textLine
	if w.Opcode.Valid() {
		need = textWRFields[w.Opcode]
		l.str("opcode", w.Opcode.String())
	} else {
		l.num("opcode", uint64(w.Opcode))
	}
	l.num("wr_id", w.WRID)
	// inline_data implies SendInline, so print the flag only when it says
	// more than inline_data will.
	flags := w.SendFlags
	if len(w.InlineData) > 0 {
		flags &^= SendInline
	}
	if flags != 0 {
		l.str("send_flags", flags.String())
	}
	for _, s := range w.SGL {
		l.str("sge", textFormatSGE(s))
	}
	if len(w.InlineData) > 0 {
		l.str("inline_data", hex.EncodeToString(w.InlineData))
	}
	opt := func(f textWRField, k string, v uint64) {
		if need&f != 0 || v != 0 {
			l.num(k, v)
		}
	}
	opt(textWFImm, "imm_data", uint64(w.ImmData))
	opt(textWFInv, "invalidate_rkey", uint64(w.InvalidateRKey))
	opt(textWFRemote, "remote_addr", w.RemoteAddr)
	opt(textWFRemote|textWFBind, "rkey", uint64(w.RKey))
	opt(textWFCompare, "compare_add", w.CompareAdd)
	opt(textWFSwap, "swap", w.Swap)
	opt(0, "ah", uint64(w.AH))
	opt(0, "remote_qpn", uint64(w.RemoteQPN))
	opt(0, "remote_qkey", uint64(w.RemoteQKey))
	opt(textWFBind, "mw", uint64(w.MW))
	opt(textWFBind, "bind_lkey", uint64(w.BindLKey))
	opt(textWFBind, "bind_addr", w.BindAddr)
	opt(textWFBind, "bind_length", w.BindLength)
	if need&textWFBind != 0 || w.BindAccess != 0 {
		l.str("bind_access", w.BindAccess.String())
	}
	return l.String()
}

// ParseRecvWR parses one post_recv line: wr_id and any number of sge.
func ParseRecvWR(s string) (RecvWR, error) {
	var w RecvWR
	toks, err := textSplit(s)
	if err != nil {
		return RecvWR{}, err
	}
	seen := textSeen{}
	for _, t := range toks {
		switch t.key {
		case "sge":
			sge, err := textSGE(t.key, t.val)
			if err != nil {
				return RecvWR{}, err
			}
			w.SGL = append(w.SGL, sge)
		case "wr_id":
			if err := seen.add(t.key); err != nil {
				return RecvWR{}, err
			}
			if w.WRID, err = textFull[uint64](t.key, t.val); err != nil {
				return RecvWR{}, err
			}
		default:
			return RecvWR{}, textErr(t.key, "unknown key")
		}
	}
	return w, nil
}

// FormatRecvWR prints w as one post_recv line (no newline).
func FormatRecvWR(w *RecvWR) string {
	var l textLine
	l.num("wr_id", w.WRID)
	for _, s := range w.SGL {
		l.str("sge", textFormatSGE(s))
	}
	return l.String()
}

// FormatWC prints one completion as a line of cq/H/poll (no newline): the
// five fields every completion has, then those that apply. invalidate_rkey
// prints ImmData, where ibv_wc keeps the invalidated rkey.
func FormatWC(wc *WC) string {
	var l textLine
	l.num("wr_id", wc.WRID)
	if wc.Status < numWCStatus {
		l.str("status", wc.Status.String())
	} else {
		l.num("status", uint64(wc.Status))
	}
	if _, ok := wcOpcodeNames[wc.Opcode]; ok {
		l.str("opcode", wc.Opcode.String())
	} else {
		l.num("opcode", uint64(wc.Opcode))
	}
	l.num("qp_num", uint64(wc.QPNum))
	l.num("byte_len", uint64(wc.ByteLen))
	if wc.WCFlags&WCWithImm != 0 {
		l.num("imm_data", uint64(wc.ImmData))
	}
	if wc.WCFlags&WCWithInv != 0 {
		l.num("invalidate_rkey", uint64(wc.ImmData))
	}
	// src_qp belongs to receive completions; printed for others too if set,
	// so that no field is ever lost.
	if wc.Opcode&WCRecv != 0 || wc.SrcQP != 0 {
		l.num("src_qp", uint64(wc.SrcQP))
	}
	if wc.WCFlags != 0 {
		l.str("wc_flags", wc.WCFlags.String())
	}
	for _, f := range []struct {
		k string
		v uint64
	}{
		{"vendor_err", uint64(wc.VendorErr)},
		{"pkey_index", uint64(wc.PKeyIndex)},
		{"slid", uint64(wc.SLID)},
		{"sl", uint64(wc.SL)},
		{"dlid_path_bits", uint64(wc.DLIDPathBits)},
		{"completion_ts", wc.CompletionTS},
		{"completion_wallclock_ns", wc.CompletionWallclockNS},
	} {
		if f.v != 0 {
			l.num(f.k, f.v)
		}
	}
	return l.String()
}

// textWCKeys parses the WC keys that map to one field each.
var textWCKeys = map[string]func(wc *WC, k, v string) error{
	"wr_id": func(wc *WC, k, v string) (err error) { wc.WRID, err = textFull[uint64](k, v); return },
	"status": func(wc *WC, k, v string) error {
		if st, ok := ParseWCStatus(v); ok {
			wc.Status = st
			return nil
		}
		if !textIsNumber(v) {
			return textErr(k, "unknown status "+textQuote(v))
		}
		var err error
		wc.Status, err = textUint[WCStatus](k, v, uint64(numWCStatus-1))
		return err
	},
	"opcode": func(wc *WC, k, v string) error {
		if o, ok := ParseWCOpcode(v); ok {
			wc.Opcode = o
			return nil
		}
		if !textIsNumber(v) {
			return textErr(k, "unknown opcode "+textQuote(v))
		}
		o, err := textFull[WCOpcode](k, v)
		if err != nil {
			return err
		}
		if _, ok := wcOpcodeNames[o]; !ok {
			return textErr(k, "unknown opcode "+textQuote(v))
		}
		wc.Opcode = o
		return nil
	},
	"qp_num":   func(wc *WC, k, v string) (err error) { wc.QPNum, err = textUint[uint32](k, v, PSNMask); return },
	"byte_len": func(wc *WC, k, v string) (err error) { wc.ByteLen, err = textFull[uint32](k, v); return },
	"src_qp":   func(wc *WC, k, v string) (err error) { wc.SrcQP, err = textUint[uint32](k, v, PSNMask); return },
	"wc_flags": func(wc *WC, k, v string) error {
		f, err := textFlags(k, v, wcFlagNames)
		wc.WCFlags |= WCFlags(f)
		return err
	},
	"vendor_err":     func(wc *WC, k, v string) (err error) { wc.VendorErr, err = textFull[uint32](k, v); return },
	"pkey_index":     func(wc *WC, k, v string) (err error) { wc.PKeyIndex, err = textFull[uint16](k, v); return },
	"slid":           func(wc *WC, k, v string) (err error) { wc.SLID, err = textFull[uint16](k, v); return },
	"sl":             func(wc *WC, k, v string) (err error) { wc.SL, err = textUint[uint8](k, v, 15); return },
	"dlid_path_bits": func(wc *WC, k, v string) (err error) { wc.DLIDPathBits, err = textFull[uint8](k, v); return },
	"completion_ts": func(wc *WC, k, v string) (err error) {
		wc.CompletionTS, err = textFull[uint64](k, v)
		return
	},
	"completion_wallclock_ns": func(wc *WC, k, v string) (err error) {
		wc.CompletionWallclockNS, err = textFull[uint64](k, v)
		return
	},
}

// ParseWC is FormatWC's inverse, for tests and client tools. The five
// fields FormatWC always prints are required. imm_data and invalidate_rkey
// set their wc_flags bit, as FormatWC prints them only with it; since both
// live in ImmData, giving both requires equal values.
func ParseWC(s string) (WC, error) {
	var wc WC
	toks, err := textSplit(s)
	if err != nil {
		return WC{}, err
	}
	seen := textSeen{}
	var imm, inv uint32
	for _, t := range toks {
		switch t.key {
		case "imm_data", "invalidate_rkey":
			if err := seen.add(t.key); err != nil {
				return WC{}, err
			}
			n, err := textFull[uint32](t.key, t.val)
			if err != nil {
				return WC{}, err
			}
			if t.key == "imm_data" {
				imm, wc.WCFlags = n, wc.WCFlags|WCWithImm
			} else {
				inv, wc.WCFlags = n, wc.WCFlags|WCWithInv
			}
			continue
		}
		set, ok := textWCKeys[t.key]
		if !ok {
			return WC{}, textErr(t.key, "unknown key")
		}
		if err := seen.add(t.key); err != nil {
			return WC{}, err
		}
		if err := set(&wc, t.key, t.val); err != nil {
			return WC{}, err
		}
	}
	if err := seen.require("wr_id", "status", "opcode", "qp_num", "byte_len"); err != nil {
		return WC{}, err
	}
	if seen["imm_data"] && seen["invalidate_rkey"] && imm != inv {
		return WC{}, textErr("invalidate_rkey", "imm_data and invalidate_rkey share one field; they must be equal")
	}
	wc.ImmData = imm | inv
	return wc, nil
}
