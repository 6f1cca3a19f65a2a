//go:build !linux

package sockopt

import "time"

func setRTOMin(uintptr, time.Duration) error { return ErrUnsupported }

func rtoMin(uintptr) (time.Duration, error) { return 0, ErrUnsupported }
