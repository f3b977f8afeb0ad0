// Package show reads an rdmafs mount as rdmafs show and rdmafs trace
// present it: the objects of each kind as tables or JSON (Collect, Watch),
// and one QP's packets decoded from the device's capture (Tracer). It
// reads the mount's files as any user reads them: each object's attr file
// and the port file with qp's parser of it (the daemon prints it with
// qp's formatter), the counters, lists of numbers, as key=value maps. An
// object whose attr the caller may not read (another user's: attr is
// 0600) is not shown, so a user sees its own objects and root sees all.
// Nothing here talks to the daemon other than through those files. The
// command line (flags, arguments, signals) is cmd/rdmafs's.
package show

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"rdmafs/internal/execview"
	"rdmafs/qp"
)

// Kinds are the object kinds, in the order show prints them.
var Kinds = []string{"pd", "mr", "mw", "cq", "srq", "ah", "qp"}

// IsKind reports whether s is one of Kinds.
func IsKind(s string) bool { return slices.Contains(Kinds, s) }

// Options is what to show and how.
type Options struct {
	Mount    string
	Kinds    []string
	JSON     bool          // one JSON object (a line per frame with Watch)
	Interval time.Duration // Watch's, for its title line
}

// ResolveMount checks that mnt is an rdmafs mount, or finds the machine's
// only one when mnt is empty.
func ResolveMount(mnt string) (string, error) {
	if mnt == "" {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return "", err
		}
		defer f.Close()
		return FindMount(f)
	}
	if _, err := os.Stat(filepath.Join(mnt, "qp", "new")); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%s is not an rdmafs mount (%v)", mnt, err)
	}
	return mnt, nil
}

// FindMount returns the one mount of type fuse.rdmafs in a mountinfo
// listing, or says why there is not exactly one.
func FindMount(mountinfo io.Reader) (string, error) {
	// The devices a program of rdmafs exec would see: the same scan.
	devs, err := execview.Devices(mountinfo, "", func(string) bool { return true })
	if err != nil {
		return "", err
	}
	switch len(devs) {
	case 0:
		return "", errors.New("no rdmafs mount on this machine (/proc/self/mountinfo has no fuse.rdmafs); mount one with rdmafs mount DIR")
	case 1:
		return devs[0].Mount, nil
	}
	var found []string
	for _, d := range devs {
		found = append(found, d.Mount)
	}
	return "", fmt.Errorf("%d rdmafs mounts (%s): name one", len(found), strings.Join(found, ", "))
}

// --- reading the tree ----------------------------------------------------

// kv is a key=value file.
type kv map[string]string

func (m kv) u64(k string) uint64 {
	v, _ := strconv.ParseUint(m[k], 0, 64)
	return v
}

func (m kv) u32(k string) uint32 { return uint32(m.u64(k)) }

func parseKV(b []byte) kv {
	m := kv{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			m[k] = v
		}
	}
	return m
}

// errHidden marks an object the caller may not read, or one destroyed
// while it was being read: it is left out, not an error.
var errHidden = errors.New("hidden")

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
		return nil, errHidden
	}
	return b, err
}

func readAttrs(path string) (kv, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parseKV(b), nil
}

// object is one directory of a kind: its name and owner.
type object struct {
	handle uint32
	uid    uint32
	dir    string
}

// objects lists the object directories of kind, in handle order.
func objects(mnt, kind string) ([]object, error) {
	dir := filepath.Join(mnt, kind)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []object
	for _, e := range ents {
		h, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue // "new"
		}
		info, err := e.Info()
		if err != nil {
			continue // destroyed meanwhile
		}
		o := object{handle: uint32(h), dir: filepath.Join(dir, e.Name())}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			o.uid = st.Uid
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b object) int { return int(int64(a.handle) - int64(b.handle)) })
	return out, nil
}

// The rows, one type per kind; their JSON is what --json prints.

