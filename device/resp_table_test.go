package device

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"rdmafs/qp"
)

// The responder's rules are written once (respcheck.go) and both paths
// call them: the direct path executes a WQE only when they pass and sends
// it as packets otherwise. TestResponderTable fails when the two disagree:
// each row is a WR (a bad one mostly), run on a device whose local
// messages take the direct path, on one whose packets go through the link
// chain (Config.PacketLoopback) and, with -device.wire, on one whose
// packets go through the wire; what both QPs show must be the same on all,
// and the sender's status the row's. A row the direct path may execute
// must be executed there (DirectOps), and a refused one must not, so a
// check that refuses too much or too little on one path shows too.

// respRow is one WR of the table. setup gets the pair and the memory and
// returns the WRs to post on a (and may post receives on b); bOver
// overrides b's connection attributes (connectX).
type respRow struct {
	name   string
	typ    qp.Type
	bOver  string
	aOver  string
	setup  func(c *respCtx) []string
	status string // the sender's completion of its WR with wr_id 1
	direct bool   // the direct path executes it (one engine for both QPs)
}

// respCtx is what a row's setup works with: a sends to b; src is a's
// memory, dst b's with every remote access, the other MRs lack one thing.
type respCtx struct {
	e                      *env
	a, b                   *QP
	src, dst               *MR
	noWrite, noRead, noAtm *MR
	noLocal                *MR // b's, no local write (a bad receive buffer)
	foreign                *MR // another PD's, every access
	skew                   *MR // every access, iova 3: its memory is 8-aligned at iova 5 mod 8
	mwMR                   *MR // b's, with MW_BIND
	mw1, mw2               *MW
}

func (c *respCtx) recv(lines ...string) { c.e.postRecv(c.b, lines...) }

// bindOnB binds mw over the first 4 KiB of mwMR through b, remote write,
// and returns its rkey.
func (c *respCtx) bindOnB(mw *MW) uint32 {
	c.e.postSend(c.b, fmt.Sprintf("opcode=bind_mw wr_id=900 rkey=5 mw=%d bind_lkey=%d bind_addr=0 bind_length=4096 bind_access=remote_write,remote_read", mw.Handle, c.mwMR.LKey))
	c.e.quiesce()
	return mw.Attr().RKey
}

