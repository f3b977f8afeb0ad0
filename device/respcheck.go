package device

import "rdmafs/qp"

// The responder's rules, once. Each operation is a check, which looks and
// changes nothing but its lookups' hints and the scratch copy of the
// receive WQE it peeks at (it gives a verdict: go on, or the NAK and the
// receive status the request is refused with), and an apply, which
// changes memory and the responder's state. The packet path (respondRCLocked and the
// resp*Locked it calls, respondUCLocked, respondUDLocked) and the direct
// path (executeDirectLocked and the execute*Locked it calls, loopback.go)
// both call these, so a request is refused for the same reason on both: the
// direct path executes a WQE only when every check passes, and sends it as
// packets otherwise, whose responder refuses it with the verdict's NAK.

// respErr is the responder's verdict on a request.
type respErr uint8

const (
	respOK        respErr = iota
	respRNR               // no receive WQE posted: RNR NAK (RC), message dropped (UC, UD)
	respInvReq            // invalid request: NAK; the receive in progress completes rem_inv_req_err
	respRemAccess         // the rkey, its range or access: NAK remote access error
	respRecvBad           // the receive WQE does not decode: NAK remote operational; loc_qp_op_err
	respRecvShort         // the receive WQE is too short: NAK invalid request; loc_len_err
	respRecvProt          // a receive SGE's lkey fails: NAK remote operational; loc_prot_err
)

// nak is the AETH syndrome an RC responder answers e with (but respRNR,
// whose syndrome carries min_rnr_timer: rnrLocked) and the status of the
// receive completion it ends, if one is in progress.
func (e respErr) nak() (uint8, qp.WCStatus) {
	switch e {
	case respRemAccess:
		return aethNAKRemAccess, qp.WCRemAccessErr
	case respRecvBad:
		return aethNAKRemOp, qp.WCLocQPOpErr
	case respRecvShort:
		return aethNAKInvReq, qp.WCLocLenErr
	case respRecvProt:
		return aethNAKRemOp, qp.WCLocProtErr
	}
	return aethNAKInvReq, qp.WCRemInvReqErr
}

// refuseLocked answers an RC request at psn that a check refused with e.
func (r *responder) refuseLocked(psn qp.PSN, e respErr) {
	if e == respRNR {
		r.rnrLocked(psn)
		return
	}
	syn, st := e.nak()
	r.nakLocked(psn, syn, st)
}

// allowsLocked reports whether q's access flags let remote requests of
// kind acc in (checked for every packet: a modify may take it away
// mid-message).
func (r *responder) allowsLocked(acc qp.Access) bool { return r.q.attr.QPAccessFlags&acc == acc }

// checkWriteLocked checks an RDMA WRITE message of n bytes at va through
// rkey, as its first packet arrives: the QP's remote write access, the
// message size, the rkey for the whole message. It returns the MR and the
// offset of va in it (none for zero bytes).
func (r *responder) checkWriteLocked(va uint64, rkey uint32, n uint64) (*MR, uint64, respErr) {
	return r.checkRemoteLocked(va, rkey, n, qp.AccessRemoteWrite, false)
}

// checkReadLocked checks an RDMA READ request of n bytes at va through
// rkey as checkWriteLocked checks a WRITE, with remote read access and a
// responder resource (max_dest_rd_atomic) on the QP.
func (r *responder) checkReadLocked(va uint64, rkey uint32, n uint64) (*MR, uint64, respErr) {
	return r.checkRemoteLocked(va, rkey, n, qp.AccessRemoteRead, true)
}

// checkRemoteLocked is a WRITE's or READ's check: access acc (and a
// responder resource if resource) on the QP, the message size, the rkey.
func (r *responder) checkRemoteLocked(va uint64, rkey uint32, n uint64, acc qp.Access, resource bool) (*MR, uint64, respErr) {
	q := r.q
	if !r.allowsLocked(acc) || resource && q.attr.MaxDestRdAtomic == 0 || n > qp.MaxMsgSize {
		return nil, 0, respInvReq
	}
	if n == 0 {
		return nil, 0, respOK
	}
	mr, off, f := q.dev.rkeyFindLocked(q, rkey, va, n, acc)
	if f != faultNone {
		return nil, 0, respRemAccess
	}
	return mr, off, respOK
}

