// Package frame is soapgw's tunnel wire format and nothing else: the 9-byte frame header,
// frame types and flags, the per-message preamble and trailer, and the payloads of the
// control frames. It does no I/O: encoders append to a caller's buffer and parsers take
// bytes and return the value and the rest, so the format can be fuzzed and tested in
// isolation and reused by every transport (TCP now, the reliable UDP conn later).
//
// The format is specified in SPEC.md next to this file.
package frame
