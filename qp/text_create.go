package qp

import (
	"fmt"
	"strings"
)

// Create requests: the one line written to a */new transaction file. Each
// parser checks the grammar, required keys and field widths; the device
// checks the values against its limits and its objects.

// textKeys runs one parser per key over a line, rejecting unknown and
// repeated keys, then checks the required ones.
func textKeys(s string, keys map[string]func(v string) error, required ...string) error {
	toks, err := textSplit(s)
	if err != nil {
		return err
	}
	seen := textSeen{}
	for _, t := range toks {
		set, ok := keys[t.key]
		if !ok {
			return textErr(t.key, "unknown key")
		}
		if err := seen.add(t.key); err != nil {
			return err
		}
		if err := set(t.val); err != nil {
			return err
		}
	}
	return seen.require(required...)
}

// textInto returns a key parser that stores into *dst.
func textInto[T any](key string, dst *T, parse func(k, v string) (T, error)) func(string) error {
	return func(v string) (err error) {
		*dst, err = parse(key, v)
		return
	}
}

// CreatePD is a pd/new request; it takes no keys.
type CreatePD struct{}

// ParseCreatePD accepts an empty line (any whitespace) and nothing else.
func ParseCreatePD(s string) (CreatePD, error) {
	return CreatePD{}, textKeys(s, nil)
}

// CreateMR is an mr/new request. Without iova (HasIOVA false) the MR starts
// at iova 0, so SGE addresses are offsets into its memory.
type CreateMR struct {
	PD      uint32
	Length  uint64
	IOVA    uint64
	HasIOVA bool
	Access  Access
	// Share names an MR of the same owner whose memory this MR uses,
	// starting Offset bytes into it (0: the MR gets memory of its own).
	Share  uint32
	Offset uint64
	// Addr (HasAddr) registers the caller's own memory at that address
	// of its address space, as ibv_reg_mr does; iova defaults to it.
	Addr    uint64
	HasAddr bool
	// Implicit is the implicit on-demand MR (ibv_reg_mr with addr NULL
	// and length SIZE_MAX): all of the caller's address space, iova the
	// address. It needs access on_demand and takes no length.
	Implicit bool
	// PID is the calling process, whose memory Addr names: filled by the
	// file system from the request, never from the text.
	PID int
}

// ReregMR is a rereg command on mr/H/ctl (ibv_rereg_mr): what is given
// changes, the keys stay. A new translation is memory of another MR
// (Share, Offset) at IOVA for Length bytes.
type ReregMR struct {
	PD             uint32 // 0: unchanged
	Access         Access
	HasAccess      bool
	Length         uint64
	IOVA           uint64
	Share          uint32
	Offset         uint64
	Addr           uint64 // HasAddr: the caller's own memory (not with Share)
	HasAddr        bool
	HasTranslation bool
	PID            int // the calling process (CreateMR.PID)
}

// ParseReregMR parses `[pd=H] [access=...] [share=H offset=N length=N iova=N | addr=A length=N iova=N]`;
// the translation keys come together.
func ParseReregMR(s string) (ReregMR, error) {
	var r ReregMR
	n := 0
	num := func(key string, dst *uint64) func(string) error {
		return func(v string) (err error) { *dst, err = textFull[uint64](key, v); n++; return }
	}
	err := textKeys(s, map[string]func(string) error{
		KeyPD: textInto(KeyPD, &r.PD, textHandle),
		KeyAccess: func(v string) (err error) {
			r.Access, err = textAccess(KeyAccess, v)
			r.HasAccess = true
			return
		},
		KeyShare: func(v string) (err error) {
			r.Share, err = textHandle(KeyShare, v)
			n++
			return
		},
		KeyOffset: num(KeyOffset, &r.Offset),
		KeyLength: num(KeyLength, &r.Length),
		KeyIOVA:   num(KeyIOVA, &r.IOVA),
		KeyAddr: func(v string) (err error) {
			r.Addr, err = textFull[uint64](KeyAddr, v)
			r.HasAddr = true
			return
		},
	})
	if err != nil {
		return ReregMR{}, err
	}
	if r.HasAddr {
		// addr length iova: the caller's own memory.
		switch {
		case r.Share != 0 || n != 2:
			return ReregMR{}, textErr(KeyAddr, "a translation of the caller's memory is addr, length and iova (no share or offset)")
		case r.Length == 0:
			return ReregMR{}, textErr(KeyLength, "out of range: 0 < 1")
		}
		r.HasTranslation = true
		return r, nil
	}
	switch {
	case n != 0 && n != 4:
		return ReregMR{}, textErr(KeyShare, "a new translation needs share, offset, length and iova together")
	case n == 4 && r.Length == 0:
		return ReregMR{}, textErr(KeyLength, "out of range: 0 < 1")
	case n == 0 && r.PD == 0 && !r.HasAccess:
		return ReregMR{}, textErr("rereg", "nothing to change (want pd=, access= or a translation)")
	}
	r.HasTranslation = n == 4
	return r, nil
}

