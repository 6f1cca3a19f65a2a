package proxy

import (
	"bufio"
	"net"
	"sync/atomic"
	"time"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// earlyWatchMinBytes is the smallest request body whose response head the origin reads
// while it still writes the request. A server may answer before it has read a request
// (413 for a body over its limit, 401, 503) and then never read the rest: a request the
// sockets' buffers hold (a fresh connection takes well over 64 KiB before its writer
// blocks) is written whole regardless and its answer read after, as for every other
// request; a larger one would block in its write until the exchange timed out, and the
// client would get a timeout fault instead of the server's answer. Bodies of unknown
// length (streamed chunked) are always watched.
const earlyWatchMinBytes = 64 << 10

// earlyAnswer reads an upstream's response head concurrently with the request's write,
// the way RFC 9112 §9.5 asks of a client sending a body ("monitor the connection for an
// error response while it is transmitting"). An error response (4xx, 5xx) or one that
// closes the connection, or a read error, that comes before the write has returned stops
// the write with a past write deadline: the upstream has answered and will not read the
// rest. Any other early answer lets the write go on: a server may answer as it reads
// (full duplex), and the answer is relayed once the request is written. Its goroutine
// reads only uc.br, which nothing else touches until wait or stop has joined it.
type earlyAnswer struct {
	conn  net.Conn
	state atomic.Uint32 // earlyWriting, then earlyWritten (the writer's) or earlyAnswered (the reader's)
	done  chan struct{}
	resp  *httpwire.Response // set before done closes
	err   error
}

const (
	earlyWriting uint32 = iota
	earlyWritten
	earlyAnswered
)

// watchEarlyAnswer starts reading uc's response head. The caller must call wait or stop
// before it uses uc.br or returns.
func watchEarlyAnswer(uc *upstreamConn, method string, lim httpwire.Limits) *earlyAnswer {
	a := &earlyAnswer{conn: uc.conn, done: make(chan struct{})}
	go a.read(uc.br, method, lim)
	return a
}

func (a *earlyAnswer) read(br *bufio.Reader, method string, lim httpwire.Limits) {
	defer close(a.done)
	a.resp, a.err = readFinalHead(br, method, lim)
	if a.err == nil && a.resp.StatusCode < 400 && !a.resp.Close {
		return // the server may read on
	}
	if a.state.CompareAndSwap(earlyWriting, earlyAnswered) {
		_ = a.conn.SetWriteDeadline(time.Unix(1, 0)) // the upstream is done with this request
	}
}

// written is called by the writer when the request's write returned. It reports whether
// the upstream answered (or failed) first: then the write may have been cut short, and the
// connection cannot carry another request.
func (a *earlyAnswer) written() (answeredFirst bool) {
	return !a.state.CompareAndSwap(earlyWriting, earlyWritten)
}

// wait returns the response head (or the read's error). Its bounds are the reader's: the
// response deadline the caller armed, and the exchange's abort hook, which gives the
// connection a past deadline.
func (a *earlyAnswer) wait() (*httpwire.Response, error) {
	<-a.done
	return a.resp, a.err
}

// stop ends the read at once (a past read deadline; the connection is not used again)
// and joins it.
func (a *earlyAnswer) stop() {
	a.written()
	_ = a.conn.SetReadDeadline(time.Unix(1, 0))
	<-a.done
}

// readFinalHead reads the upstream's response head, skipping 1xx interim responses (100
// Continue, 102, 103: they are for the hop, and the edge already told its client to
// continue), except 101, which the caller refuses.
func readFinalHead(br *bufio.Reader, method string, lim httpwire.Limits) (*httpwire.Response, error) {
	for {
		resp, err := httpwire.ReadResponse(br, method, lim)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == 101 {
			return resp, err
		}
	}
}

// watchesEarly reports whether x's request may not fit the sockets' buffers, so that its
// response head is read while it is written (earlyWatchMinBytes).
func (x *originExchange) watchesEarly() bool {
	if x.buffered {
		return len(x.body) >= earlyWatchMinBytes
	}
	return x.req.ContentLength < 0 || x.req.ContentLength >= earlyWatchMinBytes
}
