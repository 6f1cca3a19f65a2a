// Package xmltok is soapgw's synchronized token-cache codec for SOAP/XML
// message bodies: one Encoder and one Decoder per connection direction,
// fed the same messages in the same order, keep identical models and
// send each message as what the model could not predict. It is modelled
// on HPACK (RFC 7541; golang.org/x/net/http2/hpack): a static table, a
// dynamic dictionary with stable ids and FIFO eviction by a byte budget,
// "never indexed" secrets, and hard limits that return sentinel errors.
//
// # Correctness does not depend on parsing
//
// The encoder segments a message into markup tokens and values whose
// concatenation is exactly the message. The scanner (scan.go) decides
// only where the cuts go and what kind each piece is (markup; attribute
// value in " or '; text; CDATA content; a word or a number of a long
// text). Every byte sequence is accepted: binary, truncated or malformed
// XML just segments oddly. The decoder never parses: it appends decoded
// tokens. Numbers and times are sent as deltas only after the encoder
// has rebuilt the text from the delta and compared it with the message,
// so leading zeros, widths, fraction digits, 'T'/'Z' and zones are
// always reproduced. Round trips are byte-exact for any input.
//
// # Wire format
//
// FORMAT.md is the specification of the payload, with golden payloads in
// testdata/golden (TestGoldenPayloads). In short: a payload is one
// message. Its first byte is the mode: coded (a range-coded stream);
// stored (the message verbatim, when the coded form would be longer than
// the message plus one byte, so a payload is never more than len(msg)+1
// bytes; MaxExpansion is 8 to leave room for future modes); or coded with
// a raw section ahead of the stream (secrets and blob bytes, which are
// not range coded). A stored message updates the model too: the decoder
// replays the encoder's model update on the stored bytes (Decoder.Decode
// runs the encoding with a discarding coder), so both ends stay in step
// and Digest agrees.
//
// The range coder is LZMA's (rc.go): 32-bit range, 12-bit adaptive
// probabilities (shift 4), carry propagation through a cache byte, with
// 16-bit probabilities for the match model's near-certain decisions. A
// message is coded as its length, then its markup tokens and values in
// order, each first as what the models predict (the match history; for
// markup, a successor of the previous token; for a value, an associated
// value, the context's last value or step, a delta from a related number
// or time, a recent value) and only then as a dictionary reference or a
// literal spelled with static-table pieces. A message whose every symbol
// was predicted costs one to three bytes.
//
// Entries learned from literals (markup tokens up to 1024 bytes, values
// up to 256 bytes, never uuids or secrets) enter the dynamic dictionary
// with the next id; ids start after the static table, are never reused,
// and an entry costs len+32 bytes of the DictBytes budget. Inserting
// evicts the oldest entries first until the new one fits, identically on
// both ends; an entry larger than the budget is not inserted. A
// reference to an evicted id, past the newest id, or to an entry of the
// wrong kind is an ErrCorrupt naming the fault.
//
// # Match model
//
// Both ends append every markup token (its entry id) and every value of
// 256 bytes or less (its context and bytes; a longer one as a mark) that
// was not a secret or a blob, tokens inside prose excepted, to one
// history shared by all messages of the direction: a
// ring of DictBytes/16 records of 16 bytes and a ring arena of DictBytes
// value bytes (each rounded down to a power of two), grown on demand and
// overwritten oldest first. A pointer
// names the record that would come next if the message repeated what
// followed last time. Each token first codes bitH: a 16-bit probability
// adapting by 1/32, so a confirmed prediction costs under 1/1000 bit,
// with a prior that depends on how long the pointer has held (markup:
// by run length; values: per value context, in three run classes, since
// a DataSet cell repeats and a price does not). On a hit nothing else is
// coded and the other models only update their last value. A value miss
// moves the pointer on (a changed cell); a second value miss in a row,
// a markup miss, or a record of the wrong kind drops it. A pointer is
// set again after a value: a 2^15-slot table maps a hash of the value's
// context and bytes to the record after its latest earlier occurrence.
// The history is part of the model: stored messages replay it, Digest
// covers its position, and a reset clears it with the rest. A repeated
// DataSet costs a few bytes, another cut of the same table a few more.
//
// # Prose
//
// A long text with spaces (a weather report, a fault text) is mostly a
// template with figures and a few words filled in, the same from one
// message to the next. Its field (value context) keeps a slot per token
// position: word i is predicted as the word at position i last time,
// and number i has a value model of its own, so a humidity, a minute and
// a fraction digit each learn their own distribution. Slots are indexed,
// never hashed, and prose tokens do not enter the match history (the
// text is recorded as one value), so a report decodes in a fraction of
// the work the general models would do per token. A
// word the slot does not know goes through the markup model, whose
// successor lists realign a text whose sentences moved. A field has at
// most 256 slots and a model 1024 (about 150 bytes each, 400 with a
// wide-number table); later tokens share one spill slot. A field whose
// context slot is taken by another context loses its slots, on both
// ends alike. A slot's word predicts even after the dictionary evicted
// its entry. Coding numbers as steps from the slot's last value was
// measured and dropped: report figures are mostly independent draws.
//
// # Static table
//
// static_table.go, generated by gen.go, holds SOAP 1.1/1.2, WS-Addressing,
// WS-Security (wsse, wsu), XML Signature and Encryption, XSD/XSI/SOAP-ENC
// names, common namespace and algorithm URIs and XML declaration forms.
// Static strings are values (ids 1..len) and the pieces new markup and
// values are spelled with, which is what makes the first message of a
// connection cheap. Changing the table changes the wire format.
//
// # Secrets
//
// Text and CDATA inside an element whose local name is Password, Nonce,
// BinarySecurityToken or CipherValue (ASCII case-insensitive, any
// prefix), and attribute values of attributes with those names, are never
// indexed: their length is coded with model-free direct bits and their
// bytes travel verbatim in the raw section. They do not enter the
// dictionary, any context, any prediction, any probability, nor the
// digest. The element flag is computed per markup token from its bytes
// (comments and PIs skipped), so a CDATA section or comment inside a
// secret element does not end it.
//
// # Blobs
//
// Long high-entropy text costs the per-bit models about eight adaptive
// decisions a byte to save nothing an order-0 code does not. The
// encoder therefore looks at each value literal with 256 bytes
// of message left, on a 256-byte sample from the value's start, and
// sends it as a blob when
//
//   - the sample is binary junk: at least 64 bytes that are controls
//     below tab or have the high bit set, and not UTF-8. The blob then
//     runs on, in 32-byte windows, while at least 1/8 of a window is
//     junk, and ends at the first '<' after the last junk byte (256
//     bytes at most; else right after that byte, in text value state).
//     Markup it would swallow that names a secret element or attribute
//     (a sensitive name after '<' or "</", or before '=') makes it end
//     with the value instead, so the secret flags stay exact; or
//   - the value is 256 bytes or longer and the sample is ASCII, with
//     fewer spaces than prose (1/16) and at least 5 bits of order-0
//     entropy per byte (base64, and the like).
//
// The decision is the encoder's alone (the decoder reads bit(blob)); it
// is deterministic, so the stored-message replay repeats it. A blob
// trains nothing but bit(blob), its length models, and the value
// context's last value and association key, like any literal (the value
// part only, with its parsed shape); its bytes never enter the
// dictionary. A chunk whose strided 256-byte sample has 7 bits of
// entropy or more is stored without trying huff0; otherwise huff0 must
// save 1/32 and 5 bytes, or the chunk is stored. Hexadecimal text (4
// bits a byte) and UTF-8 text stay on the models.
//
// # Limits
//
// Decode refuses a length above MaxMessage (default 64 MiB) before
// allocating, and grows its output only up to the declared length: a
// small payload cannot make it allocate more than MaxMessage plus a few
// hundred bytes. A blob's lengths are checked against what is left of
// the declared message before its room is allocated, its chunks against
// the raw section, and huff0 decodes a chunk into exactly its declared
// length. Every length, index, state and static id read from a
// payload is checked; decoding loops stop after three items that produce
// nothing and when reading more than four bytes past the payload; no
// input panics (FuzzDecode). After a Decode error the Decoder's state is
// undefined: the caller discards both ends and starts anew.
//
// # Digest
//
// Digest is a running hash of every model update (token ids, value
// operations, learned strings) plus the dictionary's size and id range:
// equal on both ends exactly when they have made the same updates from
// the same initial state. Secrets are not hashed.
//
// # Entropy stage
//
// The range coder with context models is the entropy stage: the payload
// is already coded to fractions of a bit per predicted token. A general
// compressor over it was not adopted: stream-context zstd at its best
// level (BenchmarkZstdStream) spends more per message than xmltok on
// every family, and a flate/zstd flush costs several bytes per message
// on payloads that are mostly 2 to 50 bytes.
//
// # Measurements
//
// Sizes and speeds per traffic family, the commands that produce them
// and the instruction counts of scripts/xmltok-instructions.sh are in
// docs/codecs.md ("xmltok measurements").
//
//go:generate go run gen.go
package xmltok