// ParseCreateMR parses `pd=H length=N [iova=N] [access=...] [share=H offset=N | addr=A]`.
func ParseCreateMR(s string) (CreateMR, error) {
	var c CreateMR
	hasLength := false
	err := textKeys(s, map[string]func(string) error{
		KeyPD: textInto(KeyPD, &c.PD, textHandle),
		KeyLength: func(v string) (err error) {
			c.Length, err = textFull[uint64](KeyLength, v)
			hasLength = true
			return
		},
		KeyImplicit: func(v string) (err error) {
			var one uint8
			one, err = textFull[uint8](KeyImplicit, v)
			if err == nil && one != 1 {
				err = textErr(KeyImplicit, "want 1, got "+textShow(v))
			}
			c.Implicit = true
			return
		},
		KeyIOVA: func(v string) (err error) {
			c.IOVA, err = textFull[uint64](KeyIOVA, v)
			c.HasIOVA = true
			return
		},
		KeyAccess: textInto(KeyAccess, &c.Access, textAccess),
		KeyShare:  textInto(KeyShare, &c.Share, textHandle),
		KeyOffset: func(v string) (err error) { c.Offset, err = textFull[uint64](KeyOffset, v); return },
		KeyAddr: func(v string) (err error) {
			c.Addr, err = textFull[uint64](KeyAddr, v)
			c.HasAddr = true
			return
		},
	}, KeyPD)
	switch {
	case err != nil:
	case c.Implicit && (hasLength || c.HasAddr || c.Share != 0 || c.HasIOVA || c.Access&AccessOnDemand == 0):
		err = textErr(KeyImplicit, "the implicit MR takes access with on_demand and no length, addr, iova or share")
	case c.Implicit:
		return c, nil
	case !hasLength:
		err = textErr(KeyLength, "missing required key")
	case c.HasAddr && c.Share != 0:
		err = textErr(KeyAddr, "not with share: addr is the caller's own memory")
	case c.Access&AccessOnDemand != 0 && !c.HasAddr:
		err = textErr(KeyAccess, "on_demand needs addr=A (the caller's memory) or implicit=1")
	}
	if err == nil && c.Length == 0 && c.Share == 0 {
		// A zero-length MR is only a window on memory that exists (share=H),
		// as a zero-length registration on device memory is.
		err = textErr(KeyLength, "out of range: 0 < 1 (0 only with share=H)")
	}
	if err != nil {
		return CreateMR{}, err
	}
	return c, nil
}

// CreateMW is an mw/new request; Type is the ibv_mw_type, 1 or 2.
type CreateMW struct {
	PD   uint32
	Type uint8
}

// ParseCreateMW parses `pd=H [type=1|2]`; type defaults to 1.
func ParseCreateMW(s string) (CreateMW, error) {
	c := CreateMW{Type: 1}
	err := textKeys(s, map[string]func(string) error{
		KeyPD: textInto(KeyPD, &c.PD, textHandle),
		KeyType: func(v string) (err error) {
			c.Type, err = textFull[uint8](KeyType, v)
			if err == nil && c.Type != 1 && c.Type != 2 {
				err = textErr(KeyType, "want 1 or 2, got "+textShow(v))
			}
			return
		},
	}, KeyPD)
	if err != nil {
		return CreateMW{}, err
	}
	return c, nil
}

// CreateCQ is a cq/new request.
type CreateCQ struct {
	CQE        uint32
	CompVector uint32
	// WCFlags are the optional fields the CQ's completions carry
	// (ibv_cq_init_attr_ex's wc_flags, of those the device does not always
	// write): the completion timestamps. The device reads its clocks only
	// for a CQ that asked.
	WCFlags CQWCFlags
}

