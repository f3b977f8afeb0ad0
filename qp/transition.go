package qp

import "fmt"

// The IB modify-QP rules as one table: for every (current, next) state pair,
// whether the move is legal and, per QP type, which attributes it requires
// and which it may carry. The content is the IBA's (VERBS.md §1.4–1.6, the
// same rules as Linux core's qp_state_table) for RC, UC, UD and the two
// XRC types.

// transition is one cell of the table. req and opt are indexed by
// typeSlot: RC, UC, UD, XRC_SEND, XRC_RECV in slots 0..4.
type transition struct {
	valid bool
	req   [numSlots]AttrMask
	opt   [numSlots]AttrMask
}

const numSlots = 5

// typeSlot is t's index in a transition's masks (t valid).
func typeSlot(t Type) int {
	switch t {
	case TypeXRCSend:
		return 3
	case TypeXRCRecv:
		return 4
	}
	return int(t - TypeRC)
}

// Short names keep the table readable; they mirror VERBS.md's abbreviations.
const (
	mPKEY  = MaskPKeyIndex
	mPORT  = MaskPort
	mQKEY  = MaskQKey
	mACC   = MaskAccessFlags
	mAV    = MaskAV
	mMTU   = MaskPathMTU
	mDQPN  = MaskDestQPN
	mRQPSN = MaskRQPSN
	mSQPSN = MaskSQPSN
	mMRA   = MaskMaxQPRdAtomic
	mMDRA  = MaskMaxDestRdAtomic
	mMRNR  = MaskMinRNRTimer
	mTMO   = MaskTimeout
	mRETRY = MaskRetryCnt
	mRNRR  = MaskRNRRetry
	mALT   = MaskAltPath
	mMIG   = MaskPathMigState
	mCUR   = MaskCurState
	mSQDN  = MaskEnSQDAsyncNotify
)

// per builds the per-type masks in the order rc, uc, ud, xrc_send,
// xrc_recv.
func per(rc, uc, ud, xs, xr AttrMask) [numSlots]AttrMask {
	return [numSlots]AttrMask{rc, uc, ud, xs, xr}
}

// legal is a valid cell with no required and no optional attributes: the
// moves to RESET and ERR, and RESET->RESET / ERR->ERR.
var legal = transition{valid: true}

var stateTable = [numStates][numStates]transition{
	StateReset: {
		StateReset: legal,
		StateInit: {valid: true,
			req: per(mPKEY|mPORT|mACC, mPKEY|mPORT|mACC, mPKEY|mPORT|mQKEY, mPKEY|mPORT|mACC, mPKEY|mPORT|mACC)},
	},
	StateInit: {
		StateReset: legal,
		StateErr:   legal,
		StateInit: {valid: true,
			opt: per(mPKEY|mPORT|mACC, mPKEY|mPORT|mACC, mPKEY|mPORT|mQKEY, mPKEY|mPORT|mACC, mPKEY|mPORT|mACC)},
		StateRTR: {valid: true,
			req: per(mAV|mMTU|mDQPN|mRQPSN|mMDRA|mMRNR, mAV|mMTU|mDQPN|mRQPSN, 0,
				mAV|mMTU|mDQPN|mRQPSN, mAV|mMTU|mDQPN|mRQPSN|mMDRA|mMRNR),
			opt: per(mALT|mACC|mPKEY, mALT|mACC|mPKEY, mPKEY|mQKEY, mALT|mACC|mPKEY, mALT|mACC|mPKEY)},
	},
	StateRTR: {
		StateReset: legal,
		StateErr:   legal,
		StateRTS: {valid: true,
			req: per(mTMO|mRETRY|mRNRR|mSQPSN|mMRA, mSQPSN, mSQPSN, mTMO|mRETRY|mRNRR|mSQPSN|mMRA, mTMO|mSQPSN),
			opt: per(mCUR|mALT|mACC|mMRNR|mMIG, mCUR|mALT|mACC|mMIG, mCUR|mQKEY,
				mCUR|mALT|mACC|mMIG, mCUR|mALT|mACC|mMRNR|mMIG)},
	},
	StateRTS: {
		StateReset: legal,
		StateErr:   legal,
		StateRTS: {valid: true,
			opt: per(mCUR|mACC|mALT|mMIG|mMRNR, mCUR|mACC|mALT|mMIG, mCUR|mQKEY,
				mCUR|mACC|mALT|mMIG, mCUR|mACC|mALT|mMIG|mMRNR)},
		StateSQD: {valid: true,
			opt: per(mSQDN, mSQDN, mSQDN, mSQDN, mSQDN)},
	},
	StateSQD: {
		StateReset: legal,
		StateErr:   legal,
		StateRTS: {valid: true,
			opt: per(mCUR|mALT|mACC|mMRNR|mMIG, mCUR|mALT|mACC|mMIG, mCUR|mQKEY,
				mCUR|mALT|mACC|mMIG, mCUR|mALT|mACC|mMRNR|mMIG)},
		StateSQD: {valid: true,
			opt: per(mPORT|mAV|mTMO|mRETRY|mRNRR|mMRA|mMDRA|mALT|mACC|mPKEY|mMRNR|mMIG,
				mAV|mALT|mACC|mPKEY|mMIG,
				mPKEY|mQKEY,
				mPORT|mAV|mTMO|mRETRY|mRNRR|mMRA|mALT|mACC|mPKEY|mMIG,
				mPORT|mAV|mTMO|mMDRA|mALT|mACC|mPKEY|mMRNR|mMIG)},
	},
	StateSQE: {
		StateReset: legal,
		StateErr:   legal,
		// RC and XRC never reach SQE (their send errors go to ERR), but
		// the table still lets them back to RTS with qp_state alone.
		StateRTS: {valid: true,
			opt: per(0, mCUR|mACC, mCUR|mQKEY, 0, 0)},
	},
	StateErr: {
		StateReset: legal,
		StateErr:   legal,
	},
}

