package qp

import (
	"errors"
	"strings"
	"testing"
)

// The expectations below are typed from VERBS.md §1.4 (legality grid) and
// §1.6 (required/optional per type) using its abbreviations, independently
// of transition.go.

var abbrev = map[string]AttrMask{
	"PKEY": MaskPKeyIndex, "PORT": MaskPort, "QKEY": MaskQKey, "ACC": MaskAccessFlags,
	"AV": MaskAV, "MTU": MaskPathMTU, "DQPN": MaskDestQPN, "RQPSN": MaskRQPSN,
	"SQPSN": MaskSQPSN, "MRA": MaskMaxQPRdAtomic, "MDRA": MaskMaxDestRdAtomic,
	"MRNR": MaskMinRNRTimer, "TMO": MaskTimeout, "RETRY": MaskRetryCnt,
	"RNRR": MaskRNRRetry, "ALT": MaskAltPath, "MIG": MaskPathMigState,
	"CUR": MaskCurState, "SQDN": MaskEnSQDAsyncNotify, "RL": MaskRateLimit,
}

func parseAbbrev(t *testing.T, s string) AttrMask {
	t.Helper()
	var m AttrMask
	if s == "" || s == "-" {
		return 0
	}
	for _, p := range strings.Split(s, "|") {
		b, ok := abbrev[strings.TrimSpace(p)]
		if !ok {
			t.Fatalf("bad abbreviation %q in %q", p, s)
		}
		m |= b
	}
	return m
}

// legalGrid is §1.4: rows are "from", columns "to", in the order
// RESET INIT RTR RTS SQD SQE ERR.
var legalGrid = [7]string{
	/* RESET */ "X X . . . . .",
	/* INIT  */ "X X X . . . X",
	/* RTR   */ "X . . X . . X",
	/* RTS   */ "X . . X X . X",
	/* SQD   */ "X . . X X . X",
	/* SQE   */ "X . . X . . X",
	/* ERR   */ "X . . . . . X",
}

// masks is §1.6 for RC, UC, UD: "req / opt" per type. Legal cells not listed
// have neither required nor optional attributes.
var masks = map[[2]State]map[Type]string{
	{StateReset, StateInit}: {
		TypeRC: "PKEY|PORT|ACC / -",
		TypeUC: "PKEY|PORT|ACC / -",
		TypeUD: "PKEY|PORT|QKEY / -",
	},
	{StateInit, StateInit}: {
		TypeRC: "- / PKEY|PORT|ACC",
		TypeUC: "- / PKEY|PORT|ACC",
		TypeUD: "- / PKEY|PORT|QKEY",
	},
	{StateInit, StateRTR}: {
		TypeRC: "AV|MTU|DQPN|RQPSN|MDRA|MRNR / ALT|ACC|PKEY",
		TypeUC: "AV|MTU|DQPN|RQPSN / ALT|ACC|PKEY",
		TypeUD: "- / PKEY|QKEY",
	},
	{StateRTR, StateRTS}: {
		TypeRC: "TMO|RETRY|RNRR|SQPSN|MRA / CUR|ALT|ACC|MRNR|MIG",
		TypeUC: "SQPSN / CUR|ALT|ACC|MIG",
		TypeUD: "SQPSN / CUR|QKEY",
	},
	{StateRTS, StateRTS}: {
		TypeRC: "- / CUR|ACC|ALT|MIG|MRNR",
		TypeUC: "- / CUR|ACC|ALT|MIG",
		TypeUD: "- / CUR|QKEY",
	},
	{StateRTS, StateSQD}: {
		TypeRC: "- / SQDN",
		TypeUC: "- / SQDN",
		TypeUD: "- / SQDN",
	},
	{StateSQD, StateRTS}: {
		TypeRC: "- / CUR|ALT|ACC|MRNR|MIG",
		TypeUC: "- / CUR|ALT|ACC|MIG",
		TypeUD: "- / CUR|QKEY",
	},
	{StateSQD, StateSQD}: {
		TypeRC: "- / PORT|AV|TMO|RETRY|RNRR|MRA|MDRA|ALT|ACC|PKEY|MRNR|MIG",
		TypeUC: "- / AV|ALT|ACC|PKEY|MIG",
		TypeUD: "- / PKEY|QKEY",
	},
	{StateSQE, StateRTS}: {
		TypeRC: "- / -",
		TypeUC: "- / CUR|ACC",
		TypeUD: "- / CUR|QKEY",
	},
}