// CQWCFlags are a CQ's optional completion fields, as text
// wc_flags=completion_timestamp,completion_timestamp_wallclock (the names
// of IBV_WC_EX_WITH_COMPLETION_TIMESTAMP{,_WALLCLOCK}).
type CQWCFlags uint8

const (
	// CQTimestamp: each CQE carries the device clock (ticks at
	// hca_core_clock kHz) of its completion.
	CQTimestamp CQWCFlags = 1 << 0
	// CQTimestampWallclock: each CQE carries the wall-clock time of its
	// completion, in nanoseconds since the Unix epoch.
	CQTimestampWallclock CQWCFlags = 1 << 1
)

var cqWCFlagNames = []struct {
	f    CQWCFlags
	name string
}{
	{CQTimestamp, "completion_timestamp"},
	{CQTimestampWallclock, "completion_timestamp_wallclock"},
}

// String is the comma-separated list of the flags' names ("" for none).
func (f CQWCFlags) String() string {
	var b strings.Builder
	for _, n := range cqWCFlagNames {
		if f&n.f != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n.name)
		}
	}
	return b.String()
}

func parseCQWCFlags(key, v string) (CQWCFlags, error) {
	var f CQWCFlags
	for _, w := range strings.Split(v, ",") {
		found := false
		for _, n := range cqWCFlagNames {
			if w == n.name {
				f |= n.f
				found = true
			}
		}
		if !found {
			return 0, textErr(key, fmt.Sprintf("unknown flag %q (want completion_timestamp, completion_timestamp_wallclock)", w))
		}
	}
	return f, nil
}

// ParseCreateCQ parses `cqe=N [comp_vector=N] [wc_flags=F,...]`.
func ParseCreateCQ(s string) (CreateCQ, error) {
	var c CreateCQ
	err := textKeys(s, map[string]func(string) error{
		KeyCQE: func(v string) (err error) {
			c.CQE, err = textFull[uint32](KeyCQE, v)
			if err == nil && c.CQE == 0 {
				err = textErr(KeyCQE, "out of range: 0 < 1")
			}
			return
		},
		KeyCompVector: textInto(KeyCompVector, &c.CompVector, textFull[uint32]),
		KeyWcFlags:    textInto(KeyWcFlags, &c.WCFlags, parseCQWCFlags),
	}, KeyCQE)
	if err != nil {
		return CreateCQ{}, err
	}
	return c, nil
}

// CreateSRQ is an srq/new request. An XRC SRQ (XRC true,
// ibv_create_srq_ex with IBV_SRQT_XRC) also names its XRC domain handle
// and the CQ its receive completions go to.
type CreateSRQ struct {
	PD                      uint32
	MaxWR, MaxSGE, SRQLimit uint32
	XRC                     bool
	XRCD, CQ                uint32
}

// ParseCreateSRQ parses `pd=H max_wr=N max_sge=N [srq_limit=N]
// [srq_type=basic|xrc xrcd=H cq=H]`: xrcd and cq come with srq_type=xrc
// and only with it.
func ParseCreateSRQ(s string) (CreateSRQ, error) {
	var c CreateSRQ
	err := textKeys(s, map[string]func(string) error{
		KeyPD:       textInto(KeyPD, &c.PD, textHandle),
		KeyMaxWR:    textInto(KeyMaxWR, &c.MaxWR, textFull[uint32]),
		KeyMaxSGE:   textInto(KeyMaxSGE, &c.MaxSGE, textFull[uint32]),
		KeySRQLimit: textInto(KeySRQLimit, &c.SRQLimit, textFull[uint32]),
		KeySRQType: func(v string) error {
			switch strings.ToLower(v) {
			case "basic":
			case "xrc":
				c.XRC = true
			case "tm":
				return &Error{Key: KeySRQType, Msg: "tag matching SRQs are not supported", Err: ErrUnsupported}
			default:
				return textErr(KeySRQType, "unknown SRQ type "+textQuote(v)+" (want basic or xrc)")
			}
			return nil
		},
		KeyXRCD: textInto(KeyXRCD, &c.XRCD, textHandle),
		KeyCQ:   textInto(KeyCQ, &c.CQ, textHandle),
	}, KeyPD, KeyMaxWR, KeyMaxSGE)
	switch {
	case err != nil:
		return CreateSRQ{}, err
	case c.XRC && c.XRCD == 0:
		return CreateSRQ{}, textErr(KeyXRCD, "required with srq_type=xrc")
	case c.XRC && c.CQ == 0:
		return CreateSRQ{}, textErr(KeyCQ, "required with srq_type=xrc")
	case !c.XRC && c.XRCD != 0:
		return CreateSRQ{}, textErr(KeyXRCD, "only with srq_type=xrc")
	case !c.XRC && c.CQ != 0:
		return CreateSRQ{}, textErr(KeyCQ, "only with srq_type=xrc")
	}
	return c, nil
}

