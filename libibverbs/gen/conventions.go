package main

import (
	"fmt"
	"strings"
)

// A stub fails the way libibverbs 44.0 fails that call when the provider
// lacks the operation. The return type, from the prototype, picks the
// usual convention; the exceptions are named, each with the source that
// shows it (rdma-core v44.0, libibverbs/).
//
//	void                  nothing
//	pointer               errno = EOPNOTSUPP, NULL        (dummy_ops.c: alloc_pd, reg_mr, ...)
//	int                   errno = EOPNOTSUPP, EOPNOTSUPP  (dummy_ops.c: the int ops return the errno
//	                                                       as a positive value; verbs.c passes it on)
//	anything else         must be named in rules below
type rule struct {
	ret   string // C expression returned; "" for void
	errno bool   // set errno first, to err
	err   string // the errno constant; "" is EOPNOTSUPP
	why   string
}

// errnoName is the constant the stub sets errno to.
func (r rule) errnoName() string {
	if r.err == "" {
		return "EOPNOTSUPP"
	}
	return r.err
}

var (
	ruleVoid    = rule{why: "no-op"}
	rulePointer = rule{ret: "NULL", errno: true, why: "NULL, errno EOPNOTSUPP"}
	ruleErrno   = rule{ret: "EOPNOTSUPP", errno: true, why: "returns EOPNOTSUPP (a positive errno) and sets errno"}
	ruleMinus1  = rule{ret: "-1", errno: true, why: "returns -1, errno EOPNOTSUPP"}
	ruleNegErr  = rule{ret: "-EOPNOTSUPP", errno: true, why: "returns -EOPNOTSUPP, errno EOPNOTSUPP"}
)

// rules are the functions whose failure is not what their return type
// suggests, and those whose return value is not an error at all.
var rules = map[string]rule{
	// -1 with errno.
	"ibv_query_gid":             ruleMinus1, // verbs.c: "if (ret) return -1"
	"ibv_query_pkey":            ruleMinus1, // verbs.c: a sysfs read < 0 is -1
	"ibv_get_pkey_index":        ruleMinus1, // verbs.c: passes ibv_query_pkey's -1 on
	"ibv_get_cq_event":          ruleMinus1, // verbs.c: a failed read of the channel fd
	"ibv_get_async_event":       ruleMinus1, // device.c: a failed read of the async fd
	"ibv_get_device_index":      ruleMinus1, // device.c: -1 without a sysfs device
	"ibv_read_sysfs_file":       ruleMinus1, // sysfs.c: like read(2)
	"ibv_read_ibdev_sysfs_file": ruleMinus1, // sysfs.c
	"ibv_query_gid_type":        ruleMinus1, // verbs.c
	"ibv_init_ah_from_wc":       ruleMinus1, // verbs.c: errno EINVAL/EPROTONOSUPPORT, -1
	"ibv_cmd_poll_cq":           ruleMinus1, // cmd.c: -1, not an errno, since its success is a count

	// A negative errno.
	"ibv_resolve_eth_l2_from_gid": ruleNegErr, // verbs.c: -EINVAL, -EHOSTUNREACH
	"_ibv_query_gid_table":        ruleNegErr, // cmd_device.c: ssize_t, -EOPNOTSUPP

	// ibv_rereg_mr's own codes: dummy_ops.c's rereg_mr fails with
	// IBV_REREG_MR_ERR_INPUT and errno EOPNOTSUPP.
	"ibv_rereg_mr": {ret: "IBV_REREG_MR_ERR_INPUT", errno: true, why: "IBV_REREG_MR_ERR_INPUT, errno EOPNOTSUPP"},

	// Values, not failures: what the call means when nothing is there.
	"ibv_get_device_guid":        {ret: "0", errno: true, why: "GUID 0 (no error channel), errno EOPNOTSUPP"},
	"ibv_query_qp_data_in_order": {ret: "0", why: "0: no ordering guarantee (verbs.c answers 0 without the op)"},
	"ibv_is_fork_initialized":    {ret: "IBV_FORK_DISABLED", why: "IBV_FORK_DISABLED"},
	"ibv_rate_to_mult":           {ret: "-1", why: "-1, as for an unknown rate"},
	"ibv_rate_to_mbps":           {ret: "-1", why: "-1, as for an unknown rate"},
	"mult_to_ibv_rate":           {ret: "IBV_RATE_MAX", why: "IBV_RATE_MAX, as for an unknown multiplier"},
	"mbps_to_ibv_rate":           {ret: "IBV_RATE_MAX", why: "IBV_RATE_MAX, as for an unknown rate"},
	// cmd_ioctl.h's DECLARE_COMMAND_BUFFER sizes a stack array with it:
	// the count of the command's own attributes is never too small for
	// them (0 would be), and the chained buffer is only read by
	// execute_ioctl, which fails.
	"__ioctl_final_num_attrs": {ret: "p0", why: "its first argument (the command's own attribute count)"},
}

