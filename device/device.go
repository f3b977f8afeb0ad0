// Package device is the core of rdmafs: one virtual RDMA device with its
// verbs objects (PD, MR, MW, AH, CQ, SRQ, QP), the QPN and key tables, and
// the engines that execute work requests.
//
// # Pieces
//
//   - device.go: Config (the limits ibv_query_device reports), the Device,
//     counters and the async event types.
//   - table.go, quota.go: the handle tables and the steps every kind of
//     object takes through them, once: a lookup for a request (missing,
//     another user's), admission (the device's limits, the user's share),
//     destroy (gone, in use, then release).
//   - events.go: async events, a copy for every reader that may see them
//     (the object's owner's readers and root's).
//   - objects.go, mem.go, keys.go: PD, MR (memory is a memfd a client can
//     map, shared by the MRs registered on it), MW, AH, the key table
//     (unguessable keys) and the checks of lkeys and rkeys.
//   - cq.go, srq.go: completion queues (a ring the engine produces into) and
//     shared receive queues.
//   - qp.go: create, modify (validate everything, then apply), query, reset,
//     destroy and the post verbs.
//   - reserved.go: the reserved operations (rdmavt's reserved_operations):
//     send WQEs of the device's own in a QP's engine queue, beside the
//     client's but taking none of its ring, completing without a CQE; the
//     liveness probe (qp/N/ctl probe) is their user.
//   - engine.go: the scheduler. Config.Engines engines run the QPs that
//     have work, each QP on one engine (QP.home), each engine on its own
//     goroutine; an idle device parks them all and uses no CPU.
//   - packet.go, requester.go, responder.go, respcheck.go, completer.go:
//     the transport, in the shape of rxe. Its three roles are types, each
//     a receiver over the state it owns, embedded in the QP (QP.req,
//     QP.resp, QP.comp) with a back pointer to it for the identity and
//     wiring they read (run.go: what each may do to another). The
//     requester turns WQEs into IB packets (PSNs, path MTU segmentation),
//     the link delivers them (loopback, or RoCEv2), the responder executes
//     them against its QP (each operation a check and an apply,
//     respcheck.go) and answers with ACK, NAK, read responses and atomic
//     acknowledgements, and the completer retires WQEs, retries, and
//     writes completions. The *QP keeps identity, wiring and what belongs
//     to the QP as a whole: the verbs, state changes, errors, flushes and
//     the turn itself.
//   - loopback.go: the direct path between two QPs of the device (rdmavt's
//     rvt_ruc_loopback): their packets skip the link chain, the receiving
//     QP's turn runs right after the sender's in the same batch, and RC
//     messages go in segments of up to 64 KiB (one copy per message), with
//     the same transport rules; between two idle QPs of one engine an RC
//     WRITE, SEND (with immediate data or an invalidation too), READ or
//     atomic, or a UC WRITE or SEND, is executed against the peer with no
//     packet (executeDirectLocked, executeUCLocked), into the peer's RQ or
//     SRQ, with the responder's own checks and applies (respcheck.go); a
//     capture, a fault rule for the QP or Config.PacketLoopback puts the
//     packets back on the chain (localPathLocked, the one place the way
//     is decided).
//   - link.go: the device's side of its link (package link, which owns
//     sockets, faults, capture and the wire's receive goroutine): it builds
//     the chain at creation, routes each packet (loopback for the device's
//     own GID, the wire for other IPv4-mapped GIDs, else none), holds the
//     packets of one engine turn and writes them as one batch (one
//     sendmmsg on the wire), is the
//     chain's dispatcher (packets back from loopback, datagrams from the
//     wire onto the receive path, the wire's back-off from a full QP), and
//     serves the fault and capture verbs. The device opens no socket and
//     makes no system call of the network: it talks to the chain only
//     through link.Endpoint, and the chain to it through link.Packet.
//   - faults.go: the text form of the fault injector's settings.
//   - gsi.go: QP1, the management QP. MADs for it go to a handler (the
//     CM agent, package cm) through a bounded queue and a goroutine of
//     their own, never under Device.mu; SendMAD sends one through the link.
//
// # Goroutines and their owners
//
//   - The engines (engine.go), Config.Engines of them: each runs the
//     turns of its runnable QPs under its stripe of Device.mu (after each
//     turn, the turns of its QPs that the turn's direct deliveries fed:
//     engine.soon, loopback.go), spins briefly on recently active send
//     rings, then parks until schedule wakes it. A new QP goes to the
//     engines in turn, and a connected QP moves to its local peer's
//     engine at RTR (colocateLocked), so a pair's packets stay in one
//     engine's batches. On a device with a wire and one engine, a
//     goroutine the kernel has just woken for work (the two below) runs
//     the turns that work made runnable itself while the engine sleeps
//     (engine.runHeldLocked), so that a datagram or a doorbell reaches the
//     transport, and its answer the wire, without waking another thread;
//     with several engines it schedules them on the QPs' engines
//     (Device.inlineTurns).
//   - The doorbell (doorbell.go): sleeps on the mount's futex word and
//     schedules the QPs the clients marked in its page whose rings have
//     new WQEs, reading the sets of QPs that may send (bellQPs) without a
//     lock and taking only the scheduler's; on a device with a wire, when it found work, the
//     engine sleeps and Device.mu is free (TryLock: it never waits for
//     it), it runs their turns (a device without one leaves them to the
//     engine, whose spin then serves the client's next posts without a
//     doorbell).
//   - The wire's receive goroutine (package link, when Config.Addr is
//     set): sleeps in recvmmsg, checks datagrams without a lock, then
//     delivers them under Device.mu (dispatcher, link.go) and, while the
//     engine sleeps, runs the turns they made runnable in the same hold
//     of Device.mu, sending what the turns produce before it reads the
//     socket again.
//   - Timers (clock.AfterFunc: retransmit, RNR; the fault injector's
//     delays in package link): the transport's timers only store their
//     sequence number in the QP's completer and schedule it
//     (completer.go), the next turn does the work; the fault injector's delay timers deliver under
//     Device.mu as the receive goroutine does.
//   - The GSI's goroutine (gsi.go): hands queued MADs to the handler (the
//     CM agent) without Device.mu.
//   - Verbs run on their callers' goroutines (fsnode's FUSE handlers, the
//     in-process tests) and take Device.mu for their duration.
//
// # Turns
//
// A QP's work is done in turns (QP.runLocked, run.go: its completer, its
// responder and its requester in turn, then what the QP's state asks of
// the QP as a whole). Scheduling a turn
// and running it are apart, as in rxe's tasks. engine.schedule (a post, a
// doorbell wake, a packet, a timer, a modify, a turn with work left) only
// queues the QP on its engine (QP.home) and wakes the engine goroutine,
// unless a goroutine holds its wake-up (holdWake). A queued turn is run by
// engine.turnLocked, and only by it, always holding the QP's engine's
// stripe of Device.mu, so turns of one QP never overlap: by the engine
// goroutine (runBatches, under its stripe; runExclusive, under all of
// Device.mu, for a turn that asked for it), or, on a device with a wire
// and one engine while that goroutine sleeps, by the wire's receive
// goroutine or the doorbell's, holding all of Device.mu (runHeldLocked).
// After a turn, the same goroutine under the same lock runs the turns its
// direct deliveries fed (runSoonLocked, loopback.go, which writes out the
// turn's sequence, runTurnLocked's, once more).
//
// # Locking
//
// Device.mu has one stripe per engine (devMutex). An engine's batch holds
// its own stripe; everyone else (verbs, the wire's receive goroutine, the
// fault injector's timers, SendMAD, the doorbell's inline runs) takes all
// of them, and so excludes every engine, as one lock would. Hence what
// only verbs change (the tables, a QP's attributes and state changes,
// MR validity, the link's settings) any turn may read, and what a turn
// changes is its own QP's: its roles' state (requester, responder,
// completer), queues and counters. What
// turns of different engines share has a lock or an atomic of its own:
//
//   - a CQ's producer side (CQ.prodMu) and an SRQ's consumer side
//     (SRQ.takeMu), taken only with several engines;
//   - a packet for a QP of another engine goes to that QP's inbox
//     (QP.inMu; acceptLocked) and its engine takes it at the next turn;
//     its sender reads the inbox's length for its flow control;
//   - a turn that changes the key table or reaches into other QPs'
//     packets (LOCAL_INV, BIND_MW, SEND_WITH_INV) stops short of it and
//     runs again under all of Device.mu (exclusiveLocked, runExclusive);
//   - the chain, with several engines, has chainMu for the engines'
//     writes (Device.mu is the chain's lock: an engine writes with its
//     stripe held, and chainMu with several; the wire's receive goroutine
//     and the fault injector's delay timers take all of it to deliver;
//     package link, Locking);
//   - the doorbell's sets of the QPs that can send are atomic pointers,
//     replaced under bellMu; the event queue has its own lock
//     (eventQueue.mu); the GSI's queue is a channel, the counters are
//     atomics, and each engine has its own packet pool.
//
// Each field names the lock that guards it, beside it
// (lockcheck:guarded), and a function whose name ends in Locked runs
// with its caller's locks; scripts/test.sh checks both with
// internal/lockcheck. To the checker a stripe is Device.mu, and all of
// it (devMutex.Lock) also stands for the locks above (prodMu, takeMu,
// inMu), since it excludes every turn. The rule that a turn holding
// only its stripe writes only its own QP's state is kept by the code's
// structure, not by the tool.
//
// Every QP turn does a bounded amount of work (run.go: packet budgets, the
// READ window), and between two turns an engine lets anyone waiting for
// all of Device.mu go first (devMutex, engine.go), so a verb waits for at
// most one turn per engine, whatever another user's QPs are doing.
//
// The lock order, outermost first:
//
//  1. a queue's in-daemon producer or consumer lock (QP.postMu,
//     SRQ.postMu, CQ.pollMu), one at a time;
//  2. Device.mu, its stripes in engine order;
//  3. chainMu or an SRQ's takeMu (a direct SEND or WRITE_WITH_IMM holds
//     takeMu while it completes);
//  4. a CQ's prodMu;
//  5. a CQ's evMu, eventQueue.mu, the link's capture lock, bellMu or a
//     QP's inMu, one at a time (a turn accepts its inbox's packets under
//     inMu, and may schedule its QP);
//  6. the scheduler's lock (engine.mu), the innermost.
//
// The transport's timers take no lock but the scheduler's: they mark a
// QP runnable and wake its engine. The doorbell takes no lock but the
// scheduler's either, and Device.mu only with TryLock, so it never waits
// for it. A goroutine that runs turns in the engine's place stops when
// someone waits for Device.mu, as the engine does, and leaves the rest to
// the engine. The GSI's handler (the CM agent) runs on the GSI's own
// goroutine without Device.mu and may call SendMAD, which takes Device.mu
// for one send: the agent's lock orders before Device.mu, and nothing
// under Device.mu waits for the agent.
package device

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"rdmafs/clock"
	"rdmafs/link"
	"rdmafs/qp"
	"rdmafs/ring"
	"rdmafs/roce"
)