var allTypes = []Type{TypeRC, TypeUC, TypeUD}

func TestTransitionTable(t *testing.T) {
	cells := 0
	for cur := StateReset; cur <= StateErr; cur++ {
		row := strings.Fields(legalGrid[cur])
		if len(row) != 7 {
			t.Fatalf("grid row %v malformed", cur)
		}
		for next := StateReset; next <= StateErr; next++ {
			wantValid := row[next] == "X"
			for _, typ := range allTypes {
				cells++
				req, opt, valid := Transition(cur, next, typ)
				if valid != wantValid {
					t.Errorf("%v -> %v %v: valid=%v, want %v", cur, next, typ, valid, wantValid)
					continue
				}
				var wantReq, wantOpt AttrMask
				if spec, ok := masks[[2]State{cur, next}][typ]; ok {
					if !wantValid {
						t.Fatalf("masks lists illegal cell %v -> %v", cur, next)
					}
					parts := strings.Split(spec, "/")
					wantReq = parseAbbrev(t, strings.TrimSpace(parts[0]))
					wantOpt = parseAbbrev(t, strings.TrimSpace(parts[1]))
				}
				if req != wantReq || opt != wantOpt {
					t.Errorf("%v -> %v %v: req=%v opt=%v, want req=%v opt=%v",
						cur, next, typ, req, opt, wantReq, wantOpt)
				}
				if req&opt != 0 || (req|opt)&MaskState != 0 {
					t.Errorf("%v -> %v %v: overlapping or STATE bits", cur, next, typ)
				}
			}
		}
	}
	if cells != 7*7*3 {
		t.Fatalf("walked %d cells", cells)
	}
}

func TestTransitionBadInputs(t *testing.T) {
	for _, c := range []struct {
		cur, next State
		typ       Type
	}{
		{numStates, StateInit, TypeRC},
		{StateReset, numStates, TypeRC},
		{StateReset, StateInit, 0},
		{StateReset, StateInit, 1},
		{StateReset, StateInit, 5},
		{StateReset, StateInit, 255},
	} {
		if req, opt, ok := Transition(c.cur, c.next, c.typ); ok || req != 0 || opt != 0 {
			t.Errorf("Transition(%v,%v,%v) = %v,%v,%v", c.cur, c.next, c.typ, req, opt, ok)
		}
	}
}

