package xmltok

import (
	"bytes"
	"errors"
	"testing"

	"github.com/soapgw/soapgw/internal/soapdemo"
	"github.com/soapgw/soapgw/internal/trafficgen"
)

// splitInputs cuts fuzz bytes into a sequence of messages at 0xFF 0x00
// pairs, so one input exercises a model across messages.
func splitInputs(data []byte) [][]byte {
	return bytes.Split(data, []byte{0xFF, 0x00})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte(""))
	f.Add(soapdemo.StressRequest(1))
	f.Add(append(append(soapdemo.StressRequest(1), 0xFF, 0x00), soapdemo.StressRequest(2)...))
	for _, m := range trafficgen.Family("edge", 13, trafficgen.DefaultSeed) {
		f.Add(m.Body)
	}
	for _, m := range trafficgen.Family("charging", 4, trafficgen.DefaultSeed) {
		f.Add(m.Body)
	}
	// Prose: two weather reports in one input, the second coded by slots.
	wd := byDir(trafficgen.Family("weather-detailed", 4, trafficgen.DefaultSeed))[trafficgen.Response]
	f.Add(append(append(bytes.Clone(wd[0]), 0xFF, 0x00), wd[1]...))
	// Blobs: a dense value, then junk over markup, in one input.
	blobs := blobEdgeInputs()
	f.Add(append(append(bytes.Clone(blobs[0]), 0xFF, 0x00), blobs[13]...))
	f.Add(blobs[10])
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, o := range []Options{{}, {DictBytes: 300}} {
			p := newPair(o)
			for _, msg := range splitInputs(data) {
				p.roundTrip(t, msg)
			}
			// Twice: the second pass runs on a model that has learned.
			for _, msg := range splitInputs(data) {
				p.roundTrip(t, msg)
			}
		}
	})
}

// FuzzDecode feeds arbitrary payloads to a decoder, fresh or after some
// valid messages: it must not panic, must not produce more than
// MaxMessage, and must fail only with ErrCorrupt or ErrTooLarge.
func FuzzDecode(f *testing.F) {
	enc := NewEncoder(Options{})
	for i := range 3 {
		f.Add(uint8(i), enc.Encode(nil, soapdemo.StressRequest(i)))
	}
	f.Add(uint8(0), []byte{modeStored, 'a'})
	f.Add(uint8(1), []byte{modeCoded})
	f.Add(uint8(2), []byte{modeCoded, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Add(uint8(0), []byte{7})
	for _, m := range byDir(trafficgen.Family("weather-detailed", 2, trafficgen.DefaultSeed))[trafficgen.Response] {
		f.Add(uint8(0), NewEncoder(Options{DictBytes: 4096}).Encode(nil, m))
	}
	for _, m := range blobEdgeInputs()[:2] {
		f.Add(uint8(0), NewEncoder(Options{DictBytes: 4096}).Encode(nil, m))
	}
	const max = 1 << 16
	f.Fuzz(func(t *testing.T, warm uint8, payload []byte) {
		o := Options{MaxMessage: max, DictBytes: 4096}
		enc, dec := NewEncoder(o), NewDecoder(o)
		for i := range int(warm % 4) {
			m := soapdemo.StressRequest(i)
			out, err := dec.Decode(nil, enc.Encode(nil, m))
			if err != nil || !bytes.Equal(out, m) {
				t.Fatalf("warm-up message %d: %v", i, err)
			}
		}
		out, err := dec.Decode(nil, payload)
		if len(out) > max {
			t.Fatalf("decoded %d bytes past MaxMessage %d", len(out), max)
		}
		if cap(out) > max+4096 {
			t.Fatalf("allocated %d bytes for MaxMessage %d", cap(out), max)
		}
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error %v wraps neither ErrCorrupt nor ErrTooLarge", err)
		}
	})
}