func respTable() []respRow {
	write := func(rkey uint32, addr uint64, n int, c *respCtx) string {
		return fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:%d remote_addr=%d rkey=%d", c.src.LKey, n, addr, rkey)
	}
	read := func(rkey uint32, addr uint64, c *respCtx) string {
		return fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:64 remote_addr=%d rkey=%d", c.src.LKey, addr, rkey)
	}
	fadd := func(rkey uint32, addr uint64, c *respCtx) string {
		return fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=1 send_flags=signaled sge=%d:0:8 remote_addr=%d rkey=%d compare_add=3", c.src.LKey, addr, rkey)
	}
	send := func(n int, c *respCtx) string {
		return fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:%d", c.src.LKey, n)
	}
	recvInto := func(mr *MR, n int) string { return fmt.Sprintf("wr_id=20 sge=%d:0:%d", mr.LKey, n) }
	one := func(f func(c *respCtx) string) func(c *respCtx) []string {
		return func(c *respCtx) []string { return []string{f(c)} }
	}
	const noRNRRetry = "rnr_retry=0"
	const noRemoteWrite = "qp_access_flags=local_write,remote_read,remote_atomic"
	return []respRow{
		// RDMA WRITE.
		{name: "write", status: "success", direct: true,
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, 100, 64, c) })},
		{name: "write zero bytes, any rkey", status: "success", direct: true,
			setup: one(func(c *respCtx) string { return write(c.dst.RKey^0x5500, 0, 0, c) })},
		{name: "write bad rkey", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return write(c.dst.RKey^0x100, 100, 64, c) })},
		{name: "write past the MR", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, 4096-32, 64, c) })},
		{name: "write before the MR", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, ^uint64(0)-8, 64, c) })},
		{name: "write MR without remote write", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return write(c.noWrite.RKey, 0, 64, c) })},
		{name: "write QP without remote write", status: "rem_inv_req_err", bOver: noRemoteWrite,
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, 0, 64, c) })},
		{name: "write another PD's MR", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return write(c.foreign.RKey, 0, 64, c) })},
		{name: "write with imm", status: "success", direct: true,
			setup: func(c *respCtx) []string {
				c.recv(recvInto(c.dst, 16))
				return []string{fmt.Sprintf("opcode=rdma_write_with_imm wr_id=1 send_flags=signaled imm_data=9 sge=%d:0:64 remote_addr=0 rkey=%d", c.src.LKey, c.dst.RKey)}
			}},
		{name: "write with imm, no receive (RNR)", status: "rnr_retry_exc_err", aOver: noRNRRetry,
			setup: one(func(c *respCtx) string {
				return fmt.Sprintf("opcode=rdma_write_with_imm wr_id=1 send_flags=signaled imm_data=9 sge=%d:0:64 remote_addr=0 rkey=%d", c.src.LKey, c.dst.RKey)
			})},
		{name: "write with imm bad rkey", status: "rem_access_err",
			setup: func(c *respCtx) []string {
				c.recv(recvInto(c.dst, 16))
				return []string{fmt.Sprintf("opcode=rdma_write_with_imm wr_id=1 send_flags=signaled imm_data=9 sge=%d:0:64 remote_addr=0 rkey=%d", c.src.LKey, c.dst.RKey^0x100)}
			}},
		// RDMA READ.
		{name: "read", status: "success", direct: true,
			setup: one(func(c *respCtx) string { return read(c.dst.RKey, 64, c) })},
		{name: "read bad rkey", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return read(c.dst.RKey^0x100, 64, c) })},
		{name: "read past the MR", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return read(c.dst.RKey, 4096-8, c) })},
		{name: "read MR without remote read", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return read(c.noRead.RKey, 0, c) })},
		{name: "read QP without remote read", status: "rem_inv_req_err", bOver: "qp_access_flags=local_write,remote_write,remote_atomic",
			setup: one(func(c *respCtx) string { return read(c.dst.RKey, 0, c) })},
		{name: "read without responder resources", status: "rem_inv_req_err", bOver: "max_dest_rd_atomic=0",
			setup: one(func(c *respCtx) string { return read(c.dst.RKey, 0, c) })},
		{name: "read another PD's MR", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return read(c.foreign.RKey, 0, c) })},
		// Atomics.
		{name: "fetch_add", status: "success", direct: true,
			setup: one(func(c *respCtx) string { return fadd(c.dst.RKey, 8, c) })},
		{name: "cmp_swap", status: "success", direct: true,
			setup: one(func(c *respCtx) string {
				return fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=1 send_flags=signaled sge=%d:0:8 remote_addr=16 rkey=%d compare_add=0 swap=7", c.src.LKey, c.dst.RKey)
			})},
		{name: "fetch_add on memory misaligned under its iova", status: "rem_inv_req_err",
			setup: one(func(c *respCtx) string { return fadd(c.skew.RKey, 8, c) })},
		{name: "fetch_add bad rkey", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return fadd(c.dst.RKey^0x100, 8, c) })},
		{name: "fetch_add past the MR", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return fadd(c.dst.RKey, 4096, c) })},
		{name: "fetch_add MR without remote atomic", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return fadd(c.noAtm.RKey, 0, c) })},
		{name: "fetch_add QP without remote atomic", status: "rem_inv_req_err", bOver: "qp_access_flags=local_write,remote_write,remote_read",
			setup: one(func(c *respCtx) string { return fadd(c.dst.RKey, 0, c) })},
		{name: "fetch_add without responder resources", status: "rem_inv_req_err", bOver: "max_dest_rd_atomic=0",
			setup: one(func(c *respCtx) string { return fadd(c.dst.RKey, 0, c) })},
		// SEND and the receive WQE.
		{name: "send", status: "success", direct: true,
			setup: func(c *respCtx) []string { c.recv(recvInto(c.dst, 64)); return []string{send(64, c)} }},
		{name: "send too long for the receive", status: "rem_inv_req_err",
			setup: func(c *respCtx) []string { c.recv(recvInto(c.dst, 16)); return []string{send(64, c)} }},
		{name: "send, no receive (RNR)", status: "rnr_retry_exc_err", aOver: noRNRRetry,
			setup: func(c *respCtx) []string { return []string{send(64, c)} }},
		{name: "send, receive with a bad lkey", status: "rem_op_err",
			setup: func(c *respCtx) []string {
				c.recv(fmt.Sprintf("wr_id=20 sge=%d:0:64", c.dst.LKey^0x100))
				return []string{send(64, c)}
			}},
		{name: "send, receive without local write", status: "rem_op_err",
			setup: func(c *respCtx) []string { c.recv(recvInto(c.noLocal, 64)); return []string{send(64, c)} }},
		{name: "send, receive in another PD", status: "rem_op_err",
			setup: func(c *respCtx) []string { c.recv(recvInto(c.foreign, 64)); return []string{send(64, c)} }},
		// Invalidation: SEND_WITH_INV, and using what LOCAL_INV invalidated.
		{name: "send_with_inv of an MR", status: "success", direct: true,
			setup: func(c *respCtx) []string {
				c.recv(recvInto(c.dst, 64))
				return []string{fmt.Sprintf("opcode=send_with_inv wr_id=1 send_flags=signaled invalidate_rkey=%d sge=%d:0:8", c.noRead.RKey, c.src.LKey)}
			}},
		{name: "send_with_inv of an unknown key", status: "rem_inv_req_err",
			setup: func(c *respCtx) []string {
				c.recv(recvInto(c.dst, 64))
				return []string{fmt.Sprintf("opcode=send_with_inv wr_id=1 send_flags=signaled invalidate_rkey=%d sge=%d:0:8", c.noRead.RKey^0x100, c.src.LKey)}
			}},
		{name: "send_with_inv of another PD's MR", status: "rem_inv_req_err",
			setup: func(c *respCtx) []string {
				c.recv(recvInto(c.dst, 64))
				return []string{fmt.Sprintf("opcode=send_with_inv wr_id=1 send_flags=signaled invalidate_rkey=%d sge=%d:0:8", c.foreign.RKey, c.src.LKey)}
			}},
		{name: "send_with_inv of a type 2 MW", status: "success", direct: true,
			setup: func(c *respCtx) []string {
				rkey := c.bindOnB(c.mw2)
				c.recv(recvInto(c.dst, 64))
				return []string{fmt.Sprintf("opcode=send_with_inv wr_id=1 send_flags=signaled invalidate_rkey=%d sge=%d:0:8", rkey, c.src.LKey)}
			}},
		{name: "send_with_inv of a type 1 MW", status: "rem_inv_req_err",
			setup: func(c *respCtx) []string {
				rkey := c.bindOnB(c.mw1)
				c.recv(recvInto(c.dst, 64))
				return []string{fmt.Sprintf("opcode=send_with_inv wr_id=1 send_flags=signaled invalidate_rkey=%d sge=%d:0:8", rkey, c.src.LKey)}
			}},
		{name: "write through a type 2 MW", status: "success", direct: true,
			setup: one(func(c *respCtx) string { return write(c.bindOnB(c.mw2), 64, 64, c) })},
		{name: "write through a type 2 MW, past it", status: "rem_access_err",
			setup: one(func(c *respCtx) string { return write(c.bindOnB(c.mw2), 4096-8, 64, c) })},
		{name: "write through an invalidated type 2 MW", status: "rem_access_err",
			setup: func(c *respCtx) []string {
				rkey := c.bindOnB(c.mw2)
				c.e.postSend(c.b, fmt.Sprintf("opcode=local_inv wr_id=901 invalidate_rkey=%d", rkey))
				c.e.quiesce()
				return []string{write(rkey, 0, 64, c)}
			}},
		{name: "read through a type 1 MW", status: "success", direct: true,
			setup: one(func(c *respCtx) string { return read(c.bindOnB(c.mw1), 0, c) })},
		{name: "write to an invalidated MR", status: "rem_access_err",
			setup: func(c *respCtx) []string {
				c.e.postSend(c.b, fmt.Sprintf("opcode=local_inv wr_id=902 invalidate_rkey=%d", c.noRead.RKey))
				c.e.quiesce()
				return []string{write(c.noRead.RKey, 0, 64, c)}
			}},
		{name: "write to a deregistered MR", status: "rem_access_err",
			setup: func(c *respCtx) []string {
				rkey := c.noAtm.RKey
				if err := c.noAtm.Dereg(); err != nil {
					c.e.t.Fatal(err)
				}
				return []string{write(rkey, 0, 64, c)}
			}},
		// UC: the sender always succeeds; the receiver drops what its
		// checks refuse (its receive WQE stays for the next message,
		// which the final flush shows), or ends on a bad receive WQE.
		{name: "uc write", typ: qp.TypeUC, status: "success", direct: true,
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, 100, 64, c) })},
		{name: "uc write bad rkey", typ: qp.TypeUC, status: "success",
			setup: one(func(c *respCtx) string { return write(c.dst.RKey^0x100, 100, 64, c) })},
		{name: "uc write past the MR", typ: qp.TypeUC, status: "success",
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, 4096-32, 64, c) })},
		{name: "uc write QP without remote write", typ: qp.TypeUC, status: "success", bOver: noRemoteWrite,
			setup: one(func(c *respCtx) string { return write(c.dst.RKey, 0, 64, c) })},
		{name: "uc write with imm, no receive", typ: qp.TypeUC, status: "success",
			setup: one(func(c *respCtx) string {
				return fmt.Sprintf("opcode=rdma_write_with_imm wr_id=1 send_flags=signaled imm_data=9 sge=%d:0:64 remote_addr=0 rkey=%d", c.src.LKey, c.dst.RKey)
			})},
		{name: "uc send", typ: qp.TypeUC, status: "success", direct: true,
			setup: func(c *respCtx) []string { c.recv(recvInto(c.dst, 64)); return []string{send(64, c)} }},
		{name: "uc send, no receive", typ: qp.TypeUC, status: "success",
			setup: func(c *respCtx) []string { return []string{send(64, c)} }},
		{name: "uc send too long for the receive", typ: qp.TypeUC, status: "success",
			setup: func(c *respCtx) []string { c.recv(recvInto(c.dst, 16)); return []string{send(64, c)} }},
		{name: "uc send, receive with a bad lkey", typ: qp.TypeUC, status: "success",
			setup: func(c *respCtx) []string {
				c.recv(fmt.Sprintf("wr_id=20 sge=%d:0:64", c.dst.LKey^0x100))
				return []string{send(64, c)}
			}},
	}
}

