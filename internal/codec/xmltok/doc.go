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
// # Payload format
//
// A payload is one message. Byte 0 is the mode:
//
//	0x00  coded:   range-coded stream (below) up to the end of the payload
//	0x01  stored:  the message, verbatim
//	0x02  raw:     uvarint n (n >= 1), the n-byte raw section (secrets and
//	               blob chunks, in the order the stream names them),
//	               then the range-coded stream
//	else  ErrCorrupt
//
// The encoder stores a message when the coded form would be longer than
// the message plus one byte, so a payload is never more than len(msg)+1
// bytes (MaxExpansion is 8 to leave room for future modes). A stored
// message updates the model too: the decoder replays the encoder's model
// update on the stored bytes (Decoder.Decode runs the encoding with a
// discarding coder), so both ends stay in step and Digest agrees.
//
// The range coder is LZMA's (rc.go): 32-bit range, 12-bit adaptive
// probabilities (shift 4), carry propagation through a cache byte. Two
// differences: the always-zero first output byte is not sent (the decoder
// reads four bytes to start), and the flush picks the value in the final
// interval with the most trailing zero bytes and drops up to four of
// them; the decoder reads zeros past the end, at most four, and the
// payload must be consumed exactly. A message whose every symbol was
// predicted costs one to three bytes.
//
// Symbols of the stream, in order (every "bit" is adaptive, in the
// context named; "num" is an adaptive Elias-gamma code: the bit length
// in a 6-bit tree (lengths 63 and 64 share a leaf, told apart by a
// direct bit), five modelled bits below the leading one, the rest direct
// bits; "direct" is probability one half with no model, up to 16 bits
// coded at once by splitting the range in equal parts):
//
//	message    = length { markup | value }      until length bytes are out
//	length     = bit(same as previous message)  [num(zigzag(len-prev))]
//
//	markup     (context: previous markup token p; probabilities hashed by p)
//	  match    = bitH(as the history predicts), coded when the match
//	             pointer names a live markup entry that starts in this
//	             state (see Match model); 1 ends the token
//	  succ k   = for each live successor k of p (most recent first, up to
//	             4): bit(is successor k) -- stop at the first 1
//	  ref      = bit(ref) num(newest id - id)         dictionary entry
//	  literal  = bit(ref)=0 num(len) pieces(bytes) tree4(end state)
//	  The state after a markup token is the entry's end state: a value
//	  state (" ' text CDATA digits) means a value follows, else markup.
//
//	value      (context: the pair of markup tokens before it; 1024 hashed
//	           slots, a collision resets the slot on both ends)
//	  secret   = numDirect(len), bytes in the raw section  (no model)
//	  match    = bitH(as the history predicts), coded when the match
//	             pointer names a value of this context still in the
//	             arena; 1 ends the value
//	  assoc    = bit: equals the value this context had when the message's
//	             key (its latest non-numeric value) was last the same
//	  hit      = bit: equals the prediction (last value, plus the last
//	             numeric step for numbers and times)
//	  num      = bit tree2(base) tree3(unit) num(zigzag(delta/unit)):
//	             a number or time rebuilt in the layout of a base: the
//	             context's last value, the last time value of the
//	             stream, the associated value, or zero; the unit is one of
//	             5 steps (1, 10, 100, ... for numbers; 1 tick, 1 s, 1 min,
//	             1 h, 1 day for times)
//	  recent   = bit [bit(same index as the previous recent hit)] tree5(k):
//	             one of the context's 32 most recent distinct values
//	  ref      = bit num(newest id - id): any dictionary or static value
//	  literal  = bit(uuid) [num(len prefix) pieces direct(case) 8x direct16]
//	             | [bit(blob) blob] bit(prose) num(len) (pieces | prose)
//	  blob     = num(len) num(ext) [tree4(state) if ext > 0]: a value of
//	             len bytes and ext bytes after it, in the raw section;
//	             the message goes on in state (ext = 0: after the value).
//	             bit(blob) is coded only outside numbers and when 256 or
//	             more bytes of the message are left
//	  Each alternative is coded only when the decoder can know it is
//	  possible (a live recent value exists, a base exists, ...).
//
//	pieces     = per byte: bit(static string here) then tree10(static id)
//	             or an order-1 literal byte
//	prose      = a text value of 48+ bytes, one in 16 of them spaces,
//	             coded token by token against its field's slots (see
//	             Prose): { word | number } until len bytes are out
//	word       (slot i: the word last seen at token i of this field, up to
//	           7 earlier ones)
//	  same     = bit: the slot's last word                  1 ends the word
//	  recent   = bit tree3(k): the slot's k-th earlier word, coded when one
//	             is still in the dictionary                 1 ends the word
//	  markup   = the markup coding above, in state prose (successors of
//	             the previous word, ref, literal)
//	number     (slot i) = sym tree5: the value 0..15, or the bit length
//	             5..19, 20+ (then direct6(length-20)); for lengths 5+,
//	             tree3 of the bits below the leading one, the rest direct;
//	             then the digit count: [bit(the slot's last count), when
//	             that is more than the value's own] bit(the value's own)
//	             [direct5(count - own - 1)]
//
// A blob's bytes are in the raw section as chunks of 64 KiB (the last
// one shorter), each uvarint 0 and the bytes (stored), or uvarint c > 0
// and c bytes of huff0 (klauspost/compress/huff0: 1X format for chunks
// under 1 KiB, 4X from 1 KiB). See Blobs below.
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
// 426 KB DataSet costs 6 bytes, another cut of the same table 8 to 12.
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
// text is recorded as one value): a 2 KB report of 180 tokens costs
// about 70k decoder instructions where the general models took 190k. A
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
// decisions a byte (11 to 15 MB/s) to save nothing an order-0 code does
// not. The encoder therefore looks at each value literal with 256 bytes
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
// Mean per message, one Encoder/Decoder pair per family and direction,
// messages in wire order from gen.Family(name, 2000, gen.DefaultSeed)
// (northwind: 20), sizes over a cold pass (learning included), speeds in
// steady state on one core of the 2-core development VM (2026-11-22),
// compiled as the soapgw binary is (with cmd/soapgw/default.pgo), the
// best of three runs of -benchtime 10000x. The VM's speed varies by up
// to 2x between runs: in the quiet hour of these runs the three decoded
// weather-detailed responses at 316, 334 and 339 MB/s and fixml requests
// at 340, 341 and 341, and eight more runs of 3000x gave medians of 309
// and 334 MB/s; in a slow hour earlier that day the same directions
// gave medians of 255 and 277. Without the profile, number-heavy
// directions run up to 30% slower. zstd-stream sizes are deterministic:
// one pass (-benchtime 1x) gives them. BenchmarkXMLTokCorpus codes the
// whole corpus per iteration (every direction through its own pair,
// bytes weighing as on a link): 465, 442 and 457 MB/s decoding and 366,
// 364 and 359 MB/s encoding in three runs of -benchtime 10x. These runs
// predate decProseNum and the inline slot word; in interleaved runs
// against them (noisy hour, best of 18), the code since decodes
// weather-detailed responses 6% faster (323-327 against 303-308 MB/s)
// and fixml requests 2-4% slower at equal instruction counts (its
// regenerated profile inlines differently).
//
//	go test -pgo=$PWD/cmd/soapgw/default.pgo -run '^$' -bench BenchmarkXMLTok -benchtime 10000x ./internal/codec/xmltok/
//	go test -pgo=$PWD/cmd/soapgw/default.pgo -run '^$' -bench BenchmarkZstdStream -benchtime 1x ./internal/codec/xmltok/
//	go test -pgo=$PWD/cmd/soapgw/default.pgo -run '^$' -bench BenchmarkXMLTokCorpus -benchtime 10x ./internal/codec/xmltok/
//
//	family / direction          %raw    B/msg  enc MB/s  dec MB/s   zstd-stream %raw
//	stress request              0.44%      2.9       713       642    4.36%
//	stress response             0.49%      2.3       651       654    3.97%
//	stress (both)               0.46%      2.6                        4.20%
//	deploy request              1.63%     10.7       360       507    3.69%
//	deploy response             0.71%      2.1       767       619    4.11%
//	deploy (both)               1.34%      6.4                        3.83%
//	weather-simple request      0.54%      2.4       574       585    3.17%
//	weather-simple response     0.41%      2.6       614       641    2.33%
//	weather-simple (both)       0.46%      2.5                        2.67%
//	weather-detailed request    0.54%      2.4       589       589    3.12%
//	weather-detailed response   2.53%     50.4       261       339    8.56%
//	weather-detailed (both)     2.17%     26.4                        7.57%
//	fixml request               1.76%     52.2       232       341    5.62%
//	fixml response              0.45%      2.2       901       695    2.94%
//	fixml (both)                1.57%     27.2                        5.24%
//	northwind request           3.10%      8.9       802       550    9.96%
//	northwind response          0.22%    757.1       458       473    0.71%
//	northwind (both)            0.23%    383.0                        0.72%
//	charging request            1.00%      5.2       423       515    3.88%
//	charging response           0.70%      3.8       670       649    3.40%
//	charging (both)             0.85%      4.5                        3.63%
//	wsa request                 3.44%     21.2       691       657    9.40%
//	wsa response                3.56%     23.2       684       688    9.57%
//	wsa (both)                  3.50%     22.2                        9.49%
//
//	base64 payload (blob)       73.95%  5976.0       480       774
//	random binary (blob)        97.46%  5949.0       892      4276
//
// zstd-stream is klauspost/compress zstd at SpeedBestCompression with a
// 4 MiB window, one frame per direction flushed after each message.
// Northwind responses are cuts of one slowly changing Orders table (see
// testdata/gen): the cold first DataSet, about 6 KB, is most of the
// 10-message mean; the next ones cost 8 to 12 bytes (match model).
// The blob sets are 200 messages, each a SOAP envelope around 0 to 12
// KiB of random bytes, as base64 text or raw (blobMessages in
// blob_test.go); before blobs they coded at 75.7% and 99.4% of raw, at
// 12 to 22 MB/s both ways.
// The 150/300 MB/s speed targets are met over the corpus with margin
// and on all 16 directions in the best runs; weather-detailed responses
// (about 65k decoder instructions per 2 KB report, 870 coded decisions)
// and fixml requests (about 112k per 3 KB, 720 decisions) are the
// slowest, and in a slow hour of the VM decode below 300 MB/s (see
// above). Detailed weather reports went from 80 / 119 MB/s and 4.09% of
// raw to 249 / 305 MB/s and 2.53% with the prose slots (from 190k
// instructions). Only the encoder weighs delta bases; the decoder
// decodes one delta per number and works out the rebuilt value's shape
// from its base's layout (reconShape) instead of parsing it again.
// scripts/xmltok-instructions.sh counts instructions per message, a
// figure that does not move with the machine's load.
//
//go:generate go run gen.go
package xmltok