// Rule is the convention of name's libibverbs stub, from rules or from p's
// return type.
func Rule(name string, p Proto) (rule, error) {
	if r, ok := rules[name]; ok {
		return r, nil
	}
	switch t := p.Ret; {
	case t == "void":
		return ruleVoid, nil
	case strings.HasSuffix(t, "*"):
		return rulePointer, nil
	case t == "int":
		return ruleErrno, nil
	default:
		return rule{}, fmt.Errorf("%s returns %s: no stub convention for that type; name one in rules (libibverbs/gen/conventions.go)", name, t)
	}
}

// uninstalled holds the prototypes of the exports whose declarations are
// in rdma-core headers that libibverbs-dev does not install (driver.h,
// marshall.h, cmd_ioctl.h, written out here by hand). Pointers to
// structures private to rdma-core are spelled void *.
//
// The provider interface (IBVERBS_PRIVATE_34) is called only by providers
// (libmlx5, libefa, ...) that perftest and pyverbs load: their
// constructors call verbs_register_driver_34, which does nothing here, so
// no device is ever theirs and none of the rest is reached through them.
// The ibv_cmd_* stubs therefore take no parameters: they read none, and
// under the SysV ABIs a caller's extra arguments are harmless.
var uninstalled = map[string]string{
	// marshall.h: librdmacm converts kernel structures with these.
	"ibv_copy_qp_attr_from_kern":  "void (struct ibv_qp_attr *, void *)",
	"ibv_copy_ah_attr_from_kern":  "void (struct ibv_ah_attr *, void *)",
	"ibv_copy_path_rec_from_kern": "void (void *, void *)",
	"ibv_copy_path_rec_to_kern":   "void (void *, void *)",
	// driver.h, public symbols.
	"ibv_dontfork_range":  "int (void *, size_t)",
	"ibv_dofork_range":    "int (void *, size_t)",
	"ibv_get_sysfs_path":  "const char *(void)",
	"ibv_read_sysfs_file": "int (const char *, const char *, char *, size_t)",
	"ibv_register_driver": "void (const char *, void *)",
	// driver.h and cmd_ioctl.h, the provider interface.
	"verbs_register_driver_34":      "void (const void *)",
	"_verbs_init_and_alloc_context": "void *(struct ibv_device *, int, size_t, void *, uint32_t)",
	"verbs_open_device":             "struct ibv_context *(struct ibv_device *, void *)",
	"verbs_uninit_context":          "void (void *)",
	"verbs_set_ops":                 "void (void *, const void *)",
	"verbs_init_cq":                 "void (struct ibv_cq *, struct ibv_context *, struct ibv_comp_channel *, void *)",
	"__verbs_log":                   "void (void *, uint32_t, const char *, ...)",
	"execute_ioctl":                 "int (struct ibv_context *, void *)",
	"__ioctl_final_num_attrs":       "unsigned int (unsigned int, void *)",
	"ibv_query_gid_type":            "int (struct ibv_context *, uint8_t, unsigned int, void *)",
	"ibv_read_ibdev_sysfs_file":     "int (char *, size_t, void *, const char *, ...)",
}

// uninstalledProto is name's prototype from uninstalled; every ibv_cmd_*
// is int (void) (see uninstalled).
func uninstalledProto(name string) (Proto, bool, error) {
	if s, ok := uninstalled[name]; ok {
		p, err := ParseProto(s)
		p.From = "libibverbs/gen/conventions.go"
		return p, true, err
	}
	if strings.HasPrefix(name, "ibv_cmd_") {
		return Proto{Ret: "int", Params: []string{"void"}, From: "libibverbs/gen/conventions.go (ibv_cmd_*)"}, true, nil
	}
	return Proto{}, false, nil
}

// dataObjects are the exported variables, with their C types.
var dataObjects = map[string]struct {
	ctype string
	size  uint64
}{
	// driver.h: a provider may set it to let destroy succeed after a
	// device was disassociated. Nothing reads it here.
	"verbs_allow_disassociate_destroy": {"bool", 1},
}
