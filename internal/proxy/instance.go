package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// originInstance names an origin process to its edges, in the HELLO of each tunnel
// connection: a random id drawn when the process starts, and the milliseconds since then
// when it set the connection up ("3fa2c1d09e8b7a65.120034"). An edge whose connection
// died before it had any answer to a request resumes the exchange naming the connection's
// instance (envelope.Resume). If this very process answers, it knows the request could
// only have arrived after the connection was set up, and its held store remembers every
// exchange it forgot since then (neverArrived): so "I do not have it" becomes "it never
// reached me", and the edge sends the request again instead of telling its client the
// outcome is unknown. Another process (a restart, another replica) cannot say that.
type originInstance struct {
	id      string
	started time.Time
}

func newOriginInstance() originInstance {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return originInstance{id: hex.EncodeToString(b[:]), started: time.Now()}
}

// connection names this process and now, for a new connection's HELLO.
func (in originInstance) connection() string {
	return in.id + "." + strconv.FormatInt(time.Since(in.started).Milliseconds(), 10)
}

// since returns when the connection named s was set up, if this process named it. The
// milliseconds are rounded down: the time is never later than the real one.
func (in originInstance) since(s string) (time.Time, bool) {
	id, ms, ok := strings.Cut(s, ".")
	if !ok || id != in.id {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != ms {
		return time.Time{}, false
	}
	return in.started.Add(time.Duration(n) * time.Millisecond), true
}

// ConnectionInstance is the instance this origin names in the HELLO of a new tunnel
// connection (tunnel.Config.Instance).
func (o *Origin) ConnectionInstance() string { return o.instance.connection() }