// respRun runs row on a fresh device: local messages take the direct path
// unless packets, through the wire if wire. It returns what the two QPs
// showed, the sender's status of WR 1, and how many operations the device
// executed directly.
func respRun(t *testing.T, row respRow, packets, wire bool) (shown []string, status string, direct uint64) {
	t.Helper()
	e := newEnvOn(t, wire, func(c *Config) { c.PacketLoopback = packets })
	typ := row.typ
	if typ == 0 {
		typ = qp.TypeRC
	}
	a, b, acq, bcq := e.pairX(typ, row.aOver, row.bOver)
	all := qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic
	c := &respCtx{e: e, a: a, b: b,
		src:     e.mr(4096, qp.AccessLocalWrite),
		dst:     e.mr(4096, all),
		noWrite: e.mr(4096, all&^qp.AccessRemoteWrite),
		noRead:  e.mr(4096, all&^qp.AccessRemoteRead),
		noAtm:   e.mr(4096, all&^qp.AccessRemoteAtomic),
		noLocal: e.mr(4096, qp.AccessRemoteRead),
		foreign: e.foreignMR(4096, all),
		mwMR:    e.mr(4096, all|qp.AccessMWBind),
		mw1:     e.mw(1),
		mw2:     e.mw(2),
	}
	var err error
	if c.skew, err = e.d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 64, IOVA: 3, HasIOVA: true, Access: all}); err != nil {
		t.Fatal(err)
	}
	fill(c.src.Mem(), 5)
	e.postSend(a, row.setup(c)...)
	// An RNR NAK with retries left, or a lost datagram, has its timer.
	for i := 0; i < 4; i++ {
		e.clk.Advance(time.Second)
	}
	e.quiesce()
	direct = e.d.Counters.DirectOps.Load()
	wcs := func(cq *CQ, who string) {
		got, err := cq.Poll(1 << 10)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			w := &got[i]
			if who == "a" && w.WRID == 1 {
				status = qp.FormatWC(w)
			}
			shown = append(shown, who+": "+maskKeys(qp.FormatWC(w)))
		}
	}
	wcs(acq, "a")
	wcs(bcq, "b")
	shown = append(shown, fmt.Sprintf("states %v %v, dst sum %d, src sum %d", a.State(), b.State(), sum(c.dst.Mem()), sum(c.src.Mem())))
	// What b's receive queue still holds shows in its flush.
	e.modify(b, "qp_state=ERR")
	e.quiesce()
	wcs(bcq, "b flushed")
	return shown, status, direct
}

