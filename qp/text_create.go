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
		"pd": textInto("pd", &r.PD, textHandle),
		"access": func(v string) (err error) {
			r.Access, err = textAccess("access", v)
			r.HasAccess = true
			return
		},
		"share": func(v string) (err error) {
			r.Share, err = textHandle("share", v)
			n++
			return
		},
		"offset": num("offset", &r.Offset),
		"length": num("length", &r.Length),
		"iova":   num("iova", &r.IOVA),
		"addr": func(v string) (err error) {
			r.Addr, err = textFull[uint64]("addr", v)
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
			return ReregMR{}, textErr("addr", "a translation of the caller's memory is addr, length and iova (no share or offset)")
		case r.Length == 0:
			return ReregMR{}, textErr("length", "out of range: 0 < 1")
		}
		r.HasTranslation = true
		return r, nil
	}
	switch {
	case n != 0 && n != 4:
		return ReregMR{}, textErr("share", "a new translation needs share, offset, length and iova together")
	case n == 4 && r.Length == 0:
		return ReregMR{}, textErr("length", "out of range: 0 < 1")
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
		"pd": textInto("pd", &c.PD, textHandle),
		"length": func(v string) (err error) {
			c.Length, err = textFull[uint64]("length", v)
			hasLength = true
			return
		},
		"implicit": func(v string) (err error) {
			var one uint8
			one, err = textFull[uint8]("implicit", v)
			if err == nil && one != 1 {
				err = textErr("implicit", "want 1, got "+textShow(v))
			}
			c.Implicit = true
			return
		},
		"iova": func(v string) (err error) {
			c.IOVA, err = textFull[uint64]("iova", v)
			c.HasIOVA = true
			return
		},
		"access": textInto("access", &c.Access, textAccess),
		"share":  textInto("share", &c.Share, textHandle),
		"offset": func(v string) (err error) { c.Offset, err = textFull[uint64]("offset", v); return },
		"addr": func(v string) (err error) {
			c.Addr, err = textFull[uint64]("addr", v)
			c.HasAddr = true
			return
		},
	}, "pd")
	switch {
	case err != nil:
	case c.Implicit && (hasLength || c.HasAddr || c.Share != 0 || c.HasIOVA || c.Access&AccessOnDemand == 0):
		err = textErr("implicit", "the implicit MR takes access with on_demand and no length, addr, iova or share")
	case c.Implicit:
		return c, nil
	case !hasLength:
		err = textErr("length", "missing required key")
	case c.HasAddr && c.Share != 0:
		err = textErr("addr", "not with share: addr is the caller's own memory")
	case c.Access&AccessOnDemand != 0 && !c.HasAddr:
		err = textErr("access", "on_demand needs addr=A (the caller's memory) or implicit=1")
	}
	if err == nil && c.Length == 0 && c.Share == 0 {
		// A zero-length MR is only a window on memory that exists (share=H),
		// as a zero-length registration on device memory is.
		err = textErr("length", "out of range: 0 < 1 (0 only with share=H)")
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
		"pd": textInto("pd", &c.PD, textHandle),
		"type": func(v string) (err error) {
			c.Type, err = textFull[uint8]("type", v)
			if err == nil && c.Type != 1 && c.Type != 2 {
				err = textErr("type", "want 1 or 2, got "+textShow(v))
			}
			return
		},
	}, "pd")
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
		"cqe": func(v string) (err error) {
			c.CQE, err = textFull[uint32]("cqe", v)
			if err == nil && c.CQE == 0 {
				err = textErr("cqe", "out of range: 0 < 1")
			}
			return
		},
		"comp_vector": textInto("comp_vector", &c.CompVector, textFull[uint32]),
		"wc_flags":    textInto("wc_flags", &c.WCFlags, parseCQWCFlags),
	}, "cqe")
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
		"pd":        textInto("pd", &c.PD, textHandle),
		"max_wr":    textInto("max_wr", &c.MaxWR, textFull[uint32]),
		"max_sge":   textInto("max_sge", &c.MaxSGE, textFull[uint32]),
		"srq_limit": textInto("srq_limit", &c.SRQLimit, textFull[uint32]),
		"srq_type": func(v string) error {
			switch strings.ToLower(v) {
			case "basic":
			case "xrc":
				c.XRC = true
			case "tm":
				return &Error{Key: "srq_type", Msg: "tag matching SRQs are not supported", Err: ErrUnsupported}
			default:
				return textErr("srq_type", "unknown SRQ type "+textQuote(v)+" (want basic or xrc)")
			}
			return nil
		},
		"xrcd": textInto("xrcd", &c.XRCD, textHandle),
		"cq":   textInto("cq", &c.CQ, textHandle),
	}, "pd", "max_wr", "max_sge")
	switch {
	case err != nil:
		return CreateSRQ{}, err
	case c.XRC && c.XRCD == 0:
		return CreateSRQ{}, textErr("xrcd", "required with srq_type=xrc")
	case c.XRC && c.CQ == 0:
		return CreateSRQ{}, textErr("cq", "required with srq_type=xrc")
	case !c.XRC && c.XRCD != 0:
		return CreateSRQ{}, textErr("xrcd", "only with srq_type=xrc")
	case !c.XRC && c.CQ != 0:
		return CreateSRQ{}, textErr("cq", "only with srq_type=xrc")
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
		"fd": func(v string) error {
			n, err := textFull[uint32]("fd", v)
			if err == nil && n > 1<<30 {
				err = textErr("fd", "out of range")
			}
			c.FD, c.HasFD = int32(n), true
			return err
		},
		"create": textInto("create", &c.Create, textBool),
		"excl":   textInto("excl", &c.Excl, textBool),
	})
	if err != nil {
		return OpenXRCD{}, err
	}
	if !c.HasFD && (c.Create || c.Excl) {
		return OpenXRCD{}, textErr("create", "create and excl need fd=N")
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
		"max_wr": func(v string) (err error) {
			m.Mask |= SRQMaxWR
			m.MaxWR, err = textFull[uint32]("max_wr", v)
			if err == nil && m.MaxWR == 0 {
				err = textErr("max_wr", "out of range: 0 < 1")
			}
			return
		},
		"srq_limit": func(v string) (err error) {
			m.Mask |= SRQLimit
			m.SRQLimit, err = textFull[uint32]("srq_limit", v)
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
		l.num("max_wr", uint64(m.MaxWR))
	}
	if m.Mask&SRQLimit != 0 {
		l.num("srq_limit", uint64(m.SRQLimit))
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
		"pd":       textInto("pd", &c.PD, textHandle),
		"port_num": textInto("port_num", &c.AH.PortNum, textFull[uint8]),
	}
	for k, set := range textAVKeys {
		keys[k] = func(v string) error { return set(&c.AH, k, v) }
	}
	if err := textKeys(s, keys, "pd", "dgid"); err != nil {
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
		"pd":         textInto("pd", &c.PD, textHandle),
		"qp_type":    textInto("qp_type", &c.Type, textQPType),
		"send_cq":    textInto("send_cq", &c.SendCQ, textHandle),
		"recv_cq":    textInto("recv_cq", &c.RecvCQ, textHandle),
		"srq":        textInto("srq", &c.SRQ, textHandle),
		"xrcd":       textInto("xrcd", &c.XRCD, textHandle),
		"open":       textInto("open", &c.Open, textHandle),
		"sq_sig_all": textInto("sq_sig_all", &c.SQSigAll, textBool),
	}
	for k, set := range textCapKeys {
		keys[k] = func(v string) error { return set(&c.Cap, k, v) }
	}
	if err := textKeys(s, keys, "qp_type"); err != nil {
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
			return textErr("xrcd", "required for qp_type=xrc_recv")
		case c.PD != 0 || c.SendCQ != 0 || c.RecvCQ != 0 || c.SRQ != 0:
			return textErr("xrcd", "an xrc_recv qp takes only xrcd= (and open=): no pd, cqs or srq")
		case c.Cap != Cap{} || c.SQSigAll:
			return textErr("xrcd", "an xrc_recv qp has no queues of its own to size")
		}
		return nil
	}
	switch {
	case c.XRCD != 0:
		return textErr("xrcd", "only for qp_type=xrc_recv")
	case c.Open != 0:
		return textErr("open", "only for qp_type=xrc_recv")
	case c.PD == 0:
		return textErr("pd", "missing required key")
	case c.SendCQ == 0:
		return textErr("send_cq", "missing required key")
	case c.Type == TypeXRCSend && c.SRQ != 0:
		return textErr("srq", "an xrc_send qp receives nothing")
	case c.RecvCQ == 0 && c.Type != TypeXRCSend:
		return textErr("recv_cq", "missing required key")
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
	l.num("pd", uint64(c.PD))
	if !c.Implicit {
		l.num("length", c.Length)
	}
	if c.HasIOVA {
		l.num("iova", c.IOVA)
	}
	if c.Access != 0 {
		l.str("access", c.Access.String())
	}
	if c.Share != 0 {
		l.num("share", uint64(c.Share))
		l.num("offset", c.Offset)
	}
	if c.HasAddr {
		l.num("addr", c.Addr)
	}
	if c.Implicit {
		l.num("implicit", 1)
	}
	return l.String()
}