type pdRow struct {
	Handle uint32 `json:"handle"`
	Owner  uint32 `json:"owner"`
	// Objects on the PD that the caller sees.
	MRs  int `json:"mrs"`
	MWs  int `json:"mws"`
	SRQs int `json:"srqs"`
	AHs  int `json:"ahs"`
	QPs  int `json:"qps"`
}

type mrRow struct {
	Handle    uint32 `json:"handle"`
	Owner     uint32 `json:"owner"`
	PD        uint32 `json:"pd"`
	Length    uint64 `json:"length"`
	IOVA      uint64 `json:"iova"`
	Access    string `json:"access"`
	LKey      uint32 `json:"lkey"`
	RKey      uint32 `json:"rkey"`
	Valid     bool   `json:"valid"`
	MemOffset uint64 `json:"mem_offset"`
}

type mwRow struct {
	Handle uint32 `json:"handle"`
	Owner  uint32 `json:"owner"`
	PD     uint32 `json:"pd"`
	Type   uint32 `json:"type"`
	RKey   uint32 `json:"rkey"`
	Bound  bool   `json:"bound"`
	MR     uint32 `json:"mr"`
	Addr   uint64 `json:"addr"`
	Length uint64 `json:"length"`
	Access string `json:"access"`
}

type cqRow struct {
	Handle     uint32 `json:"handle"`
	Owner      uint32 `json:"owner"`
	CQE        uint32 `json:"cqe"`     // depth
	Pending    uint32 `json:"pending"` // completions not yet polled
	Armed      string `json:"armed"`   // none, next, solicited
	Overflowed bool   `json:"overflowed"`
	Overflows  uint64 `json:"overflows"`
	QPs        int    `json:"qps"` // QPs completing into it that the caller sees
}

type srqRow struct {
	Handle   uint32 `json:"handle"`
	Owner    uint32 `json:"owner"`
	PD       uint32 `json:"pd"`
	MaxWR    uint32 `json:"max_wr"`
	MaxSGE   uint32 `json:"max_sge"`
	SRQLimit uint32 `json:"srq_limit"`
	Pending  uint32 `json:"pending"`
	QPs      int    `json:"qps"`
}

type ahRow struct {
	Handle       uint32 `json:"handle"`
	Owner        uint32 `json:"owner"`
	PD           uint32 `json:"pd"`
	DGID         string `json:"dgid"`
	SL           uint32 `json:"sl"`
	HopLimit     uint32 `json:"hop_limit"`
	TrafficClass uint32 `json:"traffic_class"`
	FlowLabel    uint32 `json:"flow_label"`
	SGIDIndex    uint32 `json:"sgid_index"`
}

type queueCol struct {
	Depth    uint32  `json:"depth"`               // max_*_wr: slots
	Posted   uint32  `json:"posted"`              // WRs in it (posted, not completed / consumed)
	InFlight *uint32 `json:"in_flight,omitempty"` // SQ: started, not completed
}

type nakCounts struct {
	Seq       uint64 `json:"seq"`
	RNR       uint64 `json:"rnr"`
	InvReq    uint64 `json:"inv_req"`
	RemAccess uint64 `json:"rem_access"`
	RemOp     uint64 `json:"rem_op"`
}

type qpRates struct {
	MsgsSent    float64 `json:"msgs_sent"`
	MsgsRecv    float64 `json:"msgs_recv"`
	BytesSent   float64 `json:"bytes_sent"`
	BytesRecv   float64 `json:"bytes_recv"`
	Retransmits float64 `json:"retransmits"`
}

