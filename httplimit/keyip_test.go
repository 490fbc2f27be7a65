package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// trustedProxies are the proxies of the KeyByIP tests: 10.0.0.0/8, one
// address, an IPv6 range, and 172.16.0.0/12 written as IPv4-mapped IPv6.
var trustedProxies = []string{"10.0.0.0/8", "192.168.1.1", "2001:db8:ffff::/48", "::ffff:172.16.0.0/108"}

// ipCase is one request for a KeyByIP KeyFunc.
type ipCase struct {
	name      string
	remote    string
	xff       []string // X-Forwarded-For field lines
	forwarded []string // Forwarded field lines
	want      string
}

// runIPCases checks each case against KeyByIP(cfg).
func runIPCases(t *testing.T, cfg httplimit.IPConfig, cases []ipCase) {
	t.Helper()
	key, err := httplimit.KeyByIP(cfg)
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tc.forwarded {
				r.Header.Add("Forwarded", v)
			}
			got, err := key(r)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestKeyByIPWithoutTrustedProxies(t *testing.T) {
	runIPCases(t, httplimit.IPConfig{}, []ipCase{
		{name: "IPv4 peer", remote: "203.0.113.7:5555", want: "203.0.113.7"},
		{name: "headers ignored", remote: "203.0.113.7:5555", xff: []string{"1.2.3.4"}, forwarded: []string{"for=1.2.3.4"}, want: "203.0.113.7"},
		{name: "IPv6 peer grouped by /64", remote: "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443", want: "2001:db8:1:2::/64"},
		{name: "IPv4-mapped peer", remote: "[::ffff:203.0.113.7]:443", want: "203.0.113.7"},
		{name: "peer without port", remote: "203.0.113.7", want: "203.0.113.7"},
		{name: "IPv6 peer without port", remote: "2001:db8::1", want: "2001:db8::/64"},
		{name: "zoned link-local peer", remote: "[fe80::1%eth0]:80", want: "fe80::/64"},
		{name: "loopback", remote: "127.0.0.1:1234", want: "127.0.0.1"},
	})
}

func TestKeyByIPThroughXForwardedFor(t *testing.T) {
	const proxy = "10.0.0.1:8080"
	runIPCases(t, httplimit.IPConfig{TrustedProxies: trustedProxies}, []ipCase{
		{name: "untrusted peer: spoofed header ignored", remote: "203.0.113.7:5555", xff: []string{"198.51.100.9"}, want: "203.0.113.7"},
		{name: "untrusted peer next to trusted range", remote: "11.0.0.1:5555", xff: []string{"198.51.100.9"}, want: "11.0.0.1"},
		{name: "one hop", remote: proxy, xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "client-sent entries to the left ignored", remote: proxy, xff: []string{"1.1.1.1, 2.2.2.2, 198.51.100.9"}, want: "198.51.100.9"},
		{name: "trusted hops skipped", remote: proxy, xff: []string{"198.51.100.9, 10.0.0.2, 192.168.1.1"}, want: "198.51.100.9"},
		{name: "across field lines", remote: proxy, xff: []string{"1.1.1.1, 198.51.100.9", "10.0.0.2", "10.9.9.9"}, want: "198.51.100.9"},
		{name: "single trusted address", remote: "192.168.1.1:80", xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "address next to single trusted is not trusted", remote: "192.168.1.2:80", xff: []string{"198.51.100.9"}, want: "192.168.1.2"},
		{name: "trusted IPv6 proxy", remote: "[2001:db8:ffff:1::5]:443", xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "IPv4-mapped peer in trusted IPv4 range", remote: "[::ffff:10.0.0.1]:80", xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "peer in range given as IPv4-mapped", remote: "172.16.5.5:80", xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "no header: the proxy itself", remote: proxy, want: "10.0.0.1"},
		{name: "empty header", remote: proxy, xff: []string{""}, want: "10.0.0.1"},
		{name: "all trusted: leftmost", remote: proxy, xff: []string{"10.0.0.3, 10.0.0.2"}, want: "10.0.0.3"},
		{name: "empty entries skipped", remote: proxy, xff: []string{" ,198.51.100.9,, ,10.0.0.2,"}, want: "198.51.100.9"},
		{name: "tabs and spaces", remote: proxy, xff: []string{"\t198.51.100.9 \t,\t10.0.0.2 "}, want: "198.51.100.9"},
		{name: "IPv4 with port", remote: proxy, xff: []string{"198.51.100.9:4711"}, want: "198.51.100.9"},
		{name: "bracketed IPv6 with port", remote: proxy, xff: []string{"[2001:db8:5:6::1]:4711"}, want: "2001:db8:5:6::/64"},
		{name: "bracketed IPv6", remote: proxy, xff: []string{"[2001:db8:5:6::1]"}, want: "2001:db8:5:6::/64"},
		{name: "bare IPv6", remote: proxy, xff: []string{"2001:db8:5:6::1"}, want: "2001:db8:5:6::/64"},
		{name: "IPv6 with zone", remote: proxy, xff: []string{"fe80::1%eth0"}, want: "fe80::/64"},
		{name: "IPv4-mapped IPv6 client", remote: proxy, xff: []string{"::ffff:198.51.100.9"}, want: "198.51.100.9"},
		{name: "trusted IPv4-mapped hop skipped", remote: proxy, xff: []string{"198.51.100.9, ::ffff:10.0.0.2"}, want: "198.51.100.9"},
		{name: "malformed rightmost: the peer", remote: proxy, xff: []string{"198.51.100.9, garbage"}, want: "10.0.0.1"},
		{name: "malformed after trusted hop: that hop", remote: proxy, xff: []string{"198.51.100.9, bogus, 10.0.0.2"}, want: "10.0.0.2"},
		{name: "unknown", remote: proxy, xff: []string{"unknown"}, want: "10.0.0.1"},
		{name: "quoted", remote: proxy, xff: []string{`"198.51.100.9"`}, want: "10.0.0.1"},
		{name: "empty port", remote: proxy, xff: []string{"198.51.100.9:"}, want: "10.0.0.1"},
		{name: "bracketed IPv4", remote: proxy, xff: []string{"[198.51.100.9]:80"}, want: "10.0.0.1"},
		{name: "unclosed bracket", remote: proxy, xff: []string{"[2001:db8::1"}, want: "10.0.0.1"},
		{name: "junk after bracket", remote: proxy, xff: []string{"[2001:db8::1]x"}, want: "10.0.0.1"},
		{name: "IPv6 with port unbracketed", remote: proxy, xff: []string{"2001:db8::1:80:x"}, want: "10.0.0.1"},
		{name: "CIDR is not an address", remote: proxy, xff: []string{"198.51.100.0/24"}, want: "10.0.0.1"},
		{name: "hostname", remote: proxy, xff: []string{"client.example"}, want: "10.0.0.1"},
		{name: "out-of-range octet", remote: proxy, xff: []string{"198.51.100.256"}, want: "10.0.0.1"},
		{name: "control bytes", remote: proxy, xff: []string{"198.51.100.9\x00"}, want: "10.0.0.1"},
		{name: "Forwarded ignored in X-Forwarded-For mode", remote: proxy, forwarded: []string{"for=198.51.100.9"}, want: "10.0.0.1"},
		{name: "only the 64 rightmost entries considered", remote: proxy,
			xff: []string{"198.51.100.9, " + strings.Repeat("10.0.0.2, ", 63) + "10.0.0.3"}, want: "10.0.0.2"},
		{name: "client within the 64 rightmost", remote: proxy,
			xff: []string{"198.51.100.9, " + strings.Repeat("10.0.0.2, ", 62) + "10.0.0.3"}, want: "198.51.100.9"},
	})
}

func TestKeyByIPThroughForwarded(t *testing.T) {
	const proxy = "10.0.0.1:8080"
	runIPCases(t, httplimit.IPConfig{TrustedProxies: trustedProxies, Header: httplimit.Forwarded}, []ipCase{
		{name: "untrusted peer: spoofed header ignored", remote: "203.0.113.7:5555", forwarded: []string{"for=198.51.100.9"}, want: "203.0.113.7"},
		{name: "one element", remote: proxy, forwarded: []string{"for=198.51.100.9;proto=https;by=10.0.0.1"}, want: "198.51.100.9"},
		{name: "trusted hops skipped", remote: proxy, forwarded: []string{"for=1.1.1.1, for=198.51.100.9, for=10.0.0.2"}, want: "198.51.100.9"},
		{name: "across field lines", remote: proxy, forwarded: []string{"for=198.51.100.9", "for=10.0.0.2;proto=http"}, want: "198.51.100.9"},
		{name: "parameter names are case-insensitive", remote: proxy, forwarded: []string{"For=198.51.100.9"}, want: "198.51.100.9"},
		{name: "for not first", remote: proxy, forwarded: []string{"proto=https; for=198.51.100.9 ;by=x"}, want: "198.51.100.9"},
		{name: "quoted IPv4 with port", remote: proxy, forwarded: []string{`for="198.51.100.9:4711"`}, want: "198.51.100.9"},
		{name: "quoted bracketed IPv6 with port", remote: proxy, forwarded: []string{`for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "quoted bracketed IPv6", remote: proxy, forwarded: []string{`for="[2001:db8:cafe::17]"`}, want: "2001:db8:cafe::/64"},
		{name: "unquoted bracketed IPv6", remote: proxy, forwarded: []string{`for=[2001:db8:cafe::17]`}, want: "2001:db8:cafe::/64"},
		{name: "obfuscated port", remote: proxy, forwarded: []string{`for="[2001:db8:cafe::17]:_abc"`}, want: "2001:db8:cafe::/64"},
		{name: "escaped character in quotes", remote: proxy, forwarded: []string{`for="198.51.100.\9"`}, want: "198.51.100.9"},
		{name: "quoted string with comma and semicolon", remote: proxy, forwarded: []string{`for="1.1.1.1,;x";proto=http, for=198.51.100.9`}, want: "198.51.100.9"},
		{name: "empty elements skipped", remote: proxy, forwarded: []string{" , for=198.51.100.9 ,, "}, want: "198.51.100.9"},
		{name: "unknown: the last trusted hop", remote: proxy, forwarded: []string{"for=unknown, for=10.0.0.2"}, want: "10.0.0.2"},
		{name: "obfuscated identifier", remote: proxy, forwarded: []string{"for=_hidden"}, want: "10.0.0.1"},
		{name: "obfuscated identifier quoted", remote: proxy, forwarded: []string{`for="_gazonk"`}, want: "10.0.0.1"},
		{name: "element without for", remote: proxy, forwarded: []string{"by=10.0.0.1;proto=http"}, want: "10.0.0.1"},
		{name: "two for parameters", remote: proxy, forwarded: []string{"for=198.51.100.9;for=1.1.1.1"}, want: "10.0.0.1"},
		{name: "unterminated quote", remote: proxy, forwarded: []string{`for="198.51.100.9`}, want: "10.0.0.1"},
		{name: "trailing backslash", remote: proxy, forwarded: []string{`for="198.51.100.9\`}, want: "10.0.0.1"},
		{name: "empty value", remote: proxy, forwarded: []string{"for="}, want: "10.0.0.1"},
		{name: "empty quoted value", remote: proxy, forwarded: []string{`for=""`}, want: "10.0.0.1"},
		{name: "no value separator", remote: proxy, forwarded: []string{"for"}, want: "10.0.0.1"},
		{name: "junk after value", remote: proxy, forwarded: []string{"for=198.51.100.9 junk, for=10.0.0.2"}, want: "10.0.0.2"},
		{name: "bad element skipped to the next", remote: proxy, forwarded: []string{`=x"a,b", for=198.51.100.9`}, want: "198.51.100.9"},
		{name: "punctuation only", remote: proxy, forwarded: []string{";;;,,,==\"\\"}, want: "10.0.0.1"},
		{name: "X-Forwarded-For ignored in Forwarded mode", remote: proxy, xff: []string{"198.51.100.9"}, want: "10.0.0.1"},
	})
}

func TestKeyByIPForwardedClientsUnmatchedQuoteCannotHideTheProxysEntry(t *testing.T) {
	// The client sends a Forwarded line of its own; the trusted proxy
	// 10.0.0.1 appends ", for=<client>" to it (or a line of its own), as
	// RFC 9110 lets it combine field lines. Whatever the client wrote, the
	// proxy's entry names the client.
	const proxy = "10.0.0.1:8080"
	appended := func(client string) []string { return []string{client + ", for=203.0.113.7"} }
	runIPCases(t, httplimit.IPConfig{TrustedProxies: trustedProxies, Header: httplimit.Forwarded}, []ipCase{
		{name: "unmatched quote before the proxy's entry", remote: proxy, forwarded: appended(`x="a, for=1.1.1.1`), want: "203.0.113.7"},
		{name: "unmatched quote, proxy's entry quoted", remote: proxy, forwarded: []string{`x="a, for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::/64"},
		{name: "unmatched quote in a for= value", remote: proxy, forwarded: appended(`for="1.1.1.1`), want: "203.0.113.7"},
		{name: "quote opened after a pair", remote: proxy, forwarded: appended(`for=1.1.1.1;x="`), want: "203.0.113.7"},
		{name: "escaped quote that never ends", remote: proxy, forwarded: appended(`x="\"`), want: "203.0.113.7"},
		{name: "trailing backslash", remote: proxy, forwarded: appended(`x="a\`), want: "203.0.113.7"},
		{name: "backslash outside quotes", remote: proxy, forwarded: appended(`x=a\`), want: "203.0.113.7"},
		{name: "two quoted strings, one unmatched", remote: proxy, forwarded: appended(`x="a", y="b, for=1.1.1.1`), want: "203.0.113.7"},
		{name: "then a second trusted proxy", remote: proxy, forwarded: []string{`x="a, for=1.1.1.1, for=203.0.113.7, for=10.0.0.2`}, want: "203.0.113.7"},
		{name: "proxy's entry on a line of its own", remote: proxy, forwarded: []string{`x="a, for=1.1.1.1`, "for=203.0.113.7"}, want: "203.0.113.7"},
	})
}

func TestKeyByIPForwardedMalformedElementStopsTheWalk(t *testing.T) {
	// Each line is followed by the entry of the trusted proxy 10.0.0.2:
	// the walk passes it and stops at the element before it, which is
	// malformed, so the client is 10.0.0.2, the last trusted hop, which
	// could not say whom it forwarded for.
	const proxy = "10.0.0.1:8080"
	cfg := httplimit.IPConfig{TrustedProxies: trustedProxies, Header: httplimit.Forwarded}
	var cases []ipCase
	for _, line := range []string{
		`for=198.51.100.9 proto=https`,       // no ';' between pairs
		`for=198.51.100.9;=x`,                // a pair without a name
		`for==198.51.100.9`,                  // a value that starts with '='
		`"for"=198.51.100.9`,                 // a quoted name
		`for=198.51.100.9;For=198.51.100.10`, // two for= pairs
		`for=198.51.100.9;for="1.1.1.1"`,     // two for= pairs, one quoted
		`for="198.51.100.9"x`,                // junk after a quoted string
		`for=198.51.100.9"x"`,                // a quote inside a token
		`for=198.51.100.9\`,                  // a backslash outside quotes
		"for=\"198.51.100.9\x01\"",           // a control character in quotes
		"for=\"198.51.100.9\\\x7f\"",         // an escaped control character
		"for=198.51.100.9\x00",               // a NUL after a token
		`for=198.51.100.9;proto`,             // a pair without '='
		`for=198.51.100.9;proto=`,            // a pair without a value
		`for=(198.51.100.9)`,                 // separators in a token
		`x="a, for=1.1.1.1"x`,                // junk after a quoted string of commas
		`x="a\"b"c`,                          // junk after a quoted string with an escaped quote
		`proto=https`,                        // no for=
		`;`,                                  // only an empty pair: no for=
		`for=""`,                             // an empty address
		`for="\"198.51.100.9"`,               // a quote in the address
		`for=unknown`,                        // not an address
		`for="[198.51.100.9]"`,               // an IPv4 address in brackets
		`for="[2001:db8::1"`,                 // a bracket that is not closed
	} {
		cases = append(cases, ipCase{name: line, remote: proxy, forwarded: []string{line + ", for=10.0.0.2"}, want: "10.0.0.2"})
	}
	runIPCases(t, cfg, cases)
	// What the grammar allows is read.
	runIPCases(t, cfg, []ipCase{
		{name: "empty pairs", remote: proxy, forwarded: []string{";for=198.51.100.9;;proto=http;, for=10.0.0.2"}, want: "198.51.100.9"},
		{name: "whitespace around ; and =", remote: proxy, forwarded: []string{"for = 198.51.100.9 ;\tproto=http, for=10.0.0.2"}, want: "198.51.100.9"},
		{name: "obs-text in a quoted string", remote: proxy, forwarded: []string{"for=198.51.100.9;x=\"caf\xc3\xa9\", for=10.0.0.2"}, want: "198.51.100.9"},
		{name: "escaped quote and backslash", remote: proxy, forwarded: []string{`for=198.51.100.9;x="a\"b\\", for=10.0.0.2`}, want: "198.51.100.9"},
		{name: "commas in a quoted string", remote: proxy, forwarded: []string{`for=198.51.100.9;x=", for=1.1.1.1,", for=10.0.0.2`}, want: "198.51.100.9"},
	})
}

func TestKeyByIPv6Prefix(t *testing.T) {
	const addr = "[2001:db8:1:2:3:4:5:6]:443"
	for _, tc := range []struct {
		bits int
		want string
	}{
		{0, "2001:db8:1:2::/64"},
		{64, "2001:db8:1:2::/64"},
		{48, "2001:db8:1::/48"},
		{56, "2001:db8:1::/56"},
		{127, "2001:db8:1:2:3:4:5:6/127"},
		{128, "2001:db8:1:2:3:4:5:6"},
	} {
		key, err := httplimit.KeyByIP(httplimit.IPConfig{IPv6Prefix: tc.bits})
		require.NoError(t, err)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		got, err := key(r)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "/%d", tc.bits)

		r.RemoteAddr = "198.51.100.9:80" // IPv4 is never grouped
		got, err = key(r)
		require.NoError(t, err)
		assert.Equal(t, "198.51.100.9", got, "/%d", tc.bits)
	}
}

func TestKeyByIPUnusableRemoteAddr(t *testing.T) {
	key, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: trustedProxies})
	require.NoError(t, err)
	for _, remote := range []string{"", "@", "/run/app.sock", "[::1", "host.example:80", "1.2.3.4:80:90"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", "198.51.100.9")
		got, err := key(r)
		assert.ErrorIs(t, err, httplimit.ErrNoKey, "%q", remote)
		assert.Empty(t, got)
	}
}

func TestKeyByIPRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  httplimit.IPConfig
		want string
	}{
		{"prefix too long", httplimit.IPConfig{TrustedProxies: []string{"10.0.0.0/33"}}, `"10.0.0.0/33"`},
		{"not an address", httplimit.IPConfig{TrustedProxies: []string{"proxy.internal"}}, `"proxy.internal"`},
		{"empty", httplimit.IPConfig{TrustedProxies: []string{""}}, `""`},
		{"zone", httplimit.IPConfig{TrustedProxies: []string{"fe80::1%eth0"}}, "zones"},
		{"zone in prefix", httplimit.IPConfig{TrustedProxies: []string{"fe80::1%eth0/64"}}, "not a CIDR prefix"},
		{"bad among good", httplimit.IPConfig{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/8/8"}}, `"10.0.0.0/8/8"`},
		{"negative IPv6 prefix", httplimit.IPConfig{IPv6Prefix: -1}, "IPv6Prefix -1"},
		{"IPv6 prefix too long", httplimit.IPConfig{IPv6Prefix: 129}, "IPv6Prefix 129"},
		{"unknown header", httplimit.IPConfig{Header: 2}, "unknown proxy header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := httplimit.KeyByIP(tc.cfg)
			require.Error(t, err)
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, key)
		})
	}
}

func TestKeyByIPRefusesTrustOfLargePartsOfTheInternet(t *testing.T) {
	for _, prefix := range []string{
		"0.0.0.0/0", "::/0", "0.0.0.0/1", "128.0.0.0/1", "0.0.0.0/7", "8.0.0.0/7",
		"::ffff:0.0.0.0/96", "::ffff:0:0/96", "::ffff:8.0.0.0/103", "64:ff9b::/96", "::ffff:0:0:0/96",
		"::/1", "2000::/3", "2001::/15", "2a00::/8",
	} {
		t.Run(prefix, func(t *testing.T) {
			key, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: []string{"10.0.0.0/8", prefix}})
			require.Error(t, err)
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), `"`+prefix+`"`)
			assert.Nil(t, key)
		})
	}
	for _, prefix := range []string{
		"10.0.0.0/8", "100.64.0.0/10", "0.0.0.0/8", "2001:db8::/32", "2001::/16", "2a06:98c0::/29",
		"fc00::/7", "fd00::/8", "fe80::/10", "::/3", "64:ff9b::10.0.0.0/104",
	} {
		_, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: []string{prefix}})
		assert.NoError(t, err, prefix)
	}
}

func TestKeyByIPKeysTranslatedIPv4ClientsAsIPv4(t *testing.T) {
	// IPv4 clients behind NAT64 or SIIT, seen as IPv6 addresses, each
	// keep the key of their IPv4 address rather than sharing a /64.
	runIPCases(t, httplimit.IPConfig{}, []ipCase{
		{name: "NAT64 well-known prefix", remote: "[64:ff9b::198.51.100.9]:443", want: "198.51.100.9"},
		{name: "another NAT64 client", remote: "[64:ff9b::c633:640a]:443", want: "198.51.100.10"},
		{name: "SIIT translated", remote: "[::ffff:0:198.51.100.9]:443", want: "198.51.100.9"},
		{name: "IPv4-mapped", remote: "[::ffff:198.51.100.9]:443", want: "198.51.100.9"},
		{name: "next to the NAT64 prefix: IPv6", remote: "[64:ff9b::1:198.51.100.9]:443", want: "64:ff9b::/64"},
	})
	const proxy = "10.0.0.1:8080"
	runIPCases(t, httplimit.IPConfig{TrustedProxies: append([]string{"64:ff9b::192.0.2.0/120"}, trustedProxies...)}, []ipCase{
		{name: "NAT64 hop", remote: proxy, xff: []string{"64:ff9b::198.51.100.9"}, want: "198.51.100.9"},
		{name: "bracketed SIIT hop with port", remote: proxy, xff: []string{"[::ffff:0:198.51.100.9]:80"}, want: "198.51.100.9"},
		{name: "trusted NAT64 proxy given as IPv4", remote: "[64:ff9b::10.0.0.7]:80", xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "trusted proxy given in NAT64 form", remote: "192.0.2.5:80", xff: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "trusted NAT64 hop skipped", remote: proxy, xff: []string{"198.51.100.9, 64:ff9b::10.0.0.2"}, want: "198.51.100.9"},
	})
}

func TestKeyByIPAcceptsProxyForms(t *testing.T) {
	key, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: []string{" 10.1.2.3/8 ", "::ffff:192.0.2.1", "2001:db8::1"}})
	require.NoError(t, err)
	for _, peer := range []string{"10.200.0.1:1", "192.0.2.1:1", "[2001:db8::1]:1"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", "198.51.100.9")
		got, err := key(r)
		require.NoError(t, err)
		assert.Equal(t, "198.51.100.9", got, peer)
	}
}

// FuzzKeyByIP checks that no RemoteAddr or forwarding header makes KeyByIP
// panic, and that every key it gives is an address or an IPv6 prefix.
func FuzzKeyByIP(f *testing.F) {
	f.Add("10.0.0.1:80", "198.51.100.9, 10.0.0.2", `for="[2001:db8::1]:80";proto=https, for=unknown`)
	f.Add("[::ffff:10.0.0.1]:1", "[2001:db8::1]:4711,,", `for="\"`)
	f.Add("203.0.113.7:5555", "unknown", "for=_x;by=10.0.0.1")
	keys := make([]httplimit.KeyFunc, 0, 2)
	for _, header := range []httplimit.ProxyHeader{httplimit.XForwardedFor, httplimit.Forwarded} {
		key, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: trustedProxies, Header: header})
		require.NoError(f, err)
		keys = append(keys, key)
	}
	f.Fuzz(func(t *testing.T, remote, xff, forwarded string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["Forwarded"] = []string{forwarded}
		for _, key := range keys {
			got, err := key(r)
			if err != nil {
				assert.ErrorIs(t, err, httplimit.ErrNoKey)
				continue
			}
			if _, err := netip.ParseAddr(got); err == nil {
				continue
			}
			p, err := netip.ParsePrefix(got)
			require.NoError(t, err, "key %q", got)
			assert.True(t, p.Addr().Is6(), "key %q", got)
		}
	})
}
