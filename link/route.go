package link

// route sends each packet the way the device chose (Meta.Route): loopback,
// the wire, or nowhere. It counts every packet the device sends, as the
// device's packets_sent and bytes_sent always have: after the fault
// injector, so a dropped packet is not counted and a duplicate twice.
type route struct {
	loop, wire Endpoint // wire nil: no address
	c          *Counters
	// Scratch slices for the runs of one destination; under the chain's
	// lock.
	local, remote []Packet
}

// NewRoute returns the route over loop and wire (nil for a device without
// an address, whose Wire packets then have no route).
func NewRoute(loop, wire Endpoint, c *Counters) Endpoint {
	return &route{loop: loop, wire: wire, c: c}
}

// WritePackets implements Endpoint.WritePackets. Packets keep their order
// within each destination, which is all an order between two different
// links could mean.
func (r *route) WritePackets(pkts []Packet) {
	local, remote := r.local[:0], r.remote[:0]
	for _, p := range pkts {
		m := p.Meta()
		r.c.PacketsSent.Add(1)
		r.c.BytesSent.Add(uint64(m.PayloadLen))
		switch {
		case m.Route == Local:
			local = append(local, p)
		case m.Route == Wire && r.wire != nil:
			remote = append(remote, p)
		default:
			r.c.NoRoute.Add(1)
			p.Done(false)
		}
	}
	// The slices are taken from r while they are in use: loopback's
	// delivery may make the device write again (it does not today, but a
	// responder that answered at once would), and that write must not
	// clobber this one's lists.
	r.local, r.remote = nil, nil
	if len(remote) > 0 {
		r.wire.WritePackets(remote)
	}
	if len(local) > 0 {
		r.loop.WritePackets(local)
	}
	clear(local)
	clear(remote)
	r.local, r.remote = local[:0], remote[:0]
}

// Attach implements Endpoint.Attach.
func (r *route) Attach(d Dispatcher) {
	r.loop.Attach(d)
	if r.wire != nil {
		r.wire.Attach(d)
	}
}

// Close implements Endpoint.Close.
func (r *route) Close() {
	r.loop.Close()
	if r.wire != nil {
		r.wire.Close()
	}
}

// loopback hands every packet written to it back to the device, the same
// packet object and without encoding: what gVisor's loopback does with a
// fresh buffer, here with none, because sender and receiver are one
// device.
type loopback struct{ d Dispatcher }

// NewLoopback returns a loopback endpoint.
func NewLoopback() Endpoint { return &loopback{} }

// WritePackets implements Endpoint.WritePackets.
func (l *loopback) WritePackets(pkts []Packet) {
	for _, p := range pkts {
		l.d.DeliverLocal(p)
	}
}

// Attach implements Endpoint.Attach.
func (l *loopback) Attach(d Dispatcher) { l.d = d }

// Close implements Endpoint.Close.
func (l *loopback) Close() {}
