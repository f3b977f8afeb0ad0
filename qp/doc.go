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
//   - gen_ctext.go and internal/ctext: libibverbs/rdmafs-text.h, the
//     words of these files the C library matches (the events file's name
//     of each event), generated from this package (go generate ./qp);
//     TestCTextFresh fails when the header drifts. (The C library still
//     spells out its modify masks and its opcode-by-QP-type rules itself:
//     issue 25.)
//
// Nothing here knows about FUSE, rings or the engine; the device applies
// these rules to its objects, and the files show what these formatters
// print.
package qp
