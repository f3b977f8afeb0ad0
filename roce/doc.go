// Package roce is the RoCEv2 wire format: the InfiniBand transport headers
// (BTH and the extension headers, VERBS.md §8.2–8.4) carried in UDP on port
// 4791, the invariant CRC (ICRC, §8.5), IPv4-mapped GIDs (§8.6), and a
// classic pcap reader and writer for captures.
//
// It is a leaf package: it imports only the standard library, knows nothing
// about QPs, memory or the engine, and never panics on received bytes.
// Everything here is written from the IBA layout as summarised in VERBS.md
// and checked against captures of Linux Soft-RoCE (testdata/).
//
// # Layers
//
// A RoCEv2 datagram is
//
//	IPv4 (20) | UDP (8, dport 4791, checksum 0) | BTH (12) | ext. headers |
//	payload | pad (0–3) | ICRC (4)
//
// The "IB part" in this package's names is BTH through pad, without the
// ICRC: [Packet.AppendIB] builds it and [ParseIB] decodes it. [ICRC] and
// [ICRC6] compute the trailer over the masked IP and UDP headers and the IB
// part; [BuildIPv4] wraps an IB part into a complete datagram and
// [CheckIPv4] verifies one.
//
// # Normalisation
//
// ParseIB ignores reserved bits (BTH resv6a and resv7, the DETH reserved
// byte, FETH bits 31:6) and the contents of the pad bytes, as a receiver
// should. Marshalling writes them as zero. So a parsed packet re-marshals to
// the identical bytes whenever the sender zeroed them, which every capture in
// testdata/ does.
package roce