type qpRow struct {
	QPN      uint32    `json:"qpn"`
	Owner    uint32    `json:"owner"`
	Type     string    `json:"type"`
	State    string    `json:"state"`
	PeerQPN  *uint32   `json:"peer_qpn"` // RC, UC once connected; else null
	PeerGID  string    `json:"peer_gid,omitempty"`
	PD       uint32    `json:"pd"`
	SendCQ   uint32    `json:"send_cq"`
	RecvCQ   uint32    `json:"recv_cq"`
	SRQ      uint32    `json:"srq"` // 0: none
	SQ       queueCol  `json:"sq"`
	RQ       *queueCol `json:"rq"`     // null with an SRQ
	SQPSN    uint32    `json:"sq_psn"` // next to send (live)
	RQPSN    uint32    `json:"rq_psn"` // next expected (live); 0 for UD
	Retrans  uint64    `json:"retransmits"`
	Timeouts uint64    `json:"retry_timeouts"`
	NaksSent nakCounts `json:"naks_sent"`
	NaksRecv nakCounts `json:"naks_recv"`
	// RNRWaits counts the RNR NAKs received (each one a wait of the
	// requester); RNRWaiting says it waits now.
	RNRWaits   uint64 `json:"rnr_waits"`
	RNRWaiting bool   `json:"rnr_waiting"`
	Error      string `json:"error"` // the last failed command on the QP
	// Counters is qp/N/counters whole.
	Counters map[string]uint64 `json:"counters"`
	// Rates, per second since the previous refresh (--watch).
	Rates *qpRates `json:"rates,omitempty"`
}

// View is one reading of the tree.
type View struct {
	mount string
	time  time.Time
	kinds []string
	pd    []pdRow
	mr    []mrRow
	mw    []mwRow
	cq    []cqRow
	srq   []srqRow
	ah    []ahRow
	qp    []qpRow
}

// collect reads the objects of kinds (and, to count their users, the
// kinds that refer to them).
func Collect(mnt string, kinds []string, now time.Time) (*View, error) {
	v := &View{mount: mnt, time: now, kinds: kinds}
	need := map[string]bool{}
	for _, k := range kinds {
		need[k] = true
		switch k {
		case "pd":
			for _, u := range []string{"mr", "mw", "srq", "ah", "qp"} {
				need[u] = true
			}
		case "cq", "srq":
			need["qp"] = true
		}
	}
	for _, k := range Kinds {
		if !need[k] {
			continue
		}
		objs, err := objects(mnt, k)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			err := v.read(k, o)
			if errors.Is(err, errHidden) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s %d: %w", k, o.handle, err)
			}
		}
	}
	for i := range v.pd {
		p := &v.pd[i]
		for _, r := range v.mr {
			p.MRs += boolInt(r.PD == p.Handle)
		}
		for _, r := range v.mw {
			p.MWs += boolInt(r.PD == p.Handle)
		}
		for _, r := range v.srq {
			p.SRQs += boolInt(r.PD == p.Handle)
		}
		for _, r := range v.ah {
			p.AHs += boolInt(r.PD == p.Handle)
		}
		for _, r := range v.qp {
			p.QPs += boolInt(r.PD == p.Handle)
		}
	}
	for i := range v.cq {
		c := &v.cq[i]
		for _, r := range v.qp {
			c.QPs += boolInt(r.SendCQ == c.Handle || r.RecvCQ == c.Handle)
		}
	}
	for i := range v.srq {
		s := &v.srq[i]
		for _, r := range v.qp {
			s.QPs += boolInt(r.SRQ == s.Handle)
		}
	}
	return v, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// read adds the row of one object.
