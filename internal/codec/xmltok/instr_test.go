package xmltok

import (
	"os"
	"strconv"
	"testing"
)

// TestInstructionHarness is not a test but a fixed workload for counting instructions,
// which unlike wall-clock time does not vary with a noisy (virtual) machine:
// scripts/xmltok-instructions.sh runs it under valgrind's callgrind, counting only inside
// instrEncodeLoop or instrDecodeLoop, and divides by R, the number of messages they
// code. XMLTOK_INSTR_SET names a family direction (fixml-request,
// weather-detailed-response, ...), XMLTOK_INSTR_OP is enc or dec.
func TestInstructionHarness(t *testing.T) {
	set := os.Getenv("XMLTOK_INSTR_SET")
	if set == "" {
		t.Skip("set XMLTOK_INSTR_SET (see scripts/xmltok-instructions.sh)")
	}
	r, err := strconv.Atoi(os.Getenv("XMLTOK_INSTR_R"))
	if err != nil || r < 0 || r > 400 {
		t.Fatalf("XMLTOK_INSTR_R=%q: want 0..400", os.Getenv("XMLTOK_INSTR_R"))
	}
	names, sets := benchSets()
	var msgs [][]byte
	for i, n := range names {
		if n == set {
			msgs = sets[i]
		}
	}
	if msgs == nil {
		t.Fatalf("no message set %q (have %v)", set, names)
	}
	// Steady state: both ends have seen every message once. With XMLTOK_INSTR_FRESH=1
	// they have seen all but the last R, which the loops then code once each: messages
	// the history has not seen, as on a link, where replaying a set the pair has seen
	// lets the match history predict each message from its own earlier copy.
	warm := msgs
	if os.Getenv("XMLTOK_INSTR_FRESH") == "1" {
		if r > len(msgs)/5 {
			t.Fatalf("XMLTOK_INSTR_FRESH: %s has %d messages, R=%d is more than a fifth", set, len(msgs), r)
		}
		warm, msgs = msgs[:len(msgs)-r], msgs[len(msgs)-r:]
	}
	enc, dec := NewEncoder(Options{}), NewDecoder(Options{})
	var out []byte
	for _, m := range warm {
		if out, err = dec.Decode(out[:0], enc.Encode(nil, m)); err != nil {
			t.Fatal(err)
		}
	}
	if os.Getenv("XMLTOK_INSTR_OP") == "enc" {
		instrEncodeLoop(enc, msgs, r)
		return
	}
	payloads := make([][]byte, r)
	for n := range r {
		payloads[n] = enc.Encode(nil, msgs[n%len(msgs)])
	}
	if err := instrDecodeLoop(dec, payloads); err != nil {
		t.Fatal(err)
	}
}

// instrEncodeLoop and instrDecodeLoop are the measured code: the script counts the
// instructions executed inside them, and nothing else.
//
//go:noinline
func instrEncodeLoop(enc *Encoder, msgs [][]byte, r int) {
	var buf []byte
	for n := range r {
		buf = enc.Encode(buf[:0], msgs[n%len(msgs)])
	}
}

//go:noinline
func instrDecodeLoop(dec *Decoder, payloads [][]byte) error {
	var out []byte
	var err error
	for _, p := range payloads {
		if out, err = dec.Decode(out[:0], p); err != nil {
			return err
		}
	}
	return nil
}
