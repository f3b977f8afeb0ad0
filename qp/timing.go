package qp

import (
	"sort"
	"time"
)

// rnrMicros is the IBA RNR timer encoding (VERBS.md §5.3), in µs. Code 0 is
// the longest delay, not the shortest. 0x19 is 61440 (rxe's 61410 is a typo).
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRDelay is the wait an RNR NAK with timer code asks for (min_rnr_timer
// or the low 5 bits of an RNR NAK syndrome); higher bits are ignored.
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrMicros[code&0x1F]) * time.Microsecond
}

// AckTimeout is the local ACK timeout 4.096 µs × 2^timeout for the 5-bit
// timeout attribute. 0 disables the retransmit timer (rxe) and yields 0.
func AckTimeout(timeout uint8) time.Duration {
	timeout &= 0x1F
	if timeout == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << timeout
}

// AETH syndromes (the top byte of the AETH, VERBS.md §5.2). Bits 7:5 are the
// type, bits 4:0 the credit code (ACK), timer code (RNR NAK) or NAK code.
const (
	AETHAck           = 0x00 // ACK type; OR in a credit code
	AETHRNRNak        = 0x20 // RNR NAK type; OR in an RNR timer code
	AETHNakPSNSeq     = 0x60 // NAK: PSN sequence error
	AETHNakInvReq     = 0x61 // NAK: invalid request
	AETHNakRemAccess  = 0x62 // NAK: remote access error
	AETHNakRemOp      = 0x63 // NAK: remote operational error
	AETHCreditInvalid = 0x1F // ACK credit code: no credit information (unlimited)

	AETHTypeMask  = 0xE0 // syndrome bits that select ACK / RNR NAK / NAK
	AETHValueMask = 0x1F // syndrome bits carrying the code
)

// CreditUnlimited is what CreditCount returns for AETHCreditInvalid: the
// requester may send without waiting for RWQE credits.
const CreditUnlimited = ^uint32(0)

// creditTable maps credit codes 0..0x1E to the number of RWQEs they
// advertise: roughly logarithmic, 1, 1.5, 2, 3, 4, 6, ... (VERBS.md §5.2).
var creditTable = [31]uint32{
	0, 1, 2, 3, 4, 6, 8, 12,
	16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072,
	4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCount is the number of RWQEs a credit code advertises (low 5 bits
// used); CreditUnlimited for AETHCreditInvalid.
func CreditCount(code uint8) uint32 {
	code &= AETHValueMask
	if code == AETHCreditInvalid {
		return CreditUnlimited
	}
	return creditTable[code]
}

// CreditCode is the code a responder advertises with rwqes receive WQEs
// available: the largest whose count does not exceed rwqes, so the
// requester is never promised more than there is. Never AETHCreditInvalid.
func CreditCode(rwqes uint32) uint8 {
	i := sort.Search(len(creditTable), func(i int) bool { return creditTable[i] > rwqes })
	return uint8(i - 1)
}
