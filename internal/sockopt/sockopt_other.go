//go:build !linux

package sockopt

import (
	"syscall"
	"time"
)

func setRTOMin(uintptr, time.Duration) error { return ErrUnsupported }

func rtoMin(uintptr) (time.Duration, error) { return 0, ErrUnsupported }

func setUDPBuffers(uintptr, int) (int, int, error) { return 0, 0, ErrUnsupported }

func udpBuffers(syscall.RawConn) (int, int, error) { return 0, 0, ErrUnsupported }

func setNotSentLowat(uintptr, int) error { return ErrUnsupported }

func notSentLowat(uintptr) (int, error) { return 0, ErrUnsupported }

func bytesAcked(uintptr) (uint64, error) { return 0, ErrUnsupported }