// maskKeys hides the rkey a completion names (WITH_INV): keys are random
// per device.
func maskKeys(wc string) string { return invKey.ReplaceAllString(wc, "invalidate_rkey=K") }

var invKey = regexp.MustCompile(`invalidate_rkey=\S+`)

func TestResponderTable(t *testing.T) {
	for _, row := range respTable() {
		t.Run(strings.ReplaceAll(row.name, " ", "_"), func(t *testing.T) {
			direct, st, ops := respRun(t, row, false, false)
			if !strings.Contains(st, "status="+row.status+" ") {
				t.Fatalf("direct path: WR 1 completed %q, want status %s\n%s", st, row.status, strings.Join(direct, "\n"))
			}
			// One engine for both QPs is where the direct path runs
			// (-device.apart keeps them on two); SEND_WITH_INV needs
			// all of Device.mu, which one engine's turn has.
			mayDirect := *enginesFlag <= 1 && !*apartFlag
			switch {
			case row.direct && mayDirect && ops == 0:
				t.Errorf("the direct path sent it as packets (direct_ops 0): a check refuses what the packets take")
			case !row.direct && ops != 0:
				t.Errorf("the direct path executed it (direct_ops %d): a check takes what the packets refuse", ops)
			}
			others := map[string]bool{"packets": false}
			if *wireFlag {
				others["wire"] = true
			}
			for name, wire := range others {
				got, _, _ := respRun(t, row, !wire, wire)
				if a, b := strings.Join(direct, "\n"), strings.Join(got, "\n"); a != b {
					t.Errorf("the direct path and %s differ:\ndirect:\n%s\n%s:\n%s", name, a, name, b)
				}
			}
		})
	}
}
