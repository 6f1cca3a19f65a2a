// Package config turns one soapgw YAML file into typed, defaulted and
// validated settings for the edge role, the origin role, or both.
//
// A gateway sits in the request path of services that were never designed
// for it, and the person editing its YAML is usually an operator, not the
// author of soapgw. So the package is built around one promise: every
// problem is reported with the file, the line and the field path that caused
// it, all at once, before anything listens on a socket:
//
//	soapgw.yaml:14: edge.peers[0].address: missing port in address "dc1"
//	soapgw.yaml:17: edge.peers[0].adress: unknown field (did you mean "address"?)
//
// Why the decoder is hand-written instead of yaml.Unmarshal:
//
//   - yaml.v3 reports type errors with a line but without the field path,
//     and its KnownFields strictness exists only on Decoder, not on
//     Node.Decode. This package parses into a yaml.Node tree (which keeps
//     line numbers) and walks it against the Go types itself, so unknown
//     keys, duplicate keys and type mismatches all name path and line.
//   - The walker records the line of every field it sees. [Config.Validate]
//     works on plain structs and reports field paths only; [Parse] maps
//     those paths back to lines, falling back to the enclosing mapping
//     when the offending field was left out (a missing field has no line).
//   - Defaults are filled in before a value is decoded over them, so an
//     explicit zero ("connections: 0") is seen and rejected rather than
//     silently replaced by the default.
//
// Environment expansion (${VAR}, ${VAR:-default}, $$ for a literal dollar)
// is applied to each scalar value of the parsed tree, not to the raw text:
// line numbers can never shift, and a variable's value can never inject
// YAML structure (a secret containing ": " or a newline stays one string).
// A plain (unquoted) scalar is re-typed after expansion, so
// "connections: ${CONNS:-4}" is an integer.
//
// The package is a leaf: it imports only the standard library and
// gopkg.in/yaml.v3. cmd/soapgw maps these structs onto the runtime
// configurations of internal/proxy and internal/tunnel.
package config
