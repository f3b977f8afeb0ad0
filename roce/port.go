package roce

// QPSourcePort is rxe's UDP source port for the packets of QP qpn:
// 0xC000 + hash_32(qpn, 14). rxe picks it when it creates the QP and sends
// every packet of the QP from it, requests and responses alike, and so does
// rdmafs; a reader of a capture tells which QP sent a packet by it (two
// QPNs share a port one time in 16384).
func QPSourcePort(qpn uint32) uint16 {
	return 0xC000 | uint16((qpn*0x61C88647)>>18)&0x3FFF
}
