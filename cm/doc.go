// Package cm is rdmafs's RDMA connection manager: the daemon side of
// librdmacm. It speaks the real IB CM protocol (IBA vol. 1 ch. 12,
// management class 0x07, class version 2) in MADs on QP1, so the same
// messages connect two ids of one device, two rdmafs devices, or rdmafs
// and a kernel peer; and it keeps rdma_cm's ids, ports, listeners and
// events, which fsnode shows as the cm/ tree (cm/CONTRACT.md, and
// the mount's README).
//
// It imports device (for the GSI and the error type), qp and roce, never
// go-fuse.
//
// # Pieces
//
//   - mad.go: the codec. Encode and Decode of the 256-byte MADs (REQ, MRA,
//     REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP) at the IBTA tables'
//     offsets; Decode refuses anything else with an error, never a panic
//     (FuzzDecodeMAD).
//   - cmahdr.go: rdma_cm's 36-byte address header at the start of a REQ's
//     and SIDR_REQ's private data, port spaces and service IDs
//     ((ps << 16) + port).
//   - agent.go: the Agent (one per device), its Config, counters and
//     tables (ids, comm IDs, listeners, ports, channels), addressing (which
//     addresses are the device's, which GID reaches an address) and port
//     allocation.
//   - id.go: the ID, its states and timers, Destroy (what the peer is
//     told in each state) and the attr text.
//   - commands.go: the ctl commands (bind, resolve_addr, resolve_route,
//     listen, connect, establish, accept, reject, disconnect, notify,
//     set_option, migrate) and cm/new's parser.
//   - recv.go: HandleMAD, the receiving half of the protocol.
//   - event.go: events, their 1024-byte records, and the Channel queue.
//   - mcast.go: McastGID, the MGID of an IP multicast group, which
//     resolve_addr to a group resolves to. Joins themselves are the
//     library's (librdmacm/mcast.c): on RoCE the kernel's rdma_cm asks no
//     one either, and the group's members are the device's (attach_mcast).
//
// # The protocol as implemented
//
// Active side: connect sends a REQ (the address header plus up to 56
// bytes of the application's) or, for UD, a SIDR_REQ (up to 180). The
// passive agent finds the listener by service ID and the header's
// destination address, makes a new id in req_rcvd and reports
// connect_request; like the 6.1 kernel's rdma_cm (IB_CM_MRA_FLAG_DELAY) it
// sends an MRA (service timeout 24, about 67 s: the application decides in
// its own time) only when the REQ comes again before the application
// answered. accept sends a REP (rep_sent); the
// active side reports connect_response (rep_rcvd); its establish sends the
// RTU; the passive side reports established when the RTU arrives (or on
// notify). disconnect sends a DREQ; the peer reports disconnected
// (dreq_rcvd) and its disconnect answers with the DREP; both report
// disconnected, wait out the timewait (2^(packet life time + 1) * 4 us, 0.5 s
// on RoCE) and report timewait_exit. SIDR_REP status 0 completes a UD
// connect with the remote QPN and Q_Key (established).
//
// PSNs as the kernel's CM: the starting PSN of a REQ or REP is the PSN its
// sender's QP receives at (attr psn: the QP's rq_psn), the peer's the one
// it sends at (remote_psn: sq_psn). A RoCEv2 route gets the kernel's flow
// label, a hash of the two ports (RoCEFlowLabel), which the REQ carries.
//
// Timing follows the kernel's CM and rdma_cm: a REQ, REP, DREQ waits
// 2 * 2^(plt-8) ms + 2^(cmrt-8) ms (4.6 s with packet life time 16 and CM
// response timeout 20) and is sent at most 16 times; a SIDR_REQ waits
// 2^(20-8) ms. An MRA stretches the wait to its service timeout. When the
// sends run out the id is unreachable (-110); a DREQ nobody answers ends in
// disconnected (-110) and the timewait.
//
// What arrives is checked against the connection it names (the remote comm
// ID field is ours, the local one the peer's): a duplicate REQ gets an MRA
// while unanswered, or a REJ "stale connection" if its connection is in timewait; a
// duplicate REP gets the RTU again once established; a DREQ in timewait
// gets the DREP again, and a DREQ for no connection a DREP all the same
// (so the peer finishes); a REQ with no listener is rejected with reason 8
// (invalid service ID), one beyond the listener's backlog, the id limits or
// a full channel with reason 3 (no resources); anything else out of place
// is dropped and counted (cm/counters: dropped_malformed, dropped_unknown,
// dropped_duplicate, dropped_state).
//
// Destroying an id tells the peer what the kernel's CM would: a REJ
// (timeout, with our CA GUID) for a REQ sent, a REJ (consumer) for a
// request received or answered, a SIDR_REP "reject" for a UD request, a
// DREQ for a connection, a DREP for a DREQ received. An id destroyed with
// a connection lingers, invisible, through its timewait (timewait_ids), so
// the peer's DREP and retries still find it.
//
// # Bounds
//
// Ids are bounded by Config.MaxIDs (default 4096) and a user other than
// root by UserShare percent of it (Attach takes --user-share from the
// device), channels likewise; the ids a connect request makes count
// against the listener's owner. What a connect request makes is bounded
// where its sender cannot reach (issue #26): a listener has at most
// backlog (1024) requests unanswered or answered and waiting for the RTU;
// one remote port at most three quarters of a backlog and UserShare
// percent of the ids; requests never take the last eighth of the ids; the
// REP's tries and the timewait use the REQ's times only up to the device's
// bounds (id.go: 25.2 s a try, 8.4 s of timewait). A channel keeps at most
// MaxBacklog (4096) events for a reader that does not drain it, and all of
// an owner's channels MaxQueuedBytesPerUser; lingering ids are at most
// MaxIDs (the oldest goes first). No received MAD makes state without a
// listener, so a flood of REQs costs a REJ each.
//
// A listening id is unique on its port and address (listen is EADDRINUSE
// beside another listener, whatever reuseaddr said), and binding a port
// below 1024 needs CAP_NET_BIND_SERVICE (DoAs with the writer's Caps).
//
// # Goroutines and locks
//
// The agent has no goroutine of its own. Three kinds of callers enter it,
// each taking Agent.mu for its whole call:
//
//   - commands (fsnode's writes to cm/I/ctl, cm/new, rmdir), on FUSE
//     request goroutines;
//   - HandleMAD, on the device's GSI goroutine (device/gsi.go), which
//     calls it for each MAD in arrival order and never holds Device.mu
//     while doing so;
//   - timers (retries, timewait), on the clock's goroutine (clock.Real's
//     AfterFunc, or the goroutine that advances a clock.Fake). A timer
//     carries its id's timer generation; one that lost a race with a
//     state change finds a newer generation and does nothing.
//
// Lock order: Agent.mu, then Channel.mu, then what Transport.SendMAD
// takes (Device.mu, for one send). The device never calls the agent under
// Device.mu: what it receives waits in its GSI queue. Config.NewID (fsnode
// publishing a new id's directory) runs under Agent.mu and must not call
// the agent. Events leave through Channel.Next, which takes only
// Channel.mu; fsnode runs one goroutine per channel that writes them to
// the channel's FIFO.
package cm