func (v *View) read(kind string, o object) error {
	if kind == "qp" {
		return v.readQP(o)
	}
	b, err := readFile(filepath.Join(o.dir, "attr"))
	if err != nil {
		return err
	}
	text := string(b)
	switch kind {
	case "pd":
		_, err = qp.ParsePDAttr(text)
		v.pd = append(v.pd, pdRow{Handle: o.handle, Owner: o.uid})
	case "mr":
		var a qp.MRAttr
		a, err = qp.ParseMRAttr(text)
		v.mr = append(v.mr, mrRow{Handle: o.handle, Owner: o.uid, PD: a.PD, Length: a.Length, IOVA: a.IOVA,
			Access: a.Access.String(), LKey: a.LKey, RKey: a.RKey, Valid: a.Valid, MemOffset: a.MemOffset})
	case "mw":
		var a qp.MWAttr
		a, err = qp.ParseMWAttr(text)
		v.mw = append(v.mw, mwRow{Handle: o.handle, Owner: o.uid, PD: a.PD, Type: a.Type, RKey: a.RKey,
			Bound: a.Bound, MR: a.MR, Addr: a.Addr, Length: a.Length, Access: a.Access.String()})
	case "cq":
		var a qp.CQAttr
		a, err = qp.ParseCQAttr(text)
		v.cq = append(v.cq, cqRow{Handle: o.handle, Owner: o.uid, CQE: a.CQE, Pending: a.Pending, Armed: a.Armed,
			Overflowed: a.Overflowed, Overflows: a.Overflows})
	case "srq":
		var a qp.SRQAttr
		a, err = qp.ParseSRQAttr(text)
		v.srq = append(v.srq, srqRow{Handle: o.handle, Owner: o.uid, PD: a.PD, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE,
			SRQLimit: a.SRQLimit, Pending: a.Pending})
	case "ah":
		var a qp.AHAttr
		a, err = qp.ParseAHAttr(text)
		v.ah = append(v.ah, ahRow{Handle: o.handle, Owner: o.uid, PD: a.PD, DGID: qp.FormatGID(a.AH.DGID),
			SL: uint32(a.AH.SL), HopLimit: uint32(a.AH.HopLimit), TrafficClass: uint32(a.AH.TrafficClass),
			FlowLabel: a.AH.FlowLabel, SGIDIndex: uint32(a.AH.SGIDIndex)})
	}
	if err != nil {
		return fmt.Errorf("attr: %w", err)
	}
	return nil
}

// readQP adds the row of a QP, its attr read with qp's grammar.
func (v *View) readQP(o object) error {
	b, err := readFile(filepath.Join(o.dir, "attr"))
	if err != nil {
		return err
	}
	a, _, err := qp.ParseAttrFile(string(b))
	if err != nil {
		return fmt.Errorf("attr: %w", err)
	}
	c, err := readAttrs(filepath.Join(o.dir, "counters"))
	if err != nil {
		return err
	}
	e, err := readFile(filepath.Join(o.dir, "error"))
	if err != nil {
		return err
	}
	v.qp = append(v.qp, qpRowOf(o, &a, c, e))
	return nil
}

// qpRowOf summarises a QP's attr, counters and error files.
func qpRowOf(o object, a *qp.AttrFile, c kv, errText []byte) qpRow {
	r := qpRow{QPN: o.handle, Owner: o.uid, Type: a.Type.String(), State: a.Attr.QPState.String(),
		PD: a.PD, SendCQ: a.SendCQ, RecvCQ: a.RecvCQ, SRQ: a.SRQ,
		SQPSN: uint32(a.Attr.SQPSN), RQPSN: uint32(a.Attr.RQPSN),
		Retrans: c.u64("retransmits"), Timeouts: c.u64("retry_timeouts"),
		NaksSent: nakCounts{Seq: c.u64("seq_naks_sent"), RNR: c.u64("rnr_naks_sent"), InvReq: c.u64("inv_req_naks_sent"),
			RemAccess: c.u64("rem_access_naks_sent"), RemOp: c.u64("rem_op_naks_sent")},
		NaksRecv: nakCounts{Seq: c.u64("seq_naks_recv"), RNR: c.u64("rnr_naks_recv"), InvReq: c.u64("inv_req_naks_recv"),
			RemAccess: c.u64("rem_access_naks_recv"), RemOp: c.u64("rem_op_naks_recv")},
		RNRWaits: c.u64("rnr_naks_recv"), RNRWaiting: c["rnr_wait"] == "1",
		Counters: map[string]uint64{},
	}
	// The live PSNs (counters' gauges) over the ones the last modify set.
	if _, ok := c["send_psn"]; ok {
		r.SQPSN = c.u32("send_psn")
	}
	if _, ok := c["expected_psn"]; ok && r.Type != "ud" {
		r.RQPSN = c.u32("expected_psn")
	}
	// A connected type once it has a peer (RTR and on, or reset to
	// something with one): dest_qp_num and dgid.
	if a.Type != qp.TypeUD && (a.Attr.DestQPNum != 0 || a.Attr.AH.DGID != [16]byte{}) {
		n := a.Attr.DestQPNum
		r.PeerQPN, r.PeerGID = &n, qp.FormatGID(a.Attr.AH.DGID)
	}
	inFlight := c.u32("sq_in_flight")
	r.SQ = queueCol{Depth: a.Attr.Cap.MaxSendWR, Posted: c.u32("sq_posted"), InFlight: &inFlight}
	if r.SRQ == 0 {
		r.RQ = &queueCol{Depth: a.Attr.Cap.MaxRecvWR, Posted: c.u32("rq_posted")}
	}
	for k := range c {
		r.Counters[k] = c.u64(k)
	}
	r.Error, _, _ = strings.Cut(strings.TrimSpace(string(errText)), "\n")
	return r
}

