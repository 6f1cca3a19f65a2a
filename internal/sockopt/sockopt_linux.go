package sockopt

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// tcpRTOMinUS is TCP_RTO_MIN_US from <linux/tcp.h> (Linux 6.14); the value is in µs.
const tcpRTOMinUS = 45

func setRTOMin(fd uintptr, d time.Duration) error {
	err := syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMinUS, int(d/time.Microsecond))
	if errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w (setsockopt TCP_RTO_MIN_US: %v)", ErrUnsupported, err)
	}
	if err != nil {
		return fmt.Errorf("setsockopt TCP_RTO_MIN_US: %w", err)
	}
	return nil
}

func rtoMin(fd uintptr) (time.Duration, error) {
	v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMinUS)
	if errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EINVAL) {
		return 0, fmt.Errorf("%w (getsockopt TCP_RTO_MIN_US: %v)", ErrUnsupported, err)
	}
	if err != nil {
		return 0, fmt.Errorf("getsockopt TCP_RTO_MIN_US: %w", err)
	}
	return time.Duration(v) * time.Microsecond, nil
}