// Config sets the device's limits and identity. Zero fields take the
// defaults of DefaultConfig.
type Config struct {
	MaxQP           uint32
	MaxQPWR         uint32
	MaxSGE          uint32
	MaxCQ           uint32
	MaxCQE          uint32
	MaxMR           uint32
	MaxMRSize       uint64
	MaxTotalMRBytes uint64 // device-wide cap on registered memory
	MaxPD           uint32
	MaxMW           uint32
	MaxAH           uint32
	MaxSRQ          uint32
	MaxSRQWR        uint32
	MaxSRQSGE       uint32
	MaxQPRdAtom     uint8 // max_qp_rd_atom: responder resources (max_dest_rd_atomic)
	MaxQPInitRdAtom uint8 // max_qp_init_rd_atom: initiator depth (max_rd_atomic)
	MaxInlineData   uint32
	// ReservedOps is how many send WQEs each QP keeps for the device's own
	// work (rdmavt's reserved_operations): they are not counted against
	// max_send_wr and never complete to the user's CQ (reserved.go).
	ReservedOps uint32
	// CoreClockKHz is the rate of the device clock (hca_core_clock, the
	// unit of completion timestamps and of the raw clock), in kHz; 0 is
	// DefaultCoreClockKHz. The clock counts from the device's creation on
	// Clock.
	CoreClockKHz uint64
	// UserShare is the percentage of each object limit and of
	// MaxTotalMRBytes one uid other than root may take (quota.go); 0 is
	// DefaultUserShare, 100 lets one user take everything.
	UserShare uint32
	// SpinIdle is how long the engine polls the send rings of recently
	// active QPs before it parks and asks for doorbells (negative: never
	// spin). Only QPs the engine goroutine ran start a spin: turns that
	// the doorbell or the wire's receive goroutine run in its place
	// (engine.runHeldLocked) do not.
	SpinIdle time.Duration
	// Engines is how many engines run the device's QPs, each on its own
	// goroutine, in parallel (engine.go); a QP is run by one at a time. 0
	// is DefaultEngines, or one for a device with a wire (Addr): with one
	// engine its receive goroutine and doorbell run turns in the engine's
	// place, which saves a wake-up on every round trip; with several they
	// hand the turns to the QPs' engines.
	Engines int
	// PacketLoopback sends every packet between two QPs of this device
	// through the link chain, as it goes when a capture is open or a
	// fault rule applies; by default such packets take the direct path
	// (loopback.go).
	PacketLoopback bool

	MaxMTU    qp.MTU // port max_mtu
	ActiveMTU qp.MTU // port active_mtu, the UD MTU
	GID       [16]byte
	NodeGUID  uint64

	// Addr, when valid, is the IPv4 address the device speaks RoCEv2 on
	// (UDP port 4791); the port GID becomes ::ffff:Addr (link.go).
	Addr netip.Addr
	// AnySourcePort lets a connected QP take wire packets from its peer's
	// address whatever their UDP source port. By default the port must be
	// the one rxe and rdmafs send a QP's packets from (0xC000 + a hash of
	// the peer's QPN), which keeps other programs and QPs of the peer's
	// host out; a RoCE peer that picks its source ports otherwise (from a
	// flow label, say) needs this.
	AnySourcePort bool
	// NoCoalesce sends every wire datagram in a send of its own, without
	// UDP segmentation offload (link/gso.go), for comparison.
	NoCoalesce bool

	Clock clock.Clock
	Logf  func(format string, args ...any)
}