// FormatCreateCQ is the cq/new line of c.
func FormatCreateCQ(c *CreateCQ) string {
	var l textLine
	l.num("cqe", uint64(c.CQE))
	if c.CompVector != 0 {
		l.num("comp_vector", uint64(c.CompVector))
	}
	if c.WCFlags != 0 {
		l.str("wc_flags", c.WCFlags.String())
	}
	return l.String()
}

// FormatCreateSRQ is the srq/new line of c.
func FormatCreateSRQ(c *CreateSRQ) string {
	var l textLine
	l.num("pd", uint64(c.PD))
	l.num("max_wr", uint64(c.MaxWR))
	l.num("max_sge", uint64(c.MaxSGE))
	if c.SRQLimit != 0 {
		l.num("srq_limit", uint64(c.SRQLimit))
	}
	if c.XRC {
		l.str("srq_type", "xrc")
		l.num("xrcd", uint64(c.XRCD))
		l.num("cq", uint64(c.CQ))
	}
	return l.String()
}

// FormatOpenXRCD is the xrcd/new line of c.
func FormatOpenXRCD(c *OpenXRCD) string {
	var l textLine
	if c.HasFD {
		l.num("fd", uint64(c.FD))
		if c.Create {
			l.num("create", 1)
		}
		if c.Excl {
			l.num("excl", 1)
		}
	}
	return l.String()
}

