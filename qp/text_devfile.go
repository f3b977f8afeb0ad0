package qp

import "strconv"

// The files at the top of a mount that describe the device: MOUNT/device
// (ibv_query_device and the daemon's limits), MOUNT/port
// (ibv_query_port) and MOUNT/clock (ibv_query_rt_values_ex). One
// key=value a line, like the objects' attr files (text_objattr.go).

// DeviceFile is MOUNT/device: the device's attributes and then the
// daemon's own limits, which ibv_device_attr has no field for.
type DeviceFile struct {
	Attr DeviceAttr
	// Engines is how many engines run the device's QPs (device.Config).
	Engines uint32
	// UserShare is the percent of each limit a user other than root may
	// take; PerUser are those shares.
	UserShare uint32
	PerUser   UserLimits
}

// UserLimits is what one user other than root may hold (root: the
// device's limits).
type UserLimits struct {
	QP, CQ, MR, PD, MW, AH, SRQ uint32
	TotalMRBytes                uint64
	McastGrp                    uint64
	TotalMcastQPAttach          uint64
	// EventReaders and Captures are the opens of MOUNT/events and
	// MOUNT/capture one user may hold (EMFILE beyond).
	EventReaders uint32
	Captures     uint32
}

// PortAttr is MOUNT/port: ibv_port_attr of the device's one port.
type PortAttr struct {
	PortNum    uint8
	State      string // "ACTIVE"
	MaxMTU     MTU
	ActiveMTU  MTU
	GID        [16]byte // GID index 0
	LID        uint16
	LinkLayer  string
	GIDTblLen  uint32
	PKeyTblLen uint32
	MaxMsgSz   uint32
}

// ClockFile is MOUNT/clock: the device clock (ticks at
// DeviceAttr.HCACoreClock kHz) and the wall clock (ns since the Unix
// epoch), read at one instant.
type ClockFile struct {
	RawClock    uint64
	WallclockNS uint64
}

// fieldHex is a number printed as 0x and 16 hex digits (GUIDs, masks).
func fieldHex(key string, p *uint64) textField {
	return textField{key, func() string {
		s := strconv.FormatUint(*p, 16)
		for len(s) < 16 {
			s = "0" + s
		}
		return "0x" + s
	}, textInto(key, p, textFull[uint64])}
}

// fieldText is the rest of the line (a firmware version has a space).
func fieldText(key string, p *string) textField {
	return textField{key, func() string { return *p }, func(v string) error { *p = v; return nil }}
}

// fieldMTU prints an MTU in bytes and reads bytes or the enum.
func fieldMTU(key string, p *MTU) textField {
	return textField{key, func() string { return strconv.Itoa(p.Bytes()) }, textInto(key, p, textMTU)}
}