// OpenXRCD is an xrcd/new request, ibv_open_xrcd. Without FD the domain
// is private to the new handle. With it, the domain is the one of the file
// the caller's descriptor FD refers to (by inode, as the kernel's), made
// if there is none only with Create (O_CREAT), refused if there is one
// with Excl (O_EXCL).
type OpenXRCD struct {
	FD           int32
	HasFD        bool
	Create, Excl bool
}

// ParseOpenXRCD parses `[fd=N [create=1] [excl=1]]`.
func ParseOpenXRCD(s string) (OpenXRCD, error) {
	var c OpenXRCD
	err := textKeys(s, map[string]func(string) error{
		KeyFD: func(v string) error {
			n, err := textFull[uint32](KeyFD, v)
			if err == nil && n > 1<<30 {
				err = textErr(KeyFD, "out of range")
			}
			c.FD, c.HasFD = int32(n), true
			return err
		},
		KeyCreate: textInto(KeyCreate, &c.Create, textBool),
		KeyExcl:   textInto(KeyExcl, &c.Excl, textBool),
	})
	if err != nil {
		return OpenXRCD{}, err
	}
	if !c.HasFD && (c.Create || c.Excl) {
		return OpenXRCD{}, textErr(KeyCreate, "create and excl need fd=N")
	}
	return c, nil
}

// ModifySRQ is an srq/H/ctl modify, ibv_modify_srq: the attributes whose
// bits are in Mask change.
type ModifySRQ struct {
	Mask     SRQAttrMask
	MaxWR    uint32 // SRQMaxWR: resize the queue to at least this many WRs
	SRQLimit uint32 // SRQLimit: arm the limit event (0 disarms)
}

// SRQAttrMask is ibv_srq_attr_mask.
type SRQAttrMask uint8

const (
	SRQMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR
	SRQLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT
)

// ParseModifySRQ parses the arguments of `modify [max_wr=N] [srq_limit=N]`
// (at least one).
func ParseModifySRQ(s string) (ModifySRQ, error) {
	var m ModifySRQ
	err := textKeys(s, map[string]func(string) error{
		KeyMaxWR: func(v string) (err error) {
			m.Mask |= SRQMaxWR
			m.MaxWR, err = textFull[uint32](KeyMaxWR, v)
			if err == nil && m.MaxWR == 0 {
				err = textErr(KeyMaxWR, "out of range: 0 < 1")
			}
			return
		},
		KeySRQLimit: func(v string) (err error) {
			m.Mask |= SRQLimit
			m.SRQLimit, err = textFull[uint32](KeySRQLimit, v)
			return
		},
	})
	if err == nil && m.Mask == 0 {
		err = &Error{Msg: "nothing to modify (want max_wr=N and/or srq_limit=N)"}
	}
	if err != nil {
		return ModifySRQ{}, err
	}
	return m, nil
}

// FormatModifySRQ is the srq/H/ctl line of m, the command included.
func FormatModifySRQ(m *ModifySRQ) string {
	l := textLine{b: []byte("modify")}
	if m.Mask&SRQMaxWR != 0 {
		l.num(KeyMaxWR, uint64(m.MaxWR))
	}
	if m.Mask&SRQLimit != 0 {
		l.num(KeySRQLimit, uint64(m.SRQLimit))
	}
	return l.String()
}

// CreateAH is an ah/new request.
type CreateAH struct {
	PD uint32
	AH AH
}

// ParseCreateAH parses `pd=H dgid=GID` plus any other AV key and port_num.
func ParseCreateAH(s string) (CreateAH, error) {
	var c CreateAH
	keys := map[string]func(string) error{
		KeyPD:      textInto(KeyPD, &c.PD, textHandle),
		KeyPortNum: textInto(KeyPortNum, &c.AH.PortNum, textFull[uint8]),
	}
	for k, set := range textAVKeys {
		keys[k] = func(v string) error { return set(&c.AH, k, v) }
	}
	if err := textKeys(s, keys, KeyPD, KeyDGID); err != nil {
		return CreateAH{}, err
	}
	return c, nil
}

