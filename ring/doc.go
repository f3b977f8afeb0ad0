// Package ring is rdmafs's shared-memory ring ABI: the binary layout of the
// send, receive, shared receive and completion queues that the daemon and
// its clients map together, the producer/consumer discipline on them, the
// encoding of WQEs and CQEs in their slots, and the memfd regions that hold
// them. The daemon and the verbs client library both use this package, so
// the two sides of the ABI are one piece of code; a client in another
// language follows this document.
//
// The design is rxe's shared queues (rdma_user_rxe.h, rxe_queue.h) with
// three changes: indices run free instead of being masked, so a ring of N
// slots holds N entries, not N-1; the header carries its own geometry and a
// magic number so a mapping can be checked; and there are words for
// doorbell avoidance and CQ events.
//
// # Ring layout
//
// A ring is one mapping: a 256-byte header at offset 0, then slot_count
// slots of slot_size bytes each; slot i starts at 256 + i*slot_size. All
// multi-byte values everywhere in this package are little-endian. The
// header (Off* constants):
//
//	offset size field
//	     0    4 magic        0x474E5244 (Magic; bytes 44 52 4E 47)
//	     4    4 version      1 (Version)
//	     8    4 kind         1 SQ, 2 RQ, 3 SRQ, 4 CQ, 7 doorbell (Kind)
//	    12    4 slot_size    bytes per slot, a power of two ≥ 64
//	    16    4 slot_count   slots, a power of two ≥ 1
//	    20    4 data_offset  256, the offset of slot 0
//	 24-63   40 reserved     zero
//	    64    4 producer     producer index; 68-127 pad (own cache line)
//	   128    4 consumer     consumer index; 132-191 pad (own cache line)
//	   192    4 flags        bit 0 NEED_WAKEUP (FlagNeedWakeup); others zero
//	   196    4 event_seq    CQ event sequence, a futex word
//	   200    4 armed        CQ notification: 0 none, 1 next, 2 solicited
//	204-207   4 reserved     zero
//	   208   16 bell_summary doorbell (kind 7): a bit per bitmap word;
//	                         other kinds: reserved, zero
//	224-255  32 reserved     zero
//
// The daemon writes the first 24 bytes once, with Init, before anyone else
// can map the ring; they never change. A *Ring copies the geometry when it
// is made (Init, Attach) and never reads it again, because the other side
// can write the header at any time: all bounds follow from the copy.
//
// # Indices
//
// producer and consumer are free-running u32 counters: they are stored
// unmasked and wrap at 2^32; slot(i) = i & (slot_count-1). With u32 wrap
// arithmetic, count = producer - consumer; the ring is empty when count is
// 0 and full when count == slot_count (every slot is usable). count >
// slot_count is impossible and means the peer is broken or hostile: the
// side that sees it reports ErrCorrupt and never indexes with it.
//
// Each index has one owner, the only side that writes it:
//
//	kind      producer (writes producer)   consumer (writes consumer)
//	SQ        client                       daemon
//	RQ, SRQ   client                       daemon
//	CQ        daemon                       client
//
// A doorbell (kind 7) rouses the device's parked engine; its indices are
// unused. See Doorbell below.
//
// The owner keeps its index in private memory (Producer.head,
// Consumer.tail) and only stores it to the shared word to publish; it never
// reads its own index back from the ring. The peer's index is loaded once
// per batch (Producer.Free, Consumer.Pending) and checked before use.
// Producer and Consumer are not safe for concurrent use: several threads
// posting to one queue take a lock, as rdma-core's rxe provider does.
//
// SendPoster.Post and PostRecv are the producer's post loop for work
// queues (check each WR, take a free slot, encode, advance; publish once
// at the end, so the WRs before a refused one are posted): the verbs
// library and the daemon's post files both use them, and keep only their
// locking, errnos and doorbells. The consumer index is loaded once per
// call.
//
// A queue has one producing client at a time. The daemon's text files
// (qp/N/post_send, post_recv, srq/H/post_recv) post as a client would,
// under the QP's post lock, starting from the producer index as the ring
// shows it: the one place a producer reads its index back. So a shell may
// post to a queue whose mapping program is not posting (between its
// phases, or after it exited), never beside a program that is: the two
// would publish over each other's slots. The daemon cannot tell the two
// apart (the mapping is the program's), and the engine validates every
// WQE it takes, so a collision loses or fails WRs of that QP only.
//
// # Memory ordering
//
// Index words, flags, event_seq and armed are accessed only with 32-bit
// atomics; slot bytes with plain loads and stores. Go's sync/atomic is
// sequentially consistent; a C client needs at least the orders named here.
//
// The store rule: a side writes its index word with one aligned 32-bit
// store (atomic_store_explicit on a _Atomic uint32_t, __atomic_store_n, or
// Go's atomic.StoreUint32), never in parts. The peer loads the word at any
// moment; an index written in two steps (two 16-bit halves, byte by byte,
// a memcpy the compiler splits) can be seen torn, half old and half new,
// and a torn index is a count beyond slot_count or beyond what was
// produced. The daemon cannot tell that from a hostile client and declares
// the ring corrupt (ErrCorrupt): an SQ or RQ moves its QP to ERR
// (qp_fatal); a CQ whose consumer index is seen torn counts as overflowed,
// raises cq_err, moves the QP completing into it to ERR and takes no more
// completions until it is resized, which looks like lost completions to
// the client. The same holds for flags, event_seq and armed.
//
//  1. Producer: write the slot(s), then store producer (release). Before
//     writing a slot, load consumer (acquire) and check count < slot_count:
//     the slot is then known to be read completely.
//  2. Consumer: load producer (acquire) once per batch, read slots
//     [consumer, producer), then store consumer (release). A slot may be
//     overwritten as soon as the store is visible, so anything still needed
//     is copied out first (the Decode functions copy).
//  3. The daemon treats every slot it consumes as hostile: the client can
//     rewrite it while it is being read. Each field is read exactly once,
//     lengths are checked against the slot before use, and the decoded
//     copy is what gets validated and executed (no double fetch).
//  4. NEED_WAKEUP, written by the consumer of the ring (the daemon for
//     SQ/RQ/SRQ, the client for a CQ it sleeps on), avoids doorbells while
//     the consumer is polling, as io_uring's SQPOLL does. Consumer, before
//     sleeping: set NEED_WAKEUP, then load producer again; sleep only if
//     the ring is still empty, and clear NEED_WAKEUP on waking. Producer,
//     after publishing: load flags; ring the doorbell only if NEED_WAKEUP
//     is set. Each side's store and the following load of the other
//     side's word need a full (seq_cst) fence between them, or both can
//     miss each other and the consumer sleeps on a non-empty ring.
//  5. CQ events. A client wanting to block: seq := event_seq; store armed
//     (1 next, 2 solicited); poll the CQ once more; if it is empty,
//     futex-wait on event_seq while it equals seq. The daemon, after
//     publishing a CQE: swap armed to 0; if it was armed for this CQE
//     (next: any; solicited: a solicited or error completion), increment
//     event_seq and FUTEX_WAKE all waiters (BumpEvent, WakeEventWaiters).
//     Because seq is read before arming and polling, an event in between
//     makes the wait return at once. The futex is shared, not
//     FUTEX_PRIVATE: waiters are in other processes.
//
// # Doorbell
//
// The device doorbell (MOUNT/doorbell, kind 7, shared by every user of the
// device) is a header and BellSlots slots of MinSlotSize bytes: a bitmap of
// BellBits bits, bit i in bit i%32 of the u32 at data_offset + 4*(i/32),
// and a summary of BellSummaryBits bits in the header, bit j in bit j%32
// of the u32 at OffBellSummary + 4*(j/32), one for each word of the bitmap
// (word w has summary bit w % BellSummaryBits). A client whose post found
// NEED_WAKEUP on a send ring rings it for that QP (RingBell): it sets bit
// qpn % BellBits with an atomic OR, then the summary bit of that bit's
// word with an atomic OR (either left alone if already set, each checked
// on its own), then increments event_seq and FUTEX_WAKEs it, all
// sequentially consistent and after the producer store. The daemon reads
// event_seq, takes the summary (TakeBells: each non-zero summary word
// swapped to zero), then takes each bitmap word a taken summary bit names
// (swapped to zero), looks at the QPs whose numbers fall on the taken bits,
// and futex-waits while event_seq is still what it read. A mark whose
// summary bit it missed (set after its swap) was followed by an increment,
// so it looks again and finds the summary bit; the bitmap bit was set
// before that summary bit, so the word's swap after it finds it (or an
// earlier swap took it). A wake thus costs the daemon the summary's 4
// words, the marked bitmap words and the QPs of the marked bits, not a
// look at every word or QP; a bit is shared by the QP numbers equal modulo
// BellBits, and no mark is ever lost, so the bitmap cannot overflow. A bit
// set for a QP that does not exist, or is not the setter's, costs the
// daemon a look at that QP's ring indices and nothing else (the engine
// takes only what the ring holds); a bitmap bit set without its summary
// bit is not looked at until a mark sets the summary bit; a client setting
// every bit of both costs a look at every word and every QP that can send,
// which is what each wake cost before the bitmap. The doorbells of kind 5
// (no bitmap) and 6 (no summary) are retired; see KindDoorbell.
//
// # Slots
//
// The slice a Ring, Producer or Consumer returns for a slot aliases the
// mapping: it is valid while the mapping is, and belongs to the side the
// index protocol gives it to (the producer until it publishes past it, the
// consumer until it publishes past it).
//
// A scatter/gather element (SGE*, 16 bytes):
//
//	0 u64 addr     in the MR's iova space
//	8 u32 length
//	12 u32 lkey
//
// Send WQE (SQ slots; SendOff*): a 64-byte header, then either num_sge
// SGEs or, when send_flags has INLINE (8), inline_len bytes of data.
//
//	 0 u64 wr_id
//	 8 u32 send_flags   ibv_send_flags: 1 fence, 2 signaled, 4 solicited, 8 inline
//	12 u8  opcode       ibv_wr_opcode
//	13 u8  num_sge      0 when INLINE
//	14 u16 inline_len   0 unless INLINE
//	16 u32 imm_data     SEND_WITH_INV, LOCAL_INV: invalidate_rkey;
//	                    BIND_MW: the MW handle
//	20 u32 rkey         BIND_MW: the new rkey
//	24 u64 remote_addr  BIND_MW: bind_addr
//	32 u64 compare_add  BIND_MW: bind_length; ATOMIC_WRITE: the data
//	40 u64 swap         BIND_MW: bind_lkey in the low 32 bits,
//	                    bind_access (ibv_access_flags) in the high 32
//	48 u32 ah           UD: address handle
//	52 u32 remote_qpn   UD
//	56 u32 remote_qkey  UD
//	60 u32 reserved     zero
//	64 ... SGEs (16 bytes each) or inline data
//
// ATOMIC_WRITE (opcode 15) has no SGEs and no inline data: its 8 bytes are
// bytes 32-39 of the header, in the order they are to land in the remote
// word. The engine sends them as the packet's payload and the responder
// stores them as one aligned 8-byte word, so byte i of compare_add is byte
// i at remote_addr on every host; read as the little-endian u64 of this
// layout they are the value of the remote word on a little-endian host. A
// client that has them as bytes (ibv_wr_atomic_write's atomic_wr, the SGE
// of an ibv_post_send) copies them there when it posts.
//
// A send WQE is malformed (ErrMalformed) if num_sge*16 or inline_len
// exceeds slot_size-64, or if INLINE is set with num_sge ≠ 0, or clear with
// inline_len ≠ 0. The opcode is checked by the engine, not the decoder, so
// that a bad one completes with the proper status.
//
// Receive WQE (RQ and SRQ slots; RecvOff*): a 16-byte header, then num_sge
// SGEs; malformed if num_sge*16 exceeds slot_size-16.
//
//	 0 u64 wr_id
//	 8 u32 num_sge
//	12 u32 reserved     zero
//	16 ... SGEs
//
// CQE (CQ slots; CQEOff*; CQESize = 64 bytes, in slots of 64):
//
//	 0 u64 wr_id
//	 8 u8  status        ibv_wc_status
//	 9 u8  opcode        ibv_wc_opcode
//	10 u16 wc_flags      ibv_wc_flags
//	12 u32 vendor_err
//	16 u32 byte_len
//	20 u32 imm_data      or the invalidated rkey (wc_flags WITH_INV)
//	24 u32 qp_num
//	28 u32 src_qp
//	32 u16 pkey_index
//	34 u16 slid
//	36 u8  sl
//	37 u8  dlid_path_bits
//	38-39  reserved      zero
//	40 u64 completion_ts            device clock, hca_core_clock kHz ticks
//	48 u64 completion_wallclock_ns  ns since the Unix epoch
//	56-63  reserved      zero
//
// The two timestamps are written only for a CQ created with their
// wc_flags (cq/new wc_flags=completion_timestamp,
// completion_timestamp_wallclock); otherwise they are zero, and the
// engine reads no clock for the CQ.
//
// # Sizing
//
// As rxe sizes its queue elements (VERBS.md §1.2), slot sizes are powers of
// two of at least one 64-byte cache line, and the slack of the round-up is
// usable and reported:
//
//	send:  slot_size = pow2ceil(64 + max(max_send_sge*16, max_inline_data))
//	       cap.max_send_sge    = min((slot_size-64)/16, 255)
//	       cap.max_inline_data = min(slot_size-64, 65535)
//	recv:  slot_size = pow2ceil(max(16 + max_recv_sge*16, 64))
//	       cap.max_recv_sge    = (slot_size-16)/16
//	count: slot_count = pow2ceil(max(max_wr, 1)); cap.max_*_wr = slot_count
//	bytes: Size = 256 + slot_size*slot_count (a Region rounds up to pages)
//
// SendSlotSize, RecvSlotSize and SlotCount compute these; the caps they
// return are what create_qp/create_srq report back, like the cap
// out-parameters of ibv_create_qp. The u8 num_sge and u16 inline_len limit
// requests to 255 SGEs and 65535 inline bytes (MaxSendSGE, MaxInlineLen).
//
// # Memory
//
// Rings and MR memory are memfds created by the daemon (NewRegion) with
// their size sealed, mapped MAP_SHARED. Clients map the same pages through
// the ring files of the mount (MapFile), or any holder of the fd through
// Map.
package ring