// FormatCreateAH is the ah/new line of c.
func FormatCreateAH(c *CreateAH) string {
	var l textLine
	l.num("pd", uint64(c.PD))
	textFormatAV(&l, &c.AH)
	if c.AH.PortNum != 0 {
		l.num("port_num", uint64(c.AH.PortNum))
	}
	return l.String()
}

// FormatCreateQP is the qp/new line of c. With an SRQ the receive caps
// are left out: the QP has no receive queue.
func FormatCreateQP(c *CreateQP) string {
	var l textLine
	if c.Type == TypeXRCRecv {
		l.str("qp_type", c.Type.String())
		l.num("xrcd", uint64(c.XRCD))
		if c.Open != 0 {
			l.num("open", uint64(c.Open))
		}
		return l.String()
	}
	l.num("pd", uint64(c.PD))
	l.str("qp_type", c.Type.String())
	l.num("send_cq", uint64(c.SendCQ))
	if c.RecvCQ != 0 || c.Type != TypeXRCSend {
		l.num("recv_cq", uint64(c.RecvCQ))
	}
	l.num("max_send_wr", uint64(c.Cap.MaxSendWR))
	l.num("max_send_sge", uint64(c.Cap.MaxSendSGE))
	l.num("max_inline_data", uint64(c.Cap.MaxInlineData))
	if c.SRQ != 0 {
		l.num("srq", uint64(c.SRQ))
	} else {
		l.num("max_recv_wr", uint64(c.Cap.MaxRecvWR))
		l.num("max_recv_sge", uint64(c.Cap.MaxRecvSGE))
	}
	if c.SQSigAll {
		l.num("sq_sig_all", 1)
	}
	return l.String()
}
