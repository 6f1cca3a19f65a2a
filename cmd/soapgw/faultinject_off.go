//go:build !soapgw_faultinject

package main

import (
	"log/slog"

	"github.com/soapgw/soapgw/internal/codec"
)

// The production build has no fault injection: see faultinject_on.go, compiled only
// with -tags soapgw_faultinject for the e2e tests.

func desyncEvery(*slog.Logger) (int, error) { return 0, nil }

func desynced(d codec.Decoder, _ int) codec.Decoder { return d }
