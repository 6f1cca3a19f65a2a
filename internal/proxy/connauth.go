package proxy

import (
	"strings"

	"github.com/soapgw/soapgw/internal/httpwire"
)

// connectionAuth reports whether an exchange took part in an authentication that binds
// the upstream connection rather than the request: NTLM, and Negotiate (Kerberos or
// NTLM) as IIS runs it by default, where the server authenticates a connection after a
// handshake of several requests and then treats every later request on it as that user's,
// with or without credentials; IIS's Persistent-Auth field says so outright. Such a
// connection must never go back to the pool that every client of the upstream shares:
// the next client's request on it would run as the user who authenticated it.
func connectionAuth(req, resp httpwire.Header) bool {
	for i := range req {
		if equalFold(req[i].Name, "Authorization") && isConnScheme(firstToken(req[i].Value)) {
			return true
		}
	}
	for i := range resp {
		switch {
		case equalFold(resp[i].Name, "WWW-Authenticate"):
			// A challenge list: "Negotiate, NTLM", "NTLM <token>", `Basic realm="a, b"`;
			// each element's first token names a scheme or is a parameter.
			for _, elem := range strings.Split(resp[i].Value, ",") {
				if isConnScheme(firstToken(elem)) {
					return true
				}
			}
		case equalFold(resp[i].Name, "Persistent-Auth"):
			return true
		}
	}
	return false
}

// firstToken is v's first space-separated token, without leading whitespace.
func firstToken(v string) string {
	v = strings.TrimLeft(v, " \t")
	if i := strings.IndexAny(v, " \t"); i >= 0 {
		return v[:i]
	}
	return v
}

func isConnScheme(s string) bool { return equalFold(s, "NTLM") || equalFold(s, "Negotiate") }
