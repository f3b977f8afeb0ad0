package qp

// DeviceAttr is ibv_device_attr as rdmafs reports it: the daemon fills it
// (device.Device.Attr) and the client library reads it back from the device
// file (verbs.Context.QueryDevice), one type so the two cannot drift.
type DeviceAttr struct {
	FwVer          string
	NodeGUID       uint64
	SysImageGUID   uint64
	MaxMRSize      uint64
	PageSizeCap    uint64
	VendorID       uint32
	VendorPartID   uint32
	HwVer          uint32
	MaxQP          uint32
	MaxQPWR        uint32
	DeviceCapFlags uint32
	// DeviceCapFlagsEx is ibv_device_attr_ex's device_cap_flags_ex: the
	// flags above and the kernel's IB_UVERBS_DEVICE_* bits past 31.
	DeviceCapFlagsEx uint64
	MaxSGE           uint32
	MaxSGERd         uint32
	MaxCQ            uint32
	MaxCQE           uint32
	MaxMR            uint32
	MaxPD            uint32
	MaxQPRdAtom      uint32
	MaxResRdAtom     uint32
	MaxQPInitRdAtom  uint32
	AtomicCap        string
	MaxMW            uint32
	MaxAH            uint32
	MaxSRQ           uint32
	MaxSRQWR         uint32
	MaxSRQSGE        uint32
	MaxPKeys         uint32
	LocalCAAckDelay  uint32
	PhysPortCnt      uint32
	MaxInlineData    uint32
	MaxTotalMRBytes  uint64
	// ReservedOps: send WQEs each QP keeps for the device (rdmavt's
	// reserved_operations), beyond max_send_wr.
	ReservedOps uint32
	// HCACoreClock is the rate of the device clock that completion
	// timestamps read, in kHz (ibv_device_attr_ex.hca_core_clock), and
	// CompletionTimestampMask the bits a timestamp has (all 64: the
	// clock does not wrap in practice).
	HCACoreClock            uint64
	CompletionTimestampMask uint64
	// The multicast limits (ibv_device_attr's max_mcast_grp,
	// max_mcast_qp_attach, max_total_mcast_qp_attach).
	MaxMcastGrp           uint32
	MaxMcastQPAttach      uint32
	MaxTotalMcastQPAttach uint32
}