func (f *DeviceFile) fields() []textField {
	a, u := &f.Attr, &f.PerUser
	return []textField{
		fieldText(KeyFwVer, &a.FwVer), fieldHex(KeyNodeGUID, &a.NodeGUID), fieldHex(KeySysImageGUID, &a.SysImageGUID),
		fieldU(KeyMaxMRSize, &a.MaxMRSize), fieldU(KeyPageSizeCap, &a.PageSizeCap),
		fieldU(KeyVendorID, &a.VendorID), fieldU(KeyVendorPartID, &a.VendorPartID), fieldU(KeyHwVer, &a.HwVer),
		fieldU(KeyMaxQP, &a.MaxQP), fieldU(KeyMaxQPWR, &a.MaxQPWR), fieldU(KeyDeviceCapFlags, &a.DeviceCapFlags),
		fieldU(KeyDeviceCapFlagsEx, &a.DeviceCapFlagsEx), fieldU(KeyMaxSGE, &a.MaxSGE),
		fieldU(KeyMaxSGERd, &a.MaxSGERd), fieldU(KeyMaxCQ, &a.MaxCQ), fieldU(KeyMaxCQE, &a.MaxCQE),
		fieldU(KeyMaxMR, &a.MaxMR), fieldU(KeyMaxPD, &a.MaxPD), fieldU(KeyMaxQPRdAtom, &a.MaxQPRdAtom),
		fieldU(KeyMaxResRdAtom, &a.MaxResRdAtom), fieldU(KeyMaxQPInitRdAtom, &a.MaxQPInitRdAtom),
		fieldWord(KeyAtomicCap, &a.AtomicCap), fieldU(KeyMaxMW, &a.MaxMW), fieldU(KeyMaxAH, &a.MaxAH),
		fieldU(KeyMaxSRQ, &a.MaxSRQ), fieldU(KeyMaxSRQWR, &a.MaxSRQWR), fieldU(KeyMaxSRQSGE, &a.MaxSRQSGE),
		fieldU(KeyMaxPkeys, &a.MaxPKeys), fieldU(KeyLocalCAAckDelay, &a.LocalCAAckDelay),
		fieldU(KeyPhysPortCnt, &a.PhysPortCnt), fieldU(KeyMaxInlineData, &a.MaxInlineData),
		fieldU(KeyReservedOperations, &a.ReservedOps), fieldU(KeyMaxMcastGrp, &a.MaxMcastGrp),
		fieldU(KeyMaxMcastQPAttach, &a.MaxMcastQPAttach),
		fieldU(KeyMaxTotalMcastQPAttach, &a.MaxTotalMcastQPAttach), fieldU(KeyEngines, &f.Engines),
		fieldU(KeyMaxTotalMRBytes, &a.MaxTotalMRBytes), fieldU(KeyHCACoreClock, &a.HCACoreClock),
		fieldHex(KeyCompletionTimestampMask, &a.CompletionTimestampMask),
		fieldU(KeyUserShare, &f.UserShare), fieldU(KeyMaxQPPerUser, &u.QP), fieldU(KeyMaxCQPerUser, &u.CQ),
		fieldU(KeyMaxMRPerUser, &u.MR), fieldU(KeyMaxPDPerUser, &u.PD), fieldU(KeyMaxMWPerUser, &u.MW),
		fieldU(KeyMaxAHPerUser, &u.AH), fieldU(KeyMaxSRQPerUser, &u.SRQ),
		fieldU(KeyMaxTotalMRBytesPerUser, &u.TotalMRBytes), fieldU(KeyMaxMcastGrpPerUser, &u.McastGrp),
		fieldU(KeyMaxTotalMcastQPAttachPerUser, &u.TotalMcastQPAttach),
		fieldU(KeyMaxEventReadersPerUser, &u.EventReaders), fieldU(KeyMaxCapturesPerUser, &u.Captures),
	}
}

func (a *PortAttr) fields() []textField {
	return []textField{fieldU(KeyPortNum, &a.PortNum), fieldWord(KeyState, &a.State), fieldMTU(KeyMaxMTU, &a.MaxMTU),
		fieldMTU(KeyActiveMTU, &a.ActiveMTU), fieldGID(KeyGID, &a.GID), fieldU(KeyLID, &a.LID),
		fieldWord(KeyLinkLayer, &a.LinkLayer), fieldU(KeyGIDTblLen, &a.GIDTblLen),
		fieldU(KeyPKeyTblLen, &a.PKeyTblLen), fieldU(KeyMaxMsgSz, &a.MaxMsgSz)}
}

func (c *ClockFile) fields() []textField {
	return []textField{fieldU(KeyRawClock, &c.RawClock), fieldU(KeyWallclockNS, &c.WallclockNS)}
}

// FormatDeviceFile prints MOUNT/device.
func FormatDeviceFile(f *DeviceFile) string { return formatAttr(f) }

// ParseDeviceFile reads what FormatDeviceFile prints.
func ParseDeviceFile(s string) (DeviceFile, error) { return parseAttr[DeviceFile](s) }

// FormatPortAttr prints MOUNT/port.
func FormatPortAttr(a *PortAttr) string { return formatAttr(a) }

// ParsePortAttr reads what FormatPortAttr prints.
func ParsePortAttr(s string) (PortAttr, error) { return parseAttr[PortAttr](s) }

// FormatClockFile prints MOUNT/clock.
func FormatClockFile(c *ClockFile) string { return formatAttr(c) }

// ParseClockFile reads what FormatClockFile prints.
func ParseClockFile(s string) (ClockFile, error) { return parseAttr[ClockFile](s) }