// DefaultCoreClockKHz is the device clock's default rate: 1 GHz, one tick
// a nanosecond.
const DefaultCoreClockKHz = 1_000_000

// MaxEngines bounds Config.Engines.
const MaxEngines = 64

// DefaultEngines is one engine per four CPUs, at least one and at most
// eight: each engine's turns want a core of their own and so does each
// client thread that posts to them (a client's post costs about what the
// engine's execution does, BENCHMARKS.md), so on a two-core host a second
// engine only takes the client's core.
func DefaultEngines() int { return min(max(runtime.NumCPU()/4, 1), 8) }

// DefaultConfig returns rxe-like limits scaled for a daemon whose every ring
// and MR is a memfd.
func DefaultConfig() Config {
	return Config{
		MaxQP:           1024,
		MaxQPWR:         16384,
		MaxSGE:          32,
		MaxCQ:           1024,
		MaxCQE:          65535,
		MaxMR:           4096,
		MaxMRSize:       1 << 32,
		MaxTotalMRBytes: 4 << 30,
		MaxPD:           1024,
		MaxMW:           4096,
		MaxAH:           4096,
		MaxSRQ:          1024,
		MaxSRQWR:        16384,
		MaxSRQSGE:       27,
		MaxQPRdAtom:     128,
		MaxQPInitRdAtom: 128,
		MaxInlineData:   512,
		ReservedOps:     2,
		MaxMTU:          qp.MTU4096,
		// ActiveMTU 0: MaxMTU, or on the wire what the interface allows.
	}
}

