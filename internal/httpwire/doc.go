// Package httpwire reads and writes HTTP/1.0 and HTTP/1.1 messages byte-exactly, for the
// two ends of soapgw.
//
// Why not net/http: soapgw must be transparent. The SOAP server must receive the method,
// target, field names with their original casing (SOAPAction, not Soapaction), field
// values, field order and body the client sent; the client must receive the status code,
// reason phrase, fields and body the server answered. net/http canonicalizes names,
// stores fields in a map and rewrites reason phrases, so soapgw speaks HTTP/1.x itself
// with this leaf package (stdlib only):
//
//	client ──► edge:   ReadRequest ─► EndToEnd ─► tunnel ─► origin: AppendRequestHead ──► server
//	client ◄── edge:   AppendResponseHead ◄─ tunnel ◄─ EndToEnd ◄─ origin: ReadResponse ◄── server
//
// Bodies are decoded (de-chunked) on read and re-framed by the caller on write
// (Content-Length, or [NewChunkedWriter]), so the chunk boundaries of one side never
// reach the other: a framing disagreement between soapgw and a peer cannot smuggle.
//
// # Performance
//
// A head is read into a pooled buffer and copied once into a string; every Field is a
// substring of it. A parsed request costs three allocations (head string, field slice,
// request plus body reader), whatever the number of fields.
//
// # Parsing rules
//
// Strict where a lenient parser would let two implementations frame a message
// differently (request smuggling, response splitting); lenient where legacy SOAP stacks
// (Axis 1, .NET 1-4, gSOAP, HTTP/1.0 clients) need it.
//
//   - Lines end with CRLF or, in the head only, a bare LF (RFC 9112 §2.2). A CR anywhere
//     else in a line is rejected.
//   - Empty lines before the start line are skipped, in requests (RFC 9112 §2.2) and in
//     responses. A connection closed before any other byte yields plain io.EOF; closed
//     later in the head, an [ErrMalformed] error that wraps io.ErrUnexpectedEOF.
//   - Request line: exactly `method SP target SP HTTP/1.x`; method is a token; target is
//     non-empty without whitespace or control characters (bytes >= 0x80 are allowed).
//     Status line: `HTTP/1.x SP 3DIGIT SP reason`, or without `SP reason`; code 100-999;
//     the reason is kept byte-exact. HTTP-name is case-sensitive. A well-formed version
//     other than 1.0 or 1.1 is [ErrUnsupportedVersion]; a malformed one [ErrMalformed].
//   - Field names are tokens; whitespace between name and colon is rejected. Values are
//     trimmed of SP/HTAB and must not contain NUL, CR or LF (other control characters
//     pass). obs-fold (a line starting with SP or HTAB) is rejected in requests; in
//     responses it is replaced by a single SP (RFC 9112 §5.2).
//   - Content-Length is 1*DIGIT (no sign, no list syntax) below 2^62; several fields must
//     agree ([ErrBadContentLength]). More than one Host field in a request is rejected.
//   - Transfer-Encoding: rejected in HTTP/1.0 messages and together with Content-Length
//     ([ErrMalformed], requests and responses alike: RFC 9112 §6.1 says such framing
//     cannot be trusted); otherwise the codings must be exactly one "chunked"
//     (case-insensitive), else [ErrUnsupportedTransferCoding].
//   - Chunked bodies: CRLF is required (no bare LF: CVE-2025-22871); chunk-size is at
//     most 16 hex digits and below 2^62; extensions are ignored but must not contain
//     control characters; lines are at most 4 KiB; the overhead of extensions and tiny
//     chunks is bounded (as in net/http for CVE-2023-39326); trailer fields are checked
//     for syntax, bounded by [Limits] and discarded. EOF anywhere before the final CRLF
//     is [ErrBodyTruncated], which also matches io.ErrUnexpectedEOF.
//   - A request with neither Content-Length nor Transfer-Encoding has no body. A
//     response to HEAD, a 1xx, 204 or 304 (or a 2xx to CONNECT) has no body; any other
//     response without either is close-delimited.
//   - Persistence: HTTP/1.1 is persistent unless "Connection: close"; HTTP/1.0 only with
//     "Connection: keep-alive". A close-delimited response, a 101 and a 2xx to CONNECT
//     also end the connection.
//   - [Limits] bound the head size (bytes consumed, leading empty lines included) and the
//     number of field lines, and likewise the trailer section: [ErrHeaderTooLarge].
//
// Writing validates nothing: AppendRequestHead and AppendResponseHead write what they
// are given, which is safe for values from ReadRequest/ReadResponse or constants.
//
// Errors are *[ProtocolError] values classified by [ErrorKind]; each kind is itself a
// sentinel error for errors.Is. I/O errors of the underlying reader are wrapped, never
// disguised as protocol errors.
package httpwire