// CreateQP is a qp/new request. SRQ 0 means none. Caps left out are 0: the
// device decides what a zero cap means for the QP type.
//
// An xrc_send QP has a PD and a send CQ (recv_cq, if given, must be a CQ
// too, and is unused). An xrc_recv QP has none of these: it names only its
// XRC domain handle XRCD. With Open (ibv_open_qp) the request makes no QP
// but another hold on the xrc_recv QP Open of the domain XRCD is a handle
// of.
type CreateQP struct {
	PD             uint32
	Type           Type
	SendCQ, RecvCQ uint32
	SRQ            uint32
	XRCD           uint32
	Open           uint32
	Cap            Cap
	SQSigAll       bool
}

// ParseCreateQP parses `pd=H qp_type=rc|uc|ud|xrc_send send_cq=H recv_cq=H
// [srq=H] [max_send_wr=N ...] [sq_sig_all=0|1]`, `qp_type=xrc_recv xrcd=H`
// and `qp_type=xrc_recv xrcd=H open=QPN`. The ibv_qp_type names rdmafs
// does not implement fail with ErrUnsupported.
func ParseCreateQP(s string) (CreateQP, error) {
	var c CreateQP
	keys := map[string]func(string) error{
		KeyPD:       textInto(KeyPD, &c.PD, textHandle),
		KeyQPType:   textInto(KeyQPType, &c.Type, textQPType),
		KeySendCQ:   textInto(KeySendCQ, &c.SendCQ, textHandle),
		KeyRecvCQ:   textInto(KeyRecvCQ, &c.RecvCQ, textHandle),
		KeySRQ:      textInto(KeySRQ, &c.SRQ, textHandle),
		KeyXRCD:     textInto(KeyXRCD, &c.XRCD, textHandle),
		KeyOpen:     textInto(KeyOpen, &c.Open, textHandle),
		KeySQSigAll: textInto(KeySQSigAll, &c.SQSigAll, textBool),
	}
	for k, set := range textCapKeys {
		keys[k] = func(v string) error { return set(&c.Cap, k, v) }
	}
	if err := textKeys(s, keys, KeyQPType); err != nil {
		return CreateQP{}, err
	}
	if err := c.checkKeys(); err != nil {
		return CreateQP{}, err
	}
	return c, nil
}

// checkKeys applies the per-type rules of which keys a create names.
func (c *CreateQP) checkKeys() error {
	if c.Type == TypeXRCRecv {
		switch {
		case c.XRCD == 0:
			return textErr(KeyXRCD, "required for qp_type=xrc_recv")
		case c.PD != 0 || c.SendCQ != 0 || c.RecvCQ != 0 || c.SRQ != 0:
			return textErr(KeyXRCD, "an xrc_recv qp takes only xrcd= (and open=): no pd, cqs or srq")
		case c.Cap != Cap{} || c.SQSigAll:
			return textErr(KeyXRCD, "an xrc_recv qp has no queues of its own to size")
		}
		return nil
	}
	switch {
	case c.XRCD != 0:
		return textErr(KeyXRCD, "only for qp_type=xrc_recv")
	case c.Open != 0:
		return textErr(KeyOpen, "only for qp_type=xrc_recv")
	case c.PD == 0:
		return textErr(KeyPD, "missing required key")
	case c.SendCQ == 0:
		return textErr(KeySendCQ, "missing required key")
	case c.Type == TypeXRCSend && c.SRQ != 0:
		return textErr(KeySRQ, "an xrc_send qp receives nothing")
	case c.RecvCQ == 0 && c.Type != TypeXRCSend:
		return textErr(KeyRecvCQ, "missing required key")
	}
	return nil
}

// textQPType accepts rc, uc, ud in any case; the other ibv_qp_type names
// are known but not implemented.
func textQPType(k, v string) (Type, error) {
	if t, ok := ParseType(v); ok {
		return t, nil
	}
	switch strings.ToLower(v) {
	case "raw_packet", "driver":
		return 0, &Error{Key: k, Msg: "QP type " + v + " is not supported", Err: ErrUnsupported}
	}
	return 0, textErr(k, "unknown QP type "+textQuote(v)+" (want rc, uc, ud, xrc_send or xrc_recv)")
}