func TestModifyOK(t *testing.T) {
	const (
		S = MaskState
	)
	rcRTR := MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN | MaskMaxDestRdAtomic | MaskMinRNRTimer
	rcRTS := MaskTimeout | MaskRetryCnt | MaskRNRRetry | MaskSQPSN | MaskMaxQPRdAtomic
	cases := []struct {
		name      string
		cur, next State
		typ       Type
		mask      AttrMask
		key, msg  string // empty key and msg: must succeed
		unsupp    bool
	}{
		{"rc reset->init", StateReset, StateInit, TypeRC, S | MaskPKeyIndex | MaskPort | MaskAccessFlags, "", "", false},
		{"ud reset->init", StateReset, StateInit, TypeUD, S | MaskPKeyIndex | MaskPort | MaskQKey, "", "", false},
		{"ud reset->init acc forbidden", StateReset, StateInit, TypeUD, S | MaskPKeyIndex | MaskPort | MaskQKey | MaskAccessFlags,
			"qp_access_flags", "not allowed for RESET -> INIT on ud", false},
		{"rc init->rtr", StateInit, StateRTR, TypeRC, S | rcRTR, "", "", false},
		{"rc init->rtr with optionals", StateInit, StateRTR, TypeRC, S | rcRTR | MaskAccessFlags | MaskPKeyIndex, "", "", false},
		{"rc init->rtr missing mtu", StateInit, StateRTR, TypeRC, S | rcRTR&^MaskPathMTU,
			"path_mtu", "required for INIT -> RTR on rc", false},
		{"rc init->rtr missing all names first", StateInit, StateRTR, TypeRC, S,
			"av", "required for INIT -> RTR on rc", false},
		{"uc init->rtr no mdra needed", StateInit, StateRTR, TypeUC, S | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN, "", "", false},
		{"uc init->rtr mdra forbidden", StateInit, StateRTR, TypeUC, S | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN | MaskMaxDestRdAtomic,
			"max_dest_rd_atomic", "not allowed for INIT -> RTR on uc", false},
		{"ud init->rtr nothing", StateInit, StateRTR, TypeUD, S, "", "", false},
		{"rc rtr->rts", StateRTR, StateRTS, TypeRC, S | rcRTS, "", "", false},
		{"rc rtr->rts mdra forbidden", StateRTR, StateRTS, TypeRC, S | rcRTS | MaskMaxDestRdAtomic,
			"max_dest_rd_atomic", "not allowed for RTR -> RTS on rc", false},
		{"rc rtr->rts missing sq_psn", StateRTR, StateRTS, TypeRC, S | rcRTS&^MaskSQPSN,
			"sq_psn", "required for RTR -> RTS on rc", false},
		{"rc rtr->rts cur ok", StateRTR, StateRTS, TypeRC, S | MaskCurState | rcRTS, "", "", false},
		{"cur_state from init", StateInit, StateInit, TypeRC, S | MaskCurState,
			"cur_qp_state", "allowed only from RTR, RTS, SQD or SQE, not INIT", false},
		{"cur_state from reset", StateReset, StateInit, TypeRC, S | MaskCurState | MaskPKeyIndex | MaskPort | MaskAccessFlags,
			"cur_qp_state", "allowed only from RTR, RTS, SQD or SQE, not RESET", false},
		{"cur_state from sqe", StateSQE, StateRTS, TypeUD, S | MaskCurState, "", "", false},
		{"reset->err", StateReset, StateErr, TypeRC, S, "qp_state", "illegal transition RESET -> ERR for rc", false},
		{"rts->sqe", StateRTS, StateSQE, TypeUC, S, "qp_state", "illegal transition RTS -> SQE for uc", false},
		{"err->rts", StateErr, StateRTS, TypeRC, S, "qp_state", "illegal transition ERR -> RTS for rc", false},
		{"any->reset", StateRTS, StateReset, TypeRC, S, "", "", false},
		{"any->reset attrs forbidden", StateRTS, StateReset, TypeRC, S | MaskQKey, "qkey", "not allowed for RTS -> RESET on rc", false},
		{"init->err", StateInit, StateErr, TypeUD, S, "", "", false},
		{"rts->sqd notify", StateRTS, StateSQD, TypeRC, S | MaskEnSQDAsyncNotify, "", "", false},
		{"sqe->rts rc acc forbidden", StateSQE, StateRTS, TypeRC, S | MaskAccessFlags,
			"qp_access_flags", "not allowed for SQE -> RTS on rc", false},
		{"sqe->rts uc acc ok", StateSQE, StateRTS, TypeUC, S | MaskAccessFlags, "", "", false},
		// Attribute-only modifies: next is ignored, checked as cur -> cur.
		{"attr-only in rtr", StateRTR, StateRTS, TypeRC, MaskMinRNRTimer,
			"qp_state", "illegal transition RTR -> RTR for rc (modify without qp_state)", false},
		{"attr-only in reset", StateReset, StateInit, TypeRC, MaskPKeyIndex,
			"pkey_index", "not allowed for RESET -> RESET on rc", false},
		{"attr-only empty mask in reset", StateReset, StateReset, TypeRC, 0, "", "", false},
		{"attr-only in err", StateErr, StateErr, TypeUD, MaskQKey, "qkey", "not allowed for ERR -> ERR on ud", false},
		{"attr-only in sqe", StateSQE, StateSQE, TypeUD, MaskQKey,
			"qp_state", "illegal transition SQE -> SQE for ud (modify without qp_state)", false},
		{"attr-only in sqd rc", StateSQD, StateSQD, TypeRC, MaskAV | MaskTimeout | MaskPort, "", "", false},
		{"attr-only in rts rc", StateRTS, StateErr, TypeRC, MaskMinRNRTimer, "", "", false},
		{"attr-only in rts rc acc", StateRTS, StateRTS, TypeRC, MaskAccessFlags | MaskCurState, "", "", false},
		{"attr-only in rts uc mrnr", StateRTS, StateRTS, TypeUC, MaskMinRNRTimer,
			"min_rnr_timer", "not allowed for RTS -> RTS on uc", false},
		{"attr-only in init", StateInit, StateInit, TypeRC, MaskPKeyIndex | MaskAccessFlags, "", "", false},
		{"attr-only empty mask in rts", StateRTS, StateRTS, TypeUD, 0, "", "", false},
		{"attr-only empty mask in rtr", StateRTR, StateRTR, TypeUD, 0,
			"qp_state", "illegal transition RTR -> RTR for ud (modify without qp_state)", false},
		{"unknown mask bit", StateRTS, StateRTS, TypeRC, S | 1<<21,
			"attr_mask", "bit 0x200000 not allowed for RTS -> RTS on rc", false},
		{"rate_limit forbidden", StateRTS, StateRTS, TypeRC, S | MaskRateLimit,
			"rate_limit", "not allowed for RTS -> RTS on rc", false},
		{"bad type", StateReset, StateInit, 11, S, "qp_type", "Type(11) is not implemented", true},
		{"bad next", StateReset, 7, TypeRC, S, "qp_state", "invalid state 7", false},
		{"bad cur", 9, StateInit, TypeRC, S, "cur_qp_state", "invalid state 9", false},
	}
	for _, c := range cases {
		err := ModifyOK(c.cur, c.next, c.typ, c.mask)
		if c.key == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", c.name, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: got %v, want *Error %s", c.name, err, c.key)
			continue
		}
		if e.Key != c.key || e.Msg != c.msg {
			t.Errorf("%s: got key=%q msg=%q, want key=%q msg=%q", c.name, e.Key, e.Msg, c.key, c.msg)
		}
		if errors.Is(err, ErrUnsupported) != c.unsupp {
			t.Errorf("%s: unsupported=%v", c.name, !c.unsupp)
		}
	}
}