// checkAtomicLocked checks an atomic (acc AccessRemoteAtomic) or an
// ATOMIC WRITE (acc AccessRemoteWrite, as rxe checks it) on the word at
// va through rkey: the access and a responder resource on the QP, the
// address 8-aligned, the rkey, and the memory itself 8-aligned (an MR's
// iova and its memory may disagree modulo 8; rxe checks the real address
// too). It returns the word's bytes and their MR.
func (r *responder) checkAtomicLocked(va uint64, rkey uint32, acc qp.Access) ([]byte, *MR, respErr) {
	q := r.q
	if !r.allowsLocked(acc) || q.attr.MaxDestRdAtomic == 0 || va&7 != 0 {
		return nil, nil, respInvReq
	}
	b, mr, f := q.dev.rkeyMRLocked(q, rkey, va, 8, acc)
	if f != faultNone {
		return nil, nil, respRemAccess
	}
	if !aligned8(b) {
		return nil, nil, respInvReq
	}
	return b, mr, respOK
}

// applyAtomicLocked executes a checked CMP_SWAP (cmpSwap: compare, then
// swap in swapAdd) or FETCH_ADD (add swapAdd) on word b of mr at va, with
// atomicArgs's operands, and returns the original value; an on-demand
// MR's word goes back to the program, which may have unmapped it
// meanwhile (respRemAccess).
func applyAtomicLocked(b []byte, mr *MR, va uint64, cmpSwap bool, compare, swapAdd uint64) (uint64, respErr) {
	var orig uint64
	if cmpSwap {
		orig = atomicCompareSwap(b, compare, swapAdd)
	} else {
		orig = atomicFetchAdd(b, swapAdd)
	}
	if mr.wroteLocked(va, b) != faultNone {
		return orig, respRemAccess
	}
	return orig, respOK
}

// acceptRdAtomicLocked takes a checked READ or atomic request whose PSNs
// are first..last: its responder resource (for duplicates, the caller
// fills the rest), the MSN (C9-148: a READ counts when it is accepted) and
// the expected PSN past it.
func (r *responder) acceptRdAtomicLocked(first, last qp.PSN) *respResource {
	res := r.saveResourceLocked(first, last)
	r.msn++
	r.psn = last.Add(1)
	return res
}

// checkRecvLocked peeks at the receive WQE a SEND or WRITE_WITH_IMM
// would take (its SRQ's lockTake held, if it has one) into r.rwqe
// and gives its verdict (recvVerdict).
func (r *responder) checkRecvLocked() respErr { return recvVerdict(r.peekRecvLocked()) }

// recvVerdict is the verdict on what peekRecvLocked found: respRNR when
// no receive WQE is posted, respRecvBad when it cannot be used.
func recvVerdict(present, malformed bool) respErr {
	switch {
	case malformed:
		return respRecvBad
	case !present:
		return respRNR
	}
	return respOK
}

// recvFitsLocked checks that n more bytes fit into the receive WQE at
// offset off: a receive buffer too short is a local length error for the
// receiver and an invalid request for the sender (the mlx5 / IBA pairing).
func (r *responder) recvFitsLocked(off, n uint64) respErr {
	if total, _ := sglLength(r.rwqe.SGL); off+n > total {
		return respRecvShort
	}
	return respOK
}

// receivedDirectLocked moves the responder as n request packets in
// sequence, of bytes payload in all, would have (the direct path: the
// peer's requester executed them against this QP): its receive counters,
// comm_est and the expected PSN.
func (r *responder) receivedDirectLocked(n uint32, bytes uint64) {
	q := r.q
	q.Counters.PacketsRecv += uint64(n)
	q.Counters.BytesRecv += bytes
	r.inSeqLocked()
	r.psn = r.psn.Add(n)
}

// recvDoneLocked completes a SEND message of n bytes into the receive WQE
// (its MSN counted), with its immediate data or the rkey it invalidated.
func (r *responder) recvDoneLocked(n uint32, imm, inv bool, data uint32, se bool) {
	var wf qp.WCFlags
	switch {
	case imm:
		wf = qp.WCWithImm
	case inv:
		wf = qp.WCWithInv
	}
	r.completeRecvLocked(qp.WCSuccess, n, wf, data, se)
}

// atomicArgs is what an atomic WR asks of the responder, as its packet
// carries it (the requester builds the packet from it, the direct path
// applies it): CMP_SWAP or FETCH_ADD, the compare value, the swap value or
// the addend.
func atomicArgs(wr *qp.SendWR) (cmpSwap bool, compare, swapAdd uint64) {
	if wr.Opcode == qp.WRAtomicCmpAndSwp {
		return true, wr.CompareAdd, wr.Swap
	}
	return false, 0, wr.CompareAdd
}