func (c *Config) fill() error {
	d := DefaultConfig()
	set32 := func(v *uint32, def uint32) {
		if *v == 0 {
			*v = def
		}
	}
	set32(&c.MaxQP, d.MaxQP)
	set32(&c.MaxQPWR, d.MaxQPWR)
	set32(&c.MaxSGE, d.MaxSGE)
	set32(&c.MaxCQ, d.MaxCQ)
	set32(&c.MaxCQE, d.MaxCQE)
	set32(&c.MaxMR, d.MaxMR)
	set32(&c.MaxPD, d.MaxPD)
	set32(&c.MaxMW, d.MaxMW)
	set32(&c.MaxAH, d.MaxAH)
	set32(&c.MaxSRQ, d.MaxSRQ)
	set32(&c.MaxSRQWR, d.MaxSRQWR)
	set32(&c.MaxSRQSGE, d.MaxSRQSGE)
	set32(&c.MaxInlineData, d.MaxInlineData)
	set32(&c.ReservedOps, d.ReservedOps)
	set32(&c.UserShare, DefaultUserShare)
	if c.MaxMRSize == 0 {
		c.MaxMRSize = d.MaxMRSize
	}
	if c.MaxTotalMRBytes == 0 {
		c.MaxTotalMRBytes = d.MaxTotalMRBytes
	}
	if c.MaxQPRdAtom == 0 {
		c.MaxQPRdAtom = d.MaxQPRdAtom
	}
	if c.MaxQPInitRdAtom == 0 {
		c.MaxQPInitRdAtom = d.MaxQPInitRdAtom
	}
	if c.MaxMTU == 0 {
		c.MaxMTU = d.MaxMTU
	}
	switch {
	case c.Engines < 0:
		return fmt.Errorf("engines %d: want at least 1", c.Engines)
	case c.Engines > MaxEngines:
		return fmt.Errorf("engines %d: at most %d", c.Engines, MaxEngines)
	case c.Engines == 0 && c.Addr.IsValid():
		c.Engines = 1
	case c.Engines == 0:
		c.Engines = DefaultEngines()
	}
	if c.ActiveMTU == 0 && c.Addr.IsValid() {
		// As rxe: max_mtu stays 4096 and the active MTU is the largest IB
		// MTU whose packets fit the interface's MTU with the headers
		// (RXE_MAX_HDR_LENGTH, 80 bytes), so a 1500-byte link runs 1024.
		if m, ok := link.InterfaceMTU(c.Addr); ok {
			c.ActiveMTU = qp.MTU256
			for _, x := range []qp.MTU{qp.MTU4096, qp.MTU2048, qp.MTU1024, qp.MTU512} {
				if x.Bytes()+80 <= m && x <= c.MaxMTU {
					c.ActiveMTU = x
					break
				}
			}
		}
	}
	if c.ActiveMTU == 0 {
		c.ActiveMTU = c.MaxMTU
	}
	switch {
	case !c.MaxMTU.Valid() || !c.ActiveMTU.Valid() || c.ActiveMTU > c.MaxMTU:
		return fmt.Errorf("bad MTU: active %d max %d", c.ActiveMTU.Bytes(), c.MaxMTU.Bytes())
	case c.UserShare > 100:
		return fmt.Errorf("user share %d%% > 100%%", c.UserShare)
	case c.MaxSGE > 255:
		return fmt.Errorf("max_sge %d > 255", c.MaxSGE)
	case c.MaxSRQSGE > 255:
		return fmt.Errorf("max_srq_sge %d > 255", c.MaxSRQSGE)
	case c.MaxInlineData > 65535:
		return fmt.Errorf("max_inline_data %d > 65535", c.MaxInlineData)
	case c.MaxQP > 1<<24-qpnStart:
		return fmt.Errorf("max_qp %d exceeds the 24-bit QPN space", c.MaxQP)
	case c.MaxMR+c.MaxMW >= 1<<20:
		// Tags are drawn from 2^24 (keys.go); the table stays sparse.
		return fmt.Errorf("max_mr+max_mw %d exceeds 2^20 (the 24-bit key tag space must stay sparse)", c.MaxMR+c.MaxMW)
	}
	if c.NodeGUID == 0 {
		var b [8]byte
		rand.Read(b[:])
		c.NodeGUID = binary.BigEndian.Uint64(b[:]) &^ (1 << 56) // unicast, locally administered style
	}
	if c.Addr.IsValid() {
		a := c.Addr.Unmap()
		if !a.Is4() || a.IsUnspecified() || a.IsMulticast() {
			return fmt.Errorf("addr %v: RoCEv2 needs a unicast IPv4 address", c.Addr)
		}
		c.Addr = a
		c.GID = roce.GIDFromIPv4(a)
	}
	if c.GID == ([16]byte{}) {
		// Link-local GID from the node GUID, as IB ports derive their first GID.
		c.GID[0], c.GID[1] = 0xfe, 0x80
		binary.BigEndian.PutUint64(c.GID[8:], c.NodeGUID)
	}
	if c.SpinIdle == 0 {
		c.SpinIdle = 50 * time.Microsecond
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.CoreClockKHz == 0 {
		c.CoreClockKHz = DefaultCoreClockKHz
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// Device is one virtual RDMA device with a single port.
type Device struct {
	// mu is Device.mu, the device's lock: one stripe per engine (devMutex;
	// Locking in the package doc).
	mu devMutex
	*objects
	cfg   Config
	clock clock.Clock
	// clockBase is when the device clock read 0 (RawClock).
	clockBase time.Time

	// odpMRs counts the on-demand MRs; while there is one, local
	// messages take the packet path (directLocked).
	odpMRs atomic.Int64

	closed bool // lockcheck:guarded mu
	// engines run the QPs' turns, each QP on one (QP.home); Device.mu has
	// a stripe per engine (devMutex). nextEngine picks a new QP's.
	engines    []*engine
	nextEngine int // lockcheck:guarded mu
	// chainMu is the chain's lock while an engine sends on it holding only
	// its stripe (several engines); chainOwner is that engine.
	chainMu    sync.Mutex
	chainOwner *engine // lockcheck:guarded chainMu
	// batchEnds counts the engine batches that ended (Quiesce).
	batchEnds atomic.Uint64
	// chain is the device's link (link.go), built at creation; link is
	// what the transport writes to, its head (a test may put a link of its
	// own in front). Both are set at creation; writes and deliveries on
	// the chain hold its lock (Locking in the package doc).
	chain *link.Chain
	link  link.Endpoint
	bell  *doorbell // the futex doorbell (doorbell.go)
	// bellQPs holds the device's QPs that can send (doorbell.go), by the
	// doorbell bit of their QPN: per bit an immutable slice a doorbell
	// wake reads without a lock, replaced by syncBellLocked under bellMu.
	// bellScan is odd while a wake looks at them (the reaper of destroyed
	// QPs waits for it before it unmaps their rings). bellScans counts the
	// QPs wakes have looked at.
	bellMu    sync.Mutex
	bellQPs   [ring.BellBits]atomic.Pointer[[]*QP]
	bellScan  atomic.Uint64
	bellScans atomic.Uint64
	// wireAddr is Config.Addr, the wire's address, when hasWire.
	wireAddr [4]byte
	hasWire  bool
	gsi      gsi // QP1, for the CM (gsi.go)
}

// objects are a device's verbs objects, its key and QPN tables, its event
// queue and counters.
type objects struct {
	pds  table[PD]      // lockcheck:guarded Device.mu
	mrs  table[MR]      // lockcheck:guarded Device.mu
	mws  table[MW]      // lockcheck:guarded Device.mu
	ahs  table[AH]      // lockcheck:guarded Device.mu
	cqs  table[CQ]      // lockcheck:guarded Device.mu
	srqs table[SRQ]     // lockcheck:guarded Device.mu
	qps  map[uint32]*QP // by QPN; lockcheck:guarded Device.mu
	// xrcds are the XRC domain handles, xrcDomains the domains of files
	// by inode (xrc.go).
	xrcds      table[XRCD]            // lockcheck:guarded Device.mu
	xrcDomains map[FileKey]*xrcDomain // lockcheck:guarded Device.mu
	// mcast are the multicast groups by MGID, mcastAttached their
	// attachments (mcast.go); changed under all of Device.mu.
	mcast         map[[16]byte]*mcGroup // lockcheck:guarded Device.mu
	mcastAttached int                   // lockcheck:guarded Device.mu
	// keys maps a key's tag (key >> 8) to its MR or MW (keys.go).
	keys     keyTable // lockcheck:guarded Device.mu
	nextQPN  uint32   // lockcheck:guarded Device.mu
	mrBytes  uint64   // registered bytes, against MaxTotalMRBytes; lockcheck:guarded Device.mu
	events   eventQueue
	Counters Counters
}

// New makes a device and starts its engine.
func New(cfg Config) (*Device, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	objs := &objects{
		qps:     map[uint32]*QP{},
		nextQPN: qpnStart,
	}
	objs.keys.init()
	objs.pds.init()
	objs.mrs.init()
	objs.mws.init()
	objs.ahs.init()
	objs.cqs.init()
	objs.srqs.init()
	objs.xrcds.init()
	objs.xrcDomains = map[FileKey]*xrcDomain{}
	objs.events.init()
	d := &Device{objects: objs, cfg: cfg, clock: cfg.Clock, clockBase: cfg.Clock.Now()}
	d.mu.init(cfg.Engines)
	for range cfg.Engines {
		d.engines = append(d.engines, &engine{})
	}
	d.Counters.shard(cfg.Engines)
	// The engines first: the wire's receive goroutine, started with the
	// chain, may schedule a turn with the first datagram.
	for i, e := range d.engines {
		e.start(d, i)
	}
	stopEngines := func() {
		for _, e := range d.engines {
			e.stop()
		}
	}
	if err := d.newChain(); err != nil {
		stopEngines()
		return nil, err
	}
	if err := d.startDoorbell(); err != nil {
		stopEngines()
		d.chain.Close()
		return nil, err
	}
	return d, nil
}

// Config returns the effective configuration.
func (d *Device) Config() Config { return d.cfg }

// Close stops the engine and releases every object's memory. Mappings that
// clients hold stay valid (they are their own references to the memfds).
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.stopGSI()
	for _, e := range d.engines {
		e.stop()
	}
	d.stopDoorbell()
	d.chain.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.qps {
		q.stopTimersLocked()
		q.destroyed = true
		q.releaseLocked()
		q.sqRegion.Close()
		if q.rqRegion != nil {
			q.rqRegion.Close()
		}
	}
	d.qps = map[uint32]*QP{}
	d.mrs.each(func(m *MR) { m.valid = false; m.backing.region.Close() })
	var cqs []*CQ
	d.cqs.each(func(c *CQ) { cqs = append(cqs, c) })
	var srqs []*SRQ
	d.srqs.each(func(s *SRQ) { srqs = append(srqs, s) })
	d.mu.Unlock()
	for _, s := range srqs {
		s.postMu.Lock()
		s.gone = true
		s.region.Close()
		s.postMu.Unlock()
	}
	// CQ rings are unmapped under their pollers' lock (which orders before
	// Device.mu), so a Poll in flight finishes first.
	for _, c := range cqs {
		c.pollMu.Lock()
		c.gone = true
		c.region.Close()
		c.pollMu.Unlock()
	}
	d.mu.Lock()
	d.events.close()
	return nil
}

func (d *Device) checkOpenLocked(op string) error {
	if d.closed {
		return errf(op, 19 /* ENODEV */, "device is closed")
	}
	return nil
}

// DeviceAttr is ibv_device_attr as rdmafs fills it.
type DeviceAttr = qp.DeviceAttr

// ibv_device_cap_flags rdmafs has.
const (
	capBadPKeyCntr   = 1 << 1
	capRCRNRNakGen   = 1 << 12
	capSRQResize     = 1 << 13
	capMemWindow     = 1 << 17
	capXRC           = 1 << 20 // IBV_DEVICE_XRC (xrc.go)
	capMemWindowType = 1 << 23 // IBV_DEVICE_MEM_WINDOW_TYPE_2B

	// capAtomicWrite is IB_UVERBS_DEVICE_ATOMIC_WRITE of the kernel's
	// ib_user_verbs.h, in device_cap_flags_ex only (rxe sets it too).
	capAtomicWrite = 1 << 40
)

const deviceCaps = capBadPKeyCntr | capRCRNRNakGen | capSRQResize | capMemWindow | capMemWindowType | capXRC

// Attr is ibv_query_device.
func (d *Device) Attr() DeviceAttr {
	c := &d.cfg
	return DeviceAttr{
		FwVer:                 "rdmafs 0.1",
		NodeGUID:              c.NodeGUID,
		SysImageGUID:          c.NodeGUID,
		MaxMRSize:             c.MaxMRSize,
		PageSizeCap:           4096,
		VendorID:              0xFFFFFF,
		VendorPartID:          0x5244, // "RD"
		MaxQP:                 c.MaxQP,
		MaxQPWR:               c.MaxQPWR,
		DeviceCapFlags:        deviceCaps,
		DeviceCapFlagsEx:      deviceCaps | capAtomicWrite,
		MaxSGE:                c.MaxSGE,
		MaxSGERd:              c.MaxSGE,
		MaxCQ:                 c.MaxCQ,
		MaxCQE:                c.MaxCQE,
		MaxMR:                 c.MaxMR,
		MaxPD:                 c.MaxPD,
		MaxQPRdAtom:           uint32(c.MaxQPRdAtom),
		MaxResRdAtom:          uint32(c.MaxQPRdAtom) * c.MaxQP,
		MaxQPInitRdAtom:       uint32(c.MaxQPInitRdAtom),
		AtomicCap:             "hca", // IBV_ATOMIC_HCA: atomics are atomic within this device
		MaxMW:                 c.MaxMW,
		MaxAH:                 c.MaxAH,
		MaxSRQ:                c.MaxSRQ,
		MaxSRQWR:              c.MaxSRQWR,
		MaxSRQSGE:             c.MaxSRQSGE,
		MaxPKeys:              1,
		LocalCAAckDelay:       15,
		PhysPortCnt:           1,
		MaxInlineData:         c.MaxInlineData,
		MaxTotalMRBytes:       c.MaxTotalMRBytes,
		ReservedOps:           c.ReservedOps,
		MaxMcastGrp:           MaxMcastGrp,
		MaxMcastQPAttach:      MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxTotalMcastQPAttach,

		HCACoreClock:            c.CoreClockKHz,
		CompletionTimestampMask: ^uint64(0),
	}
}

// RawClock reads the device clock and the wall clock at one instant: the
// ticks (at hca_core_clock kHz) since the device was made, which never go
// back, and the wall-clock time in nanoseconds since the Unix epoch
// (ibv_query_rt_values_ex; what a completion's timestamps record).
func (d *Device) RawClock() (ticks, wallNS uint64) {
	now := d.clock.Now()
	return d.ticksAt(now), uint64(now.UnixNano())
}

// ticksAt converts a time of the device's clock to device ticks. The
// elapsed time is monotonic (time.Time's monotonic reading on the real
// clock), so ticks never go back while the wall clock is stepped.
func (d *Device) ticksAt(now time.Time) uint64 {
	ns := now.Sub(d.clockBase)
	if ns < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(ns), d.cfg.CoreClockKHz)
	q, _ := bits.Div64(hi%1_000_000, lo, 1_000_000)
	return q
}

// PortAttr is ibv_port_attr for port 1.
type PortAttr struct {
	State      string // "ACTIVE"
	MaxMTU     qp.MTU
	ActiveMTU  qp.MTU
	GID        [16]byte
	LID        uint16
	LinkLayer  string
	GIDTblLen  uint32
	PKeyTblLen uint32
	MaxMsgSz   uint32
}

// Port is ibv_query_port(1).
func (d *Device) Port() PortAttr {
	return PortAttr{
		State:      "ACTIVE",
		MaxMTU:     d.cfg.MaxMTU,
		ActiveMTU:  d.cfg.ActiveMTU,
		GID:        d.cfg.GID,
		LinkLayer:  "ethernet",
		GIDTblLen:  1,
		PKeyTblLen: 1,
		MaxMsgSz:   1 << 31,
	}
}

// GIDString is the port GID in text form.
func GIDString(g [16]byte) string { return netip.AddrFrom16(g).String() }

func (d *Device) limits() qp.Limits {
	return qp.Limits{
		PhysPortCnt:     1,
		MaxMTU:          d.cfg.MaxMTU,
		MaxQPRdAtom:     d.cfg.MaxQPRdAtom,
		MaxQPInitRdAtom: d.cfg.MaxQPInitRdAtom,
		NumPKeys:        1,
	}
}

// isLocalGID reports whether g addresses this device.
func (d *Device) isLocalGID(g [16]byte) bool { return g == d.cfg.GID }

// Counters are device-wide statistics, readable at any time without locks.
type Counters struct {
	// The link's: packets_sent, bytes_sent, no_route, the fault
	// injector's, the wire's and capture's (link.Counters).
	// The link's PacketsSent and BytesSent count only what went through
	// the chain; SentPackets and SentBytes add the direct path's.
	link.Counters
	// PacketsRecv and BytesRecv count what the chain delivered, from the
	// engine whose turn received it; RecvPackets and RecvBytes add the
	// direct path's.
	PacketsRecv     ShardedCounter
	BytesRecv       ShardedCounter
	Retransmits     atomic.Uint64
	RetryTimeouts   atomic.Uint64
	RNRNaksSent     atomic.Uint64
	RNRNaksRecv     atomic.Uint64
	SeqErrNaks      atomic.Uint64
	DuplicateReqs   atomic.Uint64
	RemoteErrNaks   atomic.Uint64
	DroppedPackets  atomic.Uint64
	QKeyViolations  atomic.Uint64
	CQOverflows     atomic.Uint64
	Completions     ShardedCounter
	ErrCompletions  ShardedCounter
	UDOversizeDrops atomic.Uint64
	// Multicast (mcast.go): datagrams sent to a group, received for one,
	// the copies handed to attached QPs, and those for no group here.
	McastPacketsSent atomic.Uint64
	McastPacketsRecv atomic.Uint64
	McastDelivered   atomic.Uint64
	McastDropped     atomic.Uint64
	// McastLoopback counts the multicast datagrams the chain handed back
	// on this device (loopback) rather than through the wire.
	McastLoopback atomic.Uint64
	EngineRuns    ShardedCounter
	EngineParks   atomic.Uint64
	// InlineRuns counts the batches (also in EngineRuns) that the wire's
	// receive goroutine or the doorbell ran themselves instead of waking
	// the engine goroutine (engine.runHeldLocked).
	InlineRuns  atomic.Uint64
	Doorbells   atomic.Uint64
	AsyncEvents atomic.Uint64
	// ForeignPacketsDropped counts packets for a connected QP that came
	// from a QP other than its peer (also counted in DroppedPackets).
	ForeignPacketsDropped atomic.Uint64
	// DirectPackets counts the packets (path-MTU segments) between two
	// QPs of the device that took the direct path (loopback.go), and
	// DirectBytes their bytes, each sent and received at once: they are
	// in packets_sent and packets_recv, bytes_sent and bytes_recv.
	DirectPackets ShardedCounter
	DirectBytes   ShardedCounter
	// With several engines: ExclusiveRuns counts the QP turns run under
	// all of Device.mu (exclusiveLocked), CrossEnginePackets the packets
	// one engine handed to a QP of another (its inbox), EngineMoves the
	// QPs moved to their local peer's engine at RTR.
	// DirectOps counts the WRITEs, SENDs, READs and atomics executed
	// against their peer QP without packets (loopback.go,
	// executeDirectLocked); their segments and acknowledgements are
	// counted in DirectPackets as if they had been sent.
	DirectOps          ShardedCounter
	ExclusiveRuns      atomic.Uint64
	CrossEnginePackets ShardedCounter
	EngineMoves        atomic.Uint64
}

// Counter is one named value.
type Counter struct {
	Name  string
	Value uint64
}

// ShardedCounter is a counter that each engine adds to on a cache line of
// its own, read as the sum: one shared word, added to at every completion
// by engines on several cores, would move between their caches at each
// add. Adds before the shards exist (or beyond them) go to a common word.
type ShardedCounter struct {
	common atomic.Uint64
	shards []paddedCounter
}

type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte // the rest of a 64-byte cache line
}

