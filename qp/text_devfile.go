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
		fieldText("fw_ver", &a.FwVer), fieldHex("node_guid", &a.NodeGUID), fieldHex("sys_image_guid", &a.SysImageGUID),
		fieldU("max_mr_size", &a.MaxMRSize), fieldU("page_size_cap", &a.PageSizeCap),
		fieldU("vendor_id", &a.VendorID), fieldU("vendor_part_id", &a.VendorPartID), fieldU("hw_ver", &a.HwVer),
		fieldU("max_qp", &a.MaxQP), fieldU("max_qp_wr", &a.MaxQPWR), fieldU("device_cap_flags", &a.DeviceCapFlags),
		fieldU("device_cap_flags_ex", &a.DeviceCapFlagsEx), fieldU("max_sge", &a.MaxSGE),
		fieldU("max_sge_rd", &a.MaxSGERd), fieldU("max_cq", &a.MaxCQ), fieldU("max_cqe", &a.MaxCQE),
		fieldU("max_mr", &a.MaxMR), fieldU("max_pd", &a.MaxPD), fieldU("max_qp_rd_atom", &a.MaxQPRdAtom),
		fieldU("max_res_rd_atom", &a.MaxResRdAtom), fieldU("max_qp_init_rd_atom", &a.MaxQPInitRdAtom),
		fieldWord("atomic_cap", &a.AtomicCap), fieldU("max_mw", &a.MaxMW), fieldU("max_ah", &a.MaxAH),
		fieldU("max_srq", &a.MaxSRQ), fieldU("max_srq_wr", &a.MaxSRQWR), fieldU("max_srq_sge", &a.MaxSRQSGE),
		fieldU("max_pkeys", &a.MaxPKeys), fieldU("local_ca_ack_delay", &a.LocalCAAckDelay),
		fieldU("phys_port_cnt", &a.PhysPortCnt), fieldU("max_inline_data", &a.MaxInlineData),
		fieldU("reserved_operations", &a.ReservedOps), fieldU("max_mcast_grp", &a.MaxMcastGrp),
		fieldU("max_mcast_qp_attach", &a.MaxMcastQPAttach),
		fieldU("max_total_mcast_qp_attach", &a.MaxTotalMcastQPAttach), fieldU("engines", &f.Engines),
		fieldU("max_total_mr_bytes", &a.MaxTotalMRBytes), fieldU("hca_core_clock", &a.HCACoreClock),
		fieldHex("completion_timestamp_mask", &a.CompletionTimestampMask),
		fieldU("user_share", &f.UserShare), fieldU("max_qp_per_user", &u.QP), fieldU("max_cq_per_user", &u.CQ),
		fieldU("max_mr_per_user", &u.MR), fieldU("max_pd_per_user", &u.PD), fieldU("max_mw_per_user", &u.MW),
		fieldU("max_ah_per_user", &u.AH), fieldU("max_srq_per_user", &u.SRQ),
		fieldU("max_total_mr_bytes_per_user", &u.TotalMRBytes), fieldU("max_mcast_grp_per_user", &u.McastGrp),
		fieldU("max_total_mcast_qp_attach_per_user", &u.TotalMcastQPAttach),
		fieldU("max_event_readers_per_user", &u.EventReaders), fieldU("max_captures_per_user", &u.Captures),
	}
}

func (a *PortAttr) fields() []textField {
	return []textField{fieldU("port_num", &a.PortNum), fieldWord("state", &a.State), fieldMTU("max_mtu", &a.MaxMTU),
		fieldMTU("active_mtu", &a.ActiveMTU), fieldGID("gid", &a.GID), fieldU("lid", &a.LID),
		fieldWord("link_layer", &a.LinkLayer), fieldU("gid_tbl_len", &a.GIDTblLen),
		fieldU("pkey_tbl_len", &a.PKeyTblLen), fieldU("max_msg_sz", &a.MaxMsgSz)}
}

func (c *ClockFile) fields() []textField {
	return []textField{fieldU("raw_clock", &c.RawClock), fieldU("wallclock_ns", &c.WallclockNS)}
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
