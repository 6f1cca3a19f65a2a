package httpwire_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/soapgw/soapgw/internal/httpwire"
)

func TestProtocolErrorIsAs(t *testing.T) {
	err := error(&httpwire.ProtocolError{Kind: httpwire.ErrHeaderTooLarge, Detail: "too many"})
	wrapped := fmt.Errorf("edge: %w", err)

	require.ErrorIs(t, wrapped, httpwire.ErrHeaderTooLarge)
	require.NotErrorIs(t, wrapped, httpwire.ErrMalformed)
	var pe *httpwire.ProtocolError
	require.ErrorAs(t, wrapped, &pe)
	require.Equal(t, httpwire.ErrHeaderTooLarge, pe.Kind)
	require.Equal(t, "httpwire: header too large: too many", err.Error())

	trunc := error(&httpwire.ProtocolError{Kind: httpwire.ErrBodyTruncated, Err: io.ErrUnexpectedEOF})
	require.ErrorIs(t, trunc, httpwire.ErrBodyTruncated)
	require.ErrorIs(t, trunc, io.ErrUnexpectedEOF)
	require.Equal(t, "httpwire: body truncated: unexpected EOF", trunc.Error())
}

func TestErrorKindString(t *testing.T) {
	for _, tc := range []struct {
		kind httpwire.ErrorKind
		want string
	}{
		{httpwire.ErrMalformed, "malformed message"},
		{httpwire.ErrHeaderTooLarge, "header too large"},
		{httpwire.ErrUnsupportedVersion, "unsupported HTTP version"},
		{httpwire.ErrBadContentLength, "bad Content-Length"},
		{httpwire.ErrUnsupportedTransferCoding, "unsupported transfer coding"},
		{httpwire.ErrBodyTruncated, "body truncated"},
		{0, "ErrorKind(0)"},
		{200, "ErrorKind(200)"},
	} {
		require.Equal(t, tc.want, tc.kind.String())
		require.Equal(t, "httpwire: "+tc.want, tc.kind.Error())
	}
	// Kinds are distinct sentinels.
	require.False(t, errors.Is(httpwire.ErrMalformed, httpwire.ErrBodyTruncated))
}