// rates fills each QP's per-second rates from the previous reading.
func (v *View) rates(prev *View) {
	dt := v.time.Sub(prev.time).Seconds()
	if dt <= 0 {
		return
	}
	old := map[uint32]*qpRow{}
	for i := range prev.qp {
		old[prev.qp[i].QPN] = &prev.qp[i]
	}
	for i := range v.qp {
		r := &v.qp[i]
		p := old[r.QPN]
		if p == nil {
			continue
		}
		rate := func(k string) float64 {
			a, b := r.Counters[k], p.Counters[k]
			if a < b {
				return 0 // a new QP with the same number
			}
			return float64(a-b) / dt
		}
		r.Rates = &qpRates{MsgsSent: rate("send_wqes"), MsgsRecv: rate("recv_wqes"),
			BytesSent: rate("bytes_sent"), BytesRecv: rate("bytes_recv"), Retransmits: rate("retransmits")}
	}
}

// --- output ----------------------------------------------------------------

// MarshalJSON prints the mount, the time and one array per kind shown.
func (v *View) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"mount":`)
	m, _ := json.Marshal(v.mount)
	b.Write(m)
	b.WriteString(`,"time":`)
	t, _ := json.Marshal(v.time.Format(time.RFC3339Nano))
	b.Write(t)
	for _, k := range v.kinds {
		var rows any
		switch k {
		case "pd":
			rows = v.pd
		case "mr":
			rows = v.mr
		case "mw":
			rows = v.mw
		case "cq":
			rows = v.cq
		case "srq":
			rows = v.srq
		case "ah":
			rows = v.ah
		case "qp":
			rows = v.qp
		}
		j, err := json.Marshal(rows)
		if err != nil {
			return nil, err
		}
		if string(j) == "null" {
			j = []byte("[]")
		}
		fmt.Fprintf(&b, ",%q:", k)
		b.Write(j)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// write prints v as JSON (one line) or as tables; rates adds the rate
// columns of --watch.
func (v *View) Write(w io.Writer, o Options, rates bool) error {
	if o.JSON {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	var b bytes.Buffer
	v.tables(&b, rates)
	_, err := w.Write(b.Bytes())
	return err
}

// users names uids for the OWNER column (the number when unknown).
type users map[uint32]string

func (u users) name(uid uint32) string {
	if n, ok := u[uid]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if x, err := user.LookupId(n); err == nil {
		n = x.Username
	}
	u[uid] = n
	return n
}

func dash(v uint32) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatUint(uint64(v), 10)
}

func hex32(v uint32) string { return fmt.Sprintf("0x%x", v) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// tables prints one table per kind, columns aligned; a kind with no rows
// the caller sees is left out when all kinds are shown.
func (v *View) tables(w io.Writer, rates bool) {
	u := users{}
	first := true
	table := func(kind string, n int, header []string, row func(i int) []string) {
		if n == 0 && len(v.kinds) > 1 {
			return
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for i := 0; i < n; i++ {
			fmt.Fprintln(tw, strings.Join(row(i), "\t"))
		}
		tw.Flush()
	}
	for _, k := range v.kinds {
		switch k {
		case "pd":
			table(k, len(v.pd), []string{"PD", "OWNER", "MRS", "MWS", "SRQS", "AHS", "QPS"}, func(i int) []string {
				r := v.pd[i]
				return []string{fmt.Sprint(r.Handle), u.name(r.Owner), fmt.Sprint(r.MRs), fmt.Sprint(r.MWs),
					fmt.Sprint(r.SRQs), fmt.Sprint(r.AHs), fmt.Sprint(r.QPs)}
			})
		case "mr":
			table(k, len(v.mr), []string{"MR", "OWNER", "PD", "LENGTH", "IOVA", "LKEY", "RKEY", "VALID", "ACCESS"}, func(i int) []string {
				r := v.mr[i]
				return []string{fmt.Sprint(r.Handle), u.name(r.Owner), fmt.Sprint(r.PD), fmt.Sprint(r.Length),
					fmt.Sprintf("0x%x", r.IOVA), hex32(r.LKey), hex32(r.RKey), yesNo(r.Valid), r.Access}
			})
		case "mw":
			table(k, len(v.mw), []string{"MW", "OWNER", "PD", "TYPE", "RKEY", "BOUND", "MR", "ADDR", "LENGTH", "ACCESS"}, func(i int) []string {
				r := v.mw[i]
				return []string{fmt.Sprint(r.Handle), u.name(r.Owner), fmt.Sprint(r.PD), fmt.Sprint(r.Type),
					hex32(r.RKey), yesNo(r.Bound), dash(r.MR), fmt.Sprintf("0x%x", r.Addr), fmt.Sprint(r.Length), r.Access}
			})
		case "cq":
			table(k, len(v.cq), []string{"CQ", "OWNER", "CQE", "PENDING", "ARMED", "OVERFLOWED", "OVERFLOWS", "QPS"}, func(i int) []string {
				r := v.cq[i]
				return []string{fmt.Sprint(r.Handle), u.name(r.Owner), fmt.Sprint(r.CQE), fmt.Sprint(r.Pending),
					r.Armed, yesNo(r.Overflowed), fmt.Sprint(r.Overflows), fmt.Sprint(r.QPs)}
			})
		case "srq":
			table(k, len(v.srq), []string{"SRQ", "OWNER", "PD", "MAX_WR", "MAX_SGE", "PENDING", "LIMIT", "QPS"}, func(i int) []string {
				r := v.srq[i]
				return []string{fmt.Sprint(r.Handle), u.name(r.Owner), fmt.Sprint(r.PD), fmt.Sprint(r.MaxWR),
					fmt.Sprint(r.MaxSGE), fmt.Sprint(r.Pending), dash(r.SRQLimit), fmt.Sprint(r.QPs)}
			})
		case "ah":
			table(k, len(v.ah), []string{"AH", "OWNER", "PD", "DGID", "SL", "HOP_LIMIT", "TCLASS", "FLOW", "SGID_INDEX"}, func(i int) []string {
				r := v.ah[i]
				return []string{fmt.Sprint(r.Handle), u.name(r.Owner), fmt.Sprint(r.PD), r.DGID, fmt.Sprint(r.SL),
					fmt.Sprint(r.HopLimit), fmt.Sprint(r.TrafficClass), fmt.Sprint(r.FlowLabel), fmt.Sprint(r.SGIDIndex)}
			})
		case "qp":
			h := []string{"QPN", "OWNER", "TYPE", "STATE", "PEER", "PEER-GID", "PD", "SCQ", "RCQ", "SRQ",
				"SQ", "INFLIGHT", "RQ", "SQ-PSN", "RQ-PSN", "RETX", "NAK-TX", "NAK-RX", "RNR-TX", "RNR-WAIT"}
			if rates {
				h = append(h, "TX-MSG/s", "RX-MSG/s", "TX-B/s", "RX-B/s", "RETX/s")
			}
			h = append(h, "ERROR")
			table(k, len(v.qp), h, func(i int) []string {
				return v.qp[i].cells(u, rates)
			})
		}
	}
}

// cells is a QP's table row. SQ and RQ are posted/depth; NAK-TX and
// NAK-RX are the sequence, invalid-request, remote-access and
// remote-operational NAKs sent and received (seq/inv/acc/op); RNR-TX the
// RNR NAKs sent, RNR-WAIT those received (a * when it waits now).
func (r *qpRow) cells(u users, rates bool) []string {
	peer, gid := "-", "-"
	if r.PeerQPN != nil {
		peer, gid = fmt.Sprint(*r.PeerQPN), r.PeerGID
	}
	rq := "srq"
	if r.RQ != nil {
		rq = fmt.Sprintf("%d/%d", r.RQ.Posted, r.RQ.Depth)
	}
	naks := func(n nakCounts) string {
		return fmt.Sprintf("%d/%d/%d/%d", n.Seq, n.InvReq, n.RemAccess, n.RemOp)
	}
	rnr := fmt.Sprint(r.RNRWaits)
	if r.RNRWaiting {
		rnr += "*"
	}
	rqPSN := fmt.Sprint(r.RQPSN)
	if r.Type == "ud" {
		rqPSN = "-"
	}
	inFlight := uint32(0)
	if r.SQ.InFlight != nil {
		inFlight = *r.SQ.InFlight
	}
	c := []string{fmt.Sprint(r.QPN), u.name(r.Owner), strings.ToUpper(r.Type), r.State, peer, gid,
		fmt.Sprint(r.PD), fmt.Sprint(r.SendCQ), fmt.Sprint(r.RecvCQ), dash(r.SRQ),
		fmt.Sprintf("%d/%d", r.SQ.Posted, r.SQ.Depth), fmt.Sprint(inFlight), rq,
		fmt.Sprint(r.SQPSN), rqPSN, fmt.Sprint(r.Retrans),
		naks(r.NaksSent), naks(r.NaksRecv), fmt.Sprint(r.NaksSent.RNR), rnr}
	if rates {
		if r.Rates == nil {
			c = append(c, "-", "-", "-", "-", "-")
		} else {
			x := r.Rates
			c = append(c, human(x.MsgsSent), human(x.MsgsRecv), human(x.BytesSent), human(x.BytesRecv), human(x.Retransmits))
		}
	}
	e := r.Error
	if e == "" {
		e = "-"
	}
	return append(c, e)
}

// human prints a rate with a k/M/G suffix (powers of 1000).
func human(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// watch prints a reading now and one at every tick until ctx ends, each
// with the QPs' rates since the one before. Text frames redraw the
// terminal in place; JSON frames are one object a line. now and tick are
// the clock (injected by tests).
func Watch(ctx context.Context, o Options, w io.Writer, now func() time.Time, tick <-chan time.Time) error {
	var prev *View
	for {
		v, err := Collect(o.Mount, o.Kinds, now())
		if err != nil {
			return err
		}
		if prev != nil {
			v.rates(prev)
		}
		var frame bytes.Buffer
		if !o.JSON {
			// Home, clear the screen; a title line.
			fmt.Fprintf(&frame, "\x1b[H\x1b[2J%s  every %v  %s  (Ctrl-C to stop)\n\n", v.mount, o.Interval, v.time.Format("15:04:05"))
		}
		if err := v.Write(&frame, o, true); err != nil {
			return err
		}
		if _, err := w.Write(frame.Bytes()); err != nil {
			return err
		}
		prev = v
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}