// Add adds v to engine shard's share (a negative shard: the common word).
func (s *ShardedCounter) Add(shard int, v uint64) {
	if uint(shard) < uint(len(s.shards)) {
		s.shards[shard].n.Add(v)
		return
	}
	s.common.Add(v)
}

// Load is the counter: the sum of every share.
func (s *ShardedCounter) Load() uint64 {
	t := s.common.Load()
	for i := range s.shards {
		t += s.shards[i].n.Load()
	}
	return t
}

// shard gives the sharded counters a share per engine; at creation,
// before any engine runs.
func (c *Counters) shard(engines int) {
	for _, s := range []*ShardedCounter{&c.Completions, &c.ErrCompletions, &c.CrossEnginePackets, &c.PacketsRecv,
		&c.BytesRecv, &c.EngineRuns, &c.DirectPackets, &c.DirectBytes, &c.DirectOps} {
		s.shards = make([]paddedCounter, engines)
	}
}

// SentPackets is packets_sent: the chain's and the direct path's.
func (c *Counters) SentPackets() uint64 { return c.PacketsSent.Load() + c.DirectPackets.Load() }

// RecvPackets is packets_recv: the chain's and the direct path's.
func (c *Counters) RecvPackets() uint64 { return c.PacketsRecv.Load() + c.DirectPackets.Load() }

