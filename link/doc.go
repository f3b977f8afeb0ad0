// Package link is the link layer of an rdmafs device: what carries the IB
// packets of its transport to their destination, on the same device
// (loopback) or to another over RoCEv2 (the wire), with fault injection and
// packet capture on the way. It is below the device core and cannot import
// it (a test says so); the device talks to it only through Endpoint and
// Dispatcher, and it to the device only through Packet. gVisor's
// pkg/tcpip/link/{loopback,channel,sniffer} is the model: endpoints that
// write batches of packets, a dispatcher that receives, decorators that
// wrap an endpoint and stand in as the dispatcher of the one below.
//
// # Pieces
//
// The device builds one chain at creation (NewChain) and writes every
// packet it sends to the chain's head:
//
//	device ─WritePackets─▶ FaultInjector ─▶ Capture ─▶ route ─┬─▶ loopback ─DeliverLocal─▶ Capture ─▶ device
//	                                                          └─▶ WireEndpoint ─▶ a UDP socket per source port (raw socket when none)
//	raw socket ─▶ WireEndpoint's receive goroutine ─DeliverDatagrams─▶ Capture ─▶ device
//
// The files:
//
//   - link.go: Packet (the device's packet as the link sees it: Meta,
//     Header, Clone, Hold, Done), Endpoint, Dispatcher, Datagram, Counters,
//     Encode (the one encoder of a packet into a RoCEv2 datagram) and
//     Chain.
//   - faults.go: FaultInjector, the top of the chain. Inactive, it passes
//     each batch on untouched; active, it drops, duplicates, delays and
//     reorders packets at random (Faults), acting on loopback and wire
//     alike.
//   - capture.go: Capture, a pcap of every packet sent (as Encode builds
//     it) and every datagram received (as it arrived), each reader seeing
//     what its uid may see.
//   - route.go: the route (each packet to loopback, the wire or nowhere, as
//     the device decided in Meta.Route, counted) and loopback (the packet
//     object itself handed back to the dispatcher, no encoding).
//   - wire.go, wire_unsafe.go: WireEndpoint, RoCEv2 over IPv4 through a raw
//     socket: its BPF filter, socket buffers, the UDP socket that reserves
//     port 4791, the receive goroutine that verifies every ICRC, the
//     interface MTU (InterfaceMTU) and rxe's UDP source ports (SourcePort,
//     FlowSourcePort).
//   - mcast.go: IP multicast for the device's multicast groups: the
//     sending sockets' multicast interface, and per joined IPv4 group a raw
//     socket bound to the group (IP_ADD_MEMBERSHIP on the wire's
//     interface) with a receive goroutine of its own (Chain.JoinGroup,
//     LeaveGroup; stopped by Close).
//   - gso.go: coalesced runs: a QP's packets handed to the kernel as one
//     UDP send with segmentation offload (UDP_SEGMENT) through the UDP
//     socket of its source port, and a run that lo delivers whole cut
//     back into its packets on receipt (runSizes, splitRun).
//
// The route itself is the device's: which GIDs are its own, and which go
// to which IPv4 address, is in Meta before the chain sees a packet, so
// that capture and faults know what the packet will be on the way out.
//
// # Goroutines and owners
//
// The chain owns no goroutine but three kinds: the wire's receive goroutine
// (started by NewChain once the dispatcher is attached, stopped by Close,
// which shuts the socket down to wake it), one receive goroutine per IPv4
// multicast group joined (mcast.go: it delivers as the main one does, one
// datagram at a time under the chain's lock, a datagram that fails the
// checks without it unless a capture is open, and ends when the group is
// left or the chain closes), and the timers of delayed
// packets (the device's clock; each takes the chain's lock, and sends the
// packet only if the fault settings it was delayed under are still in
// force and the chain is open). Everything else runs on the device's
// goroutines: the engine (or a goroutine running turns in its place: the
// receive goroutine, the device's doorbell), which writes packets; the
// verbs, which change fault settings or open captures.
//
// A delivery may write to the chain: the device runs the QP turns a
// batch of datagrams made runnable on the receive goroutine, inside
// DeliverDatagrams and in the same hold of the chain's lock, and those
// turns send (acknowledgements, READ responses, the requester's next
// packets), so the receive goroutine is one thread of control from
// recvmmsg to sendmmsg. The wire's send and receive vectors are separate
// (the send vector is the chain lock's; the receive vector, and the
// datagrams of a delivery, are the receive goroutine's), and loopback
// hands a packet back to the dispatcher within the write, so no state of
// the chain is entered twice at once.
//
// A Packet written to the chain is the chain's until it is handed back
// (DeliverLocal) or finished with Done, exactly once; a decorator that
// keeps one past the write calls Hold first. A Datagram is valid for its
// DeliverDatagrams call only: the wire reuses its buffers.
//
// # Locking
//
// The chain is entered by one goroutine at a time: every endpoint's state,
// and every call across the interfaces (WritePackets, DeliverLocal,
// DeliverDatagrams, the busy function a delivery returns, every Packet
// method), is under the chain's lock. The chain's own goroutines take it
// as Options.Lock (the device's mutex, all of it): the wire's receive
// goroutine once per batch of datagrams, after checking them (ICRC,
// parsing) without it, and a delayed packet's timer to send. The device
// writes with a hold that excludes those and its other writers: all of
// its mutex, or, with several engines, one engine's stripe of it and
// the device's chain lock (package device, Locking). So a write may run
// without Options.Lock held whole, never beside a delivery or another
// write. Close is called without it.
//
// Lock order: the chain's lock, then Capture's own (which guards the set
// of readers, and is all Open and CaptureReader.Close take). Nothing in
// the chain sleeps while it holds the chain's lock: the wire sends with
// MSG_DONTWAIT, and a sendmmsg that finds the socket buffer full is
// retried, yielding the processor, a bounded number of times
// (WireSendFull counts them).
//
// # Back-off
//
// A delivery that fills a receiver (the device: a QP's receive queue over
// half full) returns a busy function; the wire stops reading the socket
// until it reports false, or for at most BackOffMax, so a sender that
// outruns the engine waits in the socket buffer instead of losing packets
// at the QP's queue.
package link
