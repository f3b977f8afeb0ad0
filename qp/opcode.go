package qp

// OpInfo describes what a send opcode does, so that post-time checks and
// the engine ask the table instead of switching on opcodes.
//
// It is 16 bytes, SGEAccess first (TestOpInfoSize): the engine copies it
// for every WQE, and a 20-byte copy is two overlapping 16-byte moves
// whose reload stalls store forwarding (a quarter of the engine's time at
// 8-byte FETCH_ADD when it was 20).
type OpInfo struct {
	// SGEAccess is the access the local SGEs need: LOCAL_WRITE where the
	// device writes into them (READ and atomics).
	SGEAccess Access
	Types     uint8 // bit typeBit(t) for each QP type t allowing it
	Remote    bool  // needs remote_addr+rkey
	Read      bool  // RDMA READ: data flows from the remote MR into the SGEs
	Atomic    bool  // 8-byte atomic on remote memory, result into the SGE
	Write     bool  // RDMA WRITE family
	Send      bool  // SEND family, consumes an RWQE (WRITE_WITH_IMM does too: see ConsumesRWQE)
	Imm       bool  // carries imm_data
	Inv       bool  // carries invalidate_rkey (remote for SEND_WITH_INV, local for LOCAL_INV)
	Local     bool  // LOCAL_INV, BIND_MW: executed on the local device, no packet
	// AtomicWrite is ATOMIC WRITE: the 8 bytes of compare_add stored at
	// remote_addr as one atomic word. No SGEs; the response carries no data.
	AtomicWrite bool
	WC          WCOpcode // completion opcode of the send CQE
}

// ConsumesRWQE reports whether the operation takes a receive WQE at the
// responder: the SEND family and RDMA WRITE with immediate.
func (o *OpInfo) ConsumesRWQE() bool { return o.Send || (o.Write && o.Imm) }

// RdAtomic reports whether the operation is one the responder answers with
// a response of its own and keeps a responder resource for (READ, the
// atomics, ATOMIC WRITE), so that it takes one of the requester's
// max_rd_atomic slots and needs max_dest_rd_atomic at the responder (rxe's
// check_init_depth and check_resource).
func (o *OpInfo) RdAtomic() bool { return o.Read || o.Atomic || o.AtomicWrite }

// DataOut reports whether the operation carries payload from the local SGEs
// (or inline data) to the wire: the SEND and WRITE families.
func (o *OpInfo) DataOut() bool { return o.Send || o.Write }

// typeBit is t's bit in OpInfo.Types. XRC_SEND (9) is past the byte's
// eight bits and takes bit 1, which no QP type number uses; XRC_RECV
// sends nothing and has none.
func typeBit(t Type) uint8 {
	switch {
	case t == TypeXRCSend:
		return 1 << 1
	case t < 8:
		return uint8(1) << t
	}
	return 0
}

const (
	onRC    = uint8(1) << TypeRC
	onUC    = uint8(1) << TypeUC
	onUD    = uint8(1) << TypeUD
	onXRC   = uint8(1) << 1 // typeBit(TypeXRCSend)
	onRCX   = onRC | onXRC
	onRCUC  = onRC | onUC | onXRC // the connected types that send
	onAllQP = onRC | onUC | onUD | onXRC
)

// opTable is rdmafs' own opcode table (VERBS.md §3.2 and §4.2). Where rxe
// accepts an opcode at post time that it then cannot send (SEND_WITH_INV on
// UC/UD), rdmafs refuses it at post time instead.
var opTable = [numWROpcodes]OpInfo{
	WRRDMAWrite:         {Types: onRCUC, Remote: true, Write: true, WC: WCRDMAWrite},
	WRRDMAWriteWithImm:  {Types: onRCUC, Remote: true, Write: true, Imm: true, WC: WCRDMAWrite},
	WRSend:              {Types: onAllQP, Send: true, WC: WCSend},
	WRSendWithImm:       {Types: onAllQP, Send: true, Imm: true, WC: WCSend},
	WRRDMARead:          {Types: onRCX, Remote: true, Read: true, SGEAccess: AccessLocalWrite, WC: WCRDMARead},
	WRAtomicCmpAndSwp:   {Types: onRCX, Remote: true, Atomic: true, SGEAccess: AccessLocalWrite, WC: WCCompSwap},
	WRAtomicFetchAndAdd: {Types: onRCX, Remote: true, Atomic: true, SGEAccess: AccessLocalWrite, WC: WCFetchAdd},
	WRLocalInv:          {Types: onRCUC, Inv: true, Local: true, WC: WCLocalInv},
	WRBindMW:            {Types: onRCUC, Local: true, WC: WCBindMW},
	WRSendWithInv:       {Types: onRCX, Send: true, Inv: true, WC: WCSend},
	WRAtomicWrite:       {Types: onRC, Remote: true, AtomicWrite: true, WC: WCAtomicWrite},
}

// Info returns the table row of o; false for an opcode rdmafs does not know.
func (o WROpcode) Info() (OpInfo, bool) {
	if !o.Valid() {
		return OpInfo{}, false
	}
	return opTable[o], true
}

// AllowedOn reports whether o may be posted on a QP of type t.
func (o WROpcode) AllowedOn(t Type) bool {
	// The row's Types in place: no copy of it (the engine asks per WQE).
	return o.Valid() && t.Valid() && opTable[o].Types&typeBit(t) != 0
}