// SentBytes is bytes_sent: the chain's and the direct path's.
func (c *Counters) SentBytes() uint64 { return c.BytesSent.Load() + c.DirectBytes.Load() }

// RecvBytes is bytes_recv: the chain's and the direct path's.
func (c *Counters) RecvBytes() uint64 { return c.BytesRecv.Load() + c.DirectBytes.Load() }

// List returns the counters in a fixed order.
func (c *Counters) List() []Counter {
	return []Counter{
		{"packets_sent", c.SentPackets()},
		{"packets_recv", c.RecvPackets()},
		{"bytes_sent", c.SentBytes()},
		{"bytes_recv", c.RecvBytes()},
		{"retransmits", c.Retransmits.Load()},
		{"retry_timeouts", c.RetryTimeouts.Load()},
		{"rnr_naks_sent", c.RNRNaksSent.Load()},
		{"rnr_naks_recv", c.RNRNaksRecv.Load()},
		{"seq_err_naks", c.SeqErrNaks.Load()},
		{"duplicate_requests", c.DuplicateReqs.Load()},
		{"remote_err_naks", c.RemoteErrNaks.Load()},
		{"dropped_packets", c.DroppedPackets.Load()},
		{"no_route", c.NoRoute.Load()},
		{"qkey_violations", c.QKeyViolations.Load()},
		{"cq_overflows", c.CQOverflows.Load()},
		{"completions", c.Completions.Load()},
		{"error_completions", c.ErrCompletions.Load()},
		{"ud_oversize_drops", c.UDOversizeDrops.Load()},
		{"multicast_packets_sent", c.McastPacketsSent.Load()},
		{"multicast_packets_recv", c.McastPacketsRecv.Load()},
		{"multicast_delivered", c.McastDelivered.Load()},
		{"multicast_dropped", c.McastDropped.Load()},
		{"multicast_loopback", c.McastLoopback.Load()},
		{"engine_runs", c.EngineRuns.Load()},
		{"engine_parks", c.EngineParks.Load()},
		{"engine_inline_runs", c.InlineRuns.Load()},
		{"direct_ops", c.DirectOps.Load()},
		{"engine_exclusive_runs", c.ExclusiveRuns.Load()},
		{"cross_engine_packets", c.CrossEnginePackets.Load()},
		{"engine_moves", c.EngineMoves.Load()},
		{"doorbells", c.Doorbells.Load()},
		{"async_events", c.AsyncEvents.Load()},
		{"fault_drops", c.FaultDrops.Load()},
		{"fault_dups", c.FaultDups.Load()},
		{"fault_delays", c.FaultDelays.Load()},
		{"fault_reorders", c.FaultReorders.Load()},
		{"icrc_errors", c.ICRCErrors.Load()},
		{"malformed_packets", c.MalformedPackets.Load()},
		{"wire_packets_sent", c.WirePacketsSent.Load()},
		{"wire_packets_recv", c.WirePacketsRecv.Load()},
		{"wire_send_errors", c.WireSendErrors.Load()},
		{"wire_recv_errors", c.WireRecvErrors.Load()},
		{"wire_send_calls", c.WireSendCalls.Load()},
		{"wire_recv_calls", c.WireRecvCalls.Load()},
		{"wire_send_full", c.WireSendFull.Load()},
		{"wire_recv_overruns", c.WireRecvOverruns.Load()},
		{"wire_mcast_overruns", c.WireMcastOverruns.Load()},
		{"wire_coalesced_sends", c.WireCoalescedSends.Load()},
		{"wire_coalesced_recv", c.WireCoalescedRecv.Load()},
		{"wire_coalesce_refused", c.WireCoalesceRefused.Load()},
		{"wire_tx_socket_fallbacks", c.WireTxSocketFallbacks.Load()},
		{"wire_tx_socket_evictions", c.WireTxSocketEvictions.Load()},
		{"capture_drops", c.CaptureDrops.Load()},
		{"foreign_packets_dropped", c.ForeignPacketsDropped.Load()},
		{"direct_packets", c.DirectPackets.Load()},
	}
}

// EventType is the ibv_event_type of an async event (qp.EventType).
type EventType = qp.EventType

// Event is one asynchronous event (ibv_async_event).
type Event struct {
	Seq  uint64
	Type EventType
	// Object the event is about: "qp", "cq", "srq" or "port", and its
	// handle or QPN.
	Kind   string
	Handle uint32
	// Owner is the uid of the object (events.go); port events are root's
	// and everyone sees them.
	Owner Owner
}

// String is the event's line in the events file (qp.FormatEvent).
func (e Event) String() string { return qp.FormatEvent(e.Type, e.Kind, e.Handle) }
