// Package qp is the vocabulary of the verbs as rdmafs speaks them: pure
// data and pure functions, no state, no locks, no system calls. The daemon
// (device/, fsnode/), the Go library (verbs/) and the generator of the C
// libraries' tables all take their words from here, so a rule is written
// once.
//
// The pieces:
//
//   - types.go, opcode.go, event.go, errors.go, device.go: the enums and
//     records of libibverbs with its numbering (QP states and types,
//     access and send flags, WR and WC opcodes, completion statuses, async
//     events, ibv_device_attr), and OpInfo, what each send opcode does on
//     which QP type.
//   - transition.go, mask.go, check.go: the modify-QP rules as one table
//     (which attributes a (current, next) state pair requires and allows),
//     the attribute mask, and the checks of a modify against a device's
//     limits.
//   - post.go, psn.go, timing.go: what a work request may describe at post
//     time, 24-bit PSN arithmetic, the RNR and retry timer encodings.
//   - text*.go: the text grammar of the tree's files (DESIGN.md §3), both
//     directions: every create line (`*/new`), modify command, attribute
//     file, work request and completion line has a parser and a formatter
//     here, and Parse(Format(x)) is x (the tests check it; the fuzz targets
//     feed the parsers arbitrary bytes).
//   - text_attrfile.go, text_objattr.go, text_devfile.go: the attr file
//     of every object (AttrFile for a QP: its attributes and its
//     identity; PDAttr, MRAttr, MWAttr, CQAttr, SRQAttr, AHAttr) and the
//     mount's device, port and clock files, printed by the daemon and
//     read by the verbs library and rdmafs show and trace.
//   - gen_ctext.go and internal/ctext: libibverbs/rdmafs-text.h,
//     generated from this package (go generate ./qp): the words of these
//     files the C library writes and matches (event, state, type,
//     migration and access names, every attr and modify key) and the
//     rules it applies before the daemon does (the attribute-mask bits a
//     modify may set, the QP types each send opcode may be posted on);
//     TestCTextFresh fails when the header drifts.
//
// Nothing here knows about FUSE, rings or the engine; the device applies
// these rules to its objects, and the files show what these formatters
// print.
package qp
