package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"

	"github.com/ratelimit-go/ratelimit/httplimit"
)

// FuzzForwardedWalk sends adversarial forwarding headers through a trusted
// proxy: whatever lines a client wrote (malformed, with unmatched quotes,
// escapes, commas, other clients' addresses), the trusted proxy 10.0.0.1
// then appends the client's address as RFC 7239 and RFC 9110 let it (to
// the client's last line, or as a line of its own; quoted with a port, or
// bare; behind a second trusted proxy's entry or not). KeyByIP must key the
// request by that address, in the Forwarded and the X-Forwarded-For walk
// alike: nothing a client writes can hide the proxies' entries or steer
// the key.
func FuzzForwardedWalk(f *testing.F) {
	f.Add(`x="a, for=1.1.1.1`, "", byte(9), byte(0), uint16(0))
	f.Add(`for="1.1.1.1`, `x="\"`, byte(1), byte(3), uint16(8080))
	f.Add(`for=1.1.1.1;x="`, "for=10.0.0.2", byte(200), byte(5), uint16(1))
	f.Add(`x="a\`, `"`, byte(7), byte(15), uint16(65535))
	f.Add("for=unknown, for=_hidden;by=\"[::1]\", ,;", "1.1.1.1, garbage,, 10.0.0.3", byte(254), byte(6), uint16(443))
	trusted := []string{"10.0.0.0/8", "2001:db8:ffff::/48"}
	forwarded, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: trusted, Header: httplimit.Forwarded})
	if err != nil {
		f.Fatal(err)
	}
	xff, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: trusted})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line1, line2 string, last, how byte, port uint16) {
		// The client: an IPv4 address of TEST-NET-3, or an IPv6 one,
		// neither trusted.
		client := netip.AddrFrom4([4]byte{203, 0, 113, last})
		want := client.String()
		if how&16 != 0 {
			client = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, last})
			want = "2001:db8:1:2::/64"
		}
		lines := []string{line1}
		if how&8 != 0 {
			lines = append(lines, line2)
		}
		// The client's address as the proxy writes it: quoted with a port
		// (brackets for IPv6), or bare.
		fwd, x := client.String(), client.String()
		if how&1 != 0 {
			ap := netip.AddrPortFrom(client, port).String()
			fwd, x = strconv.Quote(ap), ap
		}
		entries := [][2]string{{"for=" + fwd, x}}
		if how&4 != 0 { // and a second trusted proxy after the first
			entries = append(entries, [2]string{`for="10.0.0.2:80";proto=https`, "10.0.0.2"})
		}
		for name, key := range map[int]httplimit.KeyFunc{0: forwarded, 1: xff} {
			l := append([]string(nil), lines...)
			for _, e := range entries {
				if how&2 != 0 { // appended to the last line
					l[len(l)-1] += ", " + e[name]
				} else { // a line of its own
					l = append(l, e[name])
				}
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "10.0.0.1:8080"
			header := "Forwarded"
			if name == 1 {
				header = "X-Forwarded-For"
			}
			r.Header[header] = l
			got, err := key(r)
			if err != nil || got != want {
				t.Fatalf("%s %q: key %q, %v; want %q", header, l, got, err, want)
			}
		}
	})
}