// The formatters below write the create lines the parsers above read, so
// a client (the verbs library) and the daemon share one grammar. Each
// writes the required keys and the optional ones that differ from their
// default; Parse(Format(c)) is c.

// FormatCreateMR is the mr/new line of c.
func FormatCreateMR(c *CreateMR) string {
	var l textLine
	l.num(KeyPD, uint64(c.PD))
	if !c.Implicit {
		l.num(KeyLength, c.Length)
	}
	if c.HasIOVA {
		l.num(KeyIOVA, c.IOVA)
	}
	if c.Access != 0 {
		l.str(KeyAccess, c.Access.String())
	}
	if c.Share != 0 {
		l.num(KeyShare, uint64(c.Share))
		l.num(KeyOffset, c.Offset)
	}
	if c.HasAddr {
		l.num(KeyAddr, c.Addr)
	}
	if c.Implicit {
		l.num(KeyImplicit, 1)
	}
	return l.String()
}

// FormatCreateCQ is the cq/new line of c.
func FormatCreateCQ(c *CreateCQ) string {
	var l textLine
	l.num(KeyCQE, uint64(c.CQE))
	if c.CompVector != 0 {
		l.num(KeyCompVector, uint64(c.CompVector))
	}
	if c.WCFlags != 0 {
		l.str(KeyWcFlags, c.WCFlags.String())
	}
	return l.String()
}

// FormatCreateSRQ is the srq/new line of c.
func FormatCreateSRQ(c *CreateSRQ) string {
	var l textLine
	l.num(KeyPD, uint64(c.PD))
	l.num(KeyMaxWR, uint64(c.MaxWR))
	l.num(KeyMaxSGE, uint64(c.MaxSGE))
	if c.SRQLimit != 0 {
		l.num(KeySRQLimit, uint64(c.SRQLimit))
	}
	if c.XRC {
		l.str(KeySRQType, "xrc")
		l.num(KeyXRCD, uint64(c.XRCD))
		l.num(KeyCQ, uint64(c.CQ))
	}
	return l.String()
}

// FormatOpenXRCD is the xrcd/new line of c.
func FormatOpenXRCD(c *OpenXRCD) string {
	var l textLine
	if c.HasFD {
		l.num(KeyFD, uint64(c.FD))
		if c.Create {
			l.num(KeyCreate, 1)
		}
		if c.Excl {
			l.num(KeyExcl, 1)
		}
	}
	return l.String()
}

// FormatCreateAH is the ah/new line of c.
func FormatCreateAH(c *CreateAH) string {
	var l textLine
	l.num(KeyPD, uint64(c.PD))
	textFormatAV(&l, &c.AH)
	if c.AH.PortNum != 0 {
		l.num(KeyPortNum, uint64(c.AH.PortNum))
	}
	return l.String()
}

// FormatCreateQP is the qp/new line of c. With an SRQ the receive caps
// are left out: the QP has no receive queue.
func FormatCreateQP(c *CreateQP) string {
	var l textLine
	if c.Type == TypeXRCRecv {
		l.str(KeyQPType, c.Type.String())
		l.num(KeyXRCD, uint64(c.XRCD))
		if c.Open != 0 {
			l.num(KeyOpen, uint64(c.Open))
		}
		return l.String()
	}
	l.num(KeyPD, uint64(c.PD))
	l.str(KeyQPType, c.Type.String())
	l.num(KeySendCQ, uint64(c.SendCQ))
	if c.RecvCQ != 0 || c.Type != TypeXRCSend {
		l.num(KeyRecvCQ, uint64(c.RecvCQ))
	}
	l.num(KeyMaxSendWR, uint64(c.Cap.MaxSendWR))
	l.num(KeyMaxSendSGE, uint64(c.Cap.MaxSendSGE))
	l.num(KeyMaxInlineData, uint64(c.Cap.MaxInlineData))
	if c.SRQ != 0 {
		l.num(KeySRQ, uint64(c.SRQ))
	} else {
		l.num(KeyMaxRecvWR, uint64(c.Cap.MaxRecvWR))
		l.num(KeyMaxRecvSGE, uint64(c.Cap.MaxRecvSGE))
	}
	if c.SQSigAll {
		l.num(KeySQSigAll, 1)
	}
	return l.String()
}