// Transition reports whether modify may move a QP of type t from cur to
// next, and if so the attributes it requires and those it may also carry
// (MaskState, always allowed, is in neither). Unknown states or types are
// never valid.
func Transition(cur, next State, t Type) (req, opt AttrMask, valid bool) {
	if !cur.Valid() || !next.Valid() || !t.Valid() {
		return 0, 0, false
	}
	c := &stateTable[cur][next]
	if !c.valid {
		return 0, 0, false
	}
	i := typeSlot(t)
	return c.req[i], c.opt[i], true
}

// curStateOK lists the states a cur_qp_state assertion may name: the IBA
// lets the consumer pass it only where the QP can change state on its own
// (RTR/RTS via COMM_EST and SQ errors, SQD draining, SQE).
func curStateOK(s State) bool {
	return s == StateRTR || s == StateRTS || s == StateSQD || s == StateSQE
}

// ModifyOK checks a modify mask against the table, as ib_modify_qp_is_ok
// does. cur is the state the QP is in (or the asserted cur_qp_state). Without
// MaskState in mask the modify only changes attributes and is checked as
// cur -> cur, which is rdmavt's behaviour: it is illegal in RTR and SQE and
// may carry no attribute in RESET and ERR. The error names the first
// offending attribute in mask bit order.
func ModifyOK(cur, next State, t Type, mask AttrMask) error {
	if !t.Valid() {
		return &Error{Key: "qp_type", Msg: fmt.Sprintf("%v is not implemented", t), Err: ErrUnsupported}
	}
	if mask&MaskState == 0 {
		next = cur
	}
	if !cur.Valid() {
		return errorf("cur_qp_state", "invalid state %d", uint8(cur))
	}
	if !next.Valid() {
		return errorf("qp_state", "invalid state %d", uint8(next))
	}
	if mask&MaskCurState != 0 && !curStateOK(cur) {
		return errorf("cur_qp_state", "allowed only from RTR, RTS, SQD or SQE, not %v", cur)
	}
	req, opt, ok := Transition(cur, next, t)
	if !ok {
		if mask&MaskState == 0 {
			return errorf("qp_state", "illegal transition %v -> %v for %v (modify without qp_state)", cur, next, t)
		}
		return errorf("qp_state", "illegal transition %v -> %v for %v", cur, next, t)
	}
	if missing := req &^ mask; missing != 0 {
		return maskError(missing, fmt.Sprintf("required for %v -> %v on %v", cur, next, t))
	}
	if extra := mask &^ (req | opt | MaskState); extra != 0 {
		return maskError(extra, fmt.Sprintf("not allowed for %v -> %v on %v", cur, next, t))
	}
	return nil
}

// maskError names the lowest set bit of m by its text key. A bit without a
// key has no token to blame, so it is reported as attr_mask with its value.
func maskError(m AttrMask, msg string) *Error {
	low := m & -m
	if n := low.Names(); len(n) == 1 {
		return &Error{Key: n[0], Msg: msg}
	}
	return &Error{Key: "attr_mask", Msg: fmt.Sprintf("bit %#x %s", uint32(low), msg)}
}
