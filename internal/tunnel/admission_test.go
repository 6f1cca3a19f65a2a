package tunnel

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeConn is a net.Conn with a remote address, that records Close.
type fakeConn struct {
	net.Conn
	remote net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func connFrom(ip string, port int) *fakeConn {
	return &fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
}

func TestAdmissionEvictsOldestOfBusiestSource(t *testing.T) {
	type step struct {
		from       string // source IP of the new connection
		wantVictim string // "" for none, else "ip#n": the n-th connection admitted from ip
	}
	tests := []struct {
		name             string
		total, perSource int
		steps            []step
	}{
		{"under both budgets nobody is evicted", 4, 2, []step{
			{"10.0.0.1", ""}, {"10.0.0.2", ""}, {"10.0.0.1", ""}, {"10.0.0.3", ""},
		}},
		{"a source over its own budget evicts its own oldest", 10, 2, []step{
			{"10.0.0.1", ""}, {"10.0.0.1", ""}, {"10.0.0.2", ""},
			{"10.0.0.1", "10.0.0.1#1"}, {"10.0.0.1", "10.0.0.1#2"},
		}},
		{"a full total evicts from the source holding the most", 4, 3, []step{
			{"10.0.0.9", ""}, // the real edge, one handshake
			{"10.0.0.1", ""}, {"10.0.0.1", ""}, {"10.0.0.2", ""},
			{"10.0.0.3", "10.0.0.1#1"}, // 10.0.0.1 holds two: its oldest goes
			{"10.0.0.4", "10.0.0.9#1"}, // now all hold one: the oldest overall
		}},
		{"the flooder loses, not the edge", 3, 3, []step{
			{"10.0.0.9", ""}, {"10.0.0.1", ""}, {"10.0.0.1", ""},
			{"10.0.0.1", "10.0.0.1#1"}, {"10.0.0.1", "10.0.0.1#2"}, {"10.0.0.1", "10.0.0.1#3"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission(tc.total, tc.perSource)
			seen := map[string]int{}
			names := map[*pending]string{}
			for i, s := range tc.steps {
				seen[s.from]++
				c := connFrom(s.from, 1000+i)
				p, victim := a.admit(c)
				names[p] = fmt.Sprintf("%s#%d", s.from, seen[s.from])
				got := ""
				if victim != nil {
					got = names[victim]
					require.True(t, victim.conn.(*fakeConn).closed, "an evicted connection is closed")
					require.True(t, a.done(victim), "done reports the eviction")
				}
				require.Equal(t, s.wantVictim, got, "step %d", i)
				require.LessOrEqual(t, a.pendingCount(), tc.total)
			}
		})
	}
}

func TestAdmissionDoneFreesTheSlot(t *testing.T) {
	a := newAdmission(2, 2)
	p1, _ := a.admit(connFrom("10.0.0.1", 1))
	p2, _ := a.admit(connFrom("10.0.0.1", 2))
	require.False(t, a.done(p1), "a finished handshake was not evicted")
	require.Equal(t, 1, a.pendingCount())
	_, victim := a.admit(connFrom("10.0.0.1", 3))
	require.Nil(t, victim, "the finished handshake's slot is free again")
	require.False(t, a.done(p2))
	require.Equal(t, 1, a.pendingCount())
	require.Empty(t, a.sources["10.0.0.9"])
}

func TestSourceOfStripsThePort(t *testing.T) {
	require.Equal(t, "127.0.0.1", sourceOf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}))
	require.Equal(t, "::1", sourceOf(&net.TCPAddr{IP: net.IPv6loopback, Port: 5}))
	require.Equal(t, "pipe", sourceOf(pipeAddr{}))
}
