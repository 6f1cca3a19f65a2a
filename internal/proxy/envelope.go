package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/soapgw/soapgw/internal/envelope"
)

// The head of every tunnel message is defined in internal/envelope (shared with the token
// codec, which compresses it field by field). The proxy reads it from the stream here.

type (
	requestHead  = envelope.Request
	responseHead = envelope.Response
	gatewayError = envelope.Error
)

const (
	envelopeVersion = envelope.Version
	kindRequest     = envelope.KindRequest
)

// errBadEnvelope marks a head that does not parse: a bug or a version mismatch.
var errBadEnvelope = envelope.ErrMalformed

// readHead reads the length-prefixed head from br, refusing heads over max bytes, and
// returns it without the prefix (version and kind checked).
func readHead(br *bufio.Reader, max int) (head []byte, err error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, truncated(err, "length prefix")
	}
	if n < 2 || n > uint64(max) {
		return nil, fmt.Errorf("%w: head of %d bytes (limit %d)", errBadEnvelope, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, truncated(err, "head")
	}
	if _, err := envelope.KindOf(b); err != nil {
		return nil, err
	}
	return b, nil
}

// truncated classifies an error met while reading a head. A message that ends early or
// an impossible length is a malformed envelope; any other error (stream reset, checksum,
// timeout) is kept as it is so callers can still tell retryable and timeout errors apart.
func truncated(err error, where string) error {
	// Compared with ==, not errors.Is: a clean end of the message is io.EOF itself, while
	// a session that died wraps io.EOF in its cause and must stay a tunnel error.
	switch {
	case err == io.EOF && where == "length prefix":
		return fmt.Errorf("%w: empty message", errBadEnvelope)
	case err == io.EOF, err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%w: message ends inside its %s", errBadEnvelope, where)
	case err == errOverflow:
		return fmt.Errorf("%w: %s overflows", errBadEnvelope, where)
	}
	return err
}

// errOverflow is what encoding/binary returns for a uvarint over 64 bits; it exports no
// sentinel, so the value is captured once.
var errOverflow = func() error {
	_, err := binary.ReadUvarint(bytes.NewReader(bytes.Repeat([]byte{0xff}, 11)))
	return err
}()
