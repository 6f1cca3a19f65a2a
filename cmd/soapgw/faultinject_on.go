//go:build soapgw_faultinject

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/soapgw/soapgw/internal/codec"
)

// This file is compiled only with -tags soapgw_faultinject (the e2e tests' build): the
// production binary has no fault-injection switch at all.

// faultEnv names the fault-injection switch used by the e2e tests (e2e/codec_test.go):
// with SOAPGW_FAULT_DESYNC_EVERY=N, every Nth message a stateful decoder decodes is fed to
// it twice, so its dictionary state silently drifts from the encoder's — the failure the
// tunnel's epoch/resend protocol must turn into a resend, never a corrupted message.
const faultEnv = "SOAPGW_FAULT_DESYNC_EVERY"

// desyncEvery reads faultEnv: 0 when unset.
func desyncEvery(log *slog.Logger) (int, error) {
	v := os.Getenv(faultEnv)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", faultEnv, v)
	}
	log.Warn("codec fault injection is on: decoders are desynchronized on purpose", "every", n, "env", faultEnv)
	return n, nil
}

func desynced(d codec.Decoder, every int) codec.Decoder { return &desyncDecoder{d: d, every: every} }

// desyncDecoder decodes every Nth payload a second time (discarding the result), which
// advances a stateful decoder's dictionaries past the encoder's. Test hook; see faultEnv.
type desyncDecoder struct {
	d     codec.Decoder
	every int
	n     int
}

func (f *desyncDecoder) Decode(dst, payload []byte) ([]byte, error) {
	out, err := f.d.Decode(dst, payload)
	f.n++
	if err == nil && f.n%f.every == 0 {
		_, _ = f.d.Decode(nil, payload)
	}
	return out, err
}
