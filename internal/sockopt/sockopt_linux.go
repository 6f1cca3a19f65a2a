package sockopt

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

func setUDPBuffers(fd uintptr, size int) (rcv, snd int, err error) {
	if err := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size); err != nil {
		return 0, 0, err
	}
	if err := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, size); err != nil {
		return 0, 0, err
	}
	return getUDPBuffers(fd)
}

func getUDPBuffers(fd uintptr) (rcv, snd int, err error) {
	if rcv, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF); err != nil {
		return 0, 0, err
	}
	snd, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	return rcv, snd, err
}

func udpBuffers(raw syscall.RawConn) (rcv, snd int, err error) {
	if cerr := raw.Control(func(fd uintptr) { rcv, snd, err = getUDPBuffers(fd) }); cerr != nil {
		return 0, 0, cerr
	}
	return rcv, snd, err
}

// tcpNotSentLowat is TCP_NOTSENT_LOWAT from <linux/tcp.h> (Linux 3.12).
const tcpNotSentLowat = 25

func setNotSentLowat(fd uintptr, bytes int) error {
	if err := syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, bytes); err != nil {
		return fmt.Errorf("setsockopt TCP_NOTSENT_LOWAT: %w", err)
	}
	return nil
}

func notSentLowat(fd uintptr) (int, error) {
	v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat)
	if err != nil {
		return 0, fmt.Errorf("getsockopt TCP_NOTSENT_LOWAT: %w", err)
	}
	return v, nil
}

func bytesAcked(fd uintptr) (uint64, error) {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, fmt.Errorf("getsockopt TCP_INFO: %w", err)
	}
	return info.Bytes_acked, nil
}
