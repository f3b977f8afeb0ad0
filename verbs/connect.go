package verbs

import "rdmafs/qp"

// ConnectAttr says where Connect takes a QP. Zero fields take defaults.
type ConnectAttr struct {
	DestQPN uint32   // RC, UC: the remote QP
	DGID    [16]byte // RC, UC: the remote port's GID
	RQPSN   PSN      // the remote QP's starting send PSN
	SQPSN   PSN      // this QP's starting send PSN
	PathMTU MTU      // RC, UC; default MTU1024
	Access  Access   // RC, UC qp_access_flags; default local write and every remote right
	QKey    uint32   // UD
	// RC: READ/atomic depth both ways; default 16.
	MaxRdAtomic uint8
	// RC: timeout, retry_cnt, rnr_retry, min_rnr_timer; defaults 14, 7, 7
	// (infinite) and 12, as ibv_rc_pingpong sets them. XRC takes each
	// where the IBA's table has it: the XRC_SEND QP the requester's
	// (timeout, retry_cnt, rnr_retry, max_rd_atomic), the XRC_RECV QP
	// the responder's (max_dest_rd_atomic, min_rnr_timer) and timeout.
	Timeout, RetryCnt, RNRRetry, MinRNRTimer uint8
}

// Connect walks a QP in RESET through INIT and RTR to RTS with the
// attributes each transition needs, as ibv_rc_pingpong's connect does:
// three Modify calls, usable for RC, UC and UD.
func (q *QP) Connect(c ConnectAttr) error {
	if c.PathMTU == 0 {
		c.PathMTU = MTU1024
	}
	if c.Access == 0 {
		c.Access = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	}
	if c.MaxRdAtomic == 0 {
		c.MaxRdAtomic = 16
	}
	if c.Timeout == 0 {
		c.Timeout = 14
	}
	if c.RetryCnt == 0 {
		c.RetryCnt = 7
	}
	if c.RNRRetry == 0 {
		c.RNRRetry = 7
	}
	if c.MinRNRTimer == 0 {
		c.MinRNRTimer = 12
	}
	a := QPAttr{QPState: StateInit, PKeyIndex: 0, PortNum: 1}
	mask := qp.MaskState | qp.MaskPKeyIndex | qp.MaskPort
	if q.Type == QPTypeUD {
		a.QKey, mask = c.QKey, mask|qp.MaskQKey
	} else {
		a.QPAccessFlags, mask = c.Access, mask|qp.MaskAccessFlags
	}
	if err := q.Modify(&a, mask); err != nil {
		return err
	}
	a = QPAttr{QPState: StateRTR}
	mask = qp.MaskState
	if q.Type != QPTypeUD {
		a.PathMTU, a.DestQPNum, a.RQPSN = c.PathMTU, c.DestQPN, c.RQPSN
		a.AH.DGID = c.DGID
		mask |= qp.MaskPathMTU | qp.MaskDestQPN | qp.MaskRQPSN | qp.MaskAV
		if q.Type == QPTypeRC || q.Type == QPTypeXRCRecv {
			a.MaxDestRdAtomic, a.MinRNRTimer = c.MaxRdAtomic, c.MinRNRTimer
			mask |= qp.MaskMaxDestRdAtomic | qp.MaskMinRNRTimer
		}
	}
	if err := q.Modify(&a, mask); err != nil {
		return err
	}
	a = QPAttr{QPState: StateRTS, SQPSN: c.SQPSN}
	mask = qp.MaskState | qp.MaskSQPSN
	switch q.Type {
	case QPTypeRC, QPTypeXRCSend:
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = c.Timeout, c.RetryCnt, c.RNRRetry, c.MaxRdAtomic
		mask |= qp.MaskTimeout | qp.MaskRetryCnt | qp.MaskRNRRetry | qp.MaskMaxQPRdAtomic
	case QPTypeXRCRecv:
		a.Timeout, mask = c.Timeout, mask|qp.MaskTimeout
	}
	return q.Modify(&a, mask)
}