// Every legal cell accepts exactly its required set plus any subset of its
// optional set, and refuses each other bit.
func TestModifyOKMatchesTable(t *testing.T) {
	for cur := StateReset; cur <= StateErr; cur++ {
		for next := StateReset; next <= StateErr; next++ {
			for _, typ := range allTypes {
				req, opt, ok := Transition(cur, next, typ)
				if !ok {
					if ModifyOK(cur, next, typ, MaskState) == nil {
						t.Errorf("%v -> %v %v accepted", cur, next, typ)
					}
					continue
				}
				mask := MaskState | req | opt
				if mask&MaskCurState != 0 && !curStateOK(cur) {
					t.Fatalf("table offers CUR from %v", cur)
				}
				if err := ModifyOK(cur, next, typ, mask); err != nil {
					t.Errorf("%v -> %v %v full mask: %v", cur, next, typ, err)
				}
				for _, n := range maskNames {
					if n.bit == MaskState {
						continue
					}
					m := mask ^ n.bit
					want := (req|opt)&n.bit != 0 && req&n.bit == 0 // dropping an optional is fine
					if got := ModifyOK(cur, next, typ, m) == nil; got != want {
						t.Errorf("%v -> %v %v toggling %s: ok=%v want %v", cur, next, typ, n.name, got, want)
					}
				}
			}
		}
	}
}
