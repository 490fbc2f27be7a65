package httplimit

import (
	"net/netip"
	"strings"

	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// maxHops is how many of the rightmost forwarding entries KeyByIP considers,
// so that a huge header costs no more than a scan.
const maxHops = 64

// A forwarding header is read from the right, where the proxies closest to
// the server wrote, and only as far as the walk needs: whatever a client
// put to the left of a proxy's entry, an unmatched quote included, cannot
// change how that entry reads. Each reader calls visit with one entry at a
// time, rightmost first, until visit returns false or the line ends. An
// entry is the raw text of one address; "" stands for an entry that is not
// one (a Forwarded element that is malformed, has no for= or has two).

// xForwardedFors visits the entries of one X-Forwarded-For field line, a
// comma-separated list, from the right; empty entries are skipped, as HTTP
// lists allow. It reports whether visit wants more.
func xForwardedFors(v string, visit func(string) bool) bool {
	for {
		i := strings.LastIndexByte(v, ',')
		if entry := trimOWS(v[i+1:]); entry != "" && !visit(entry) {
			return false
		}
		if i < 0 {
			return true
		}
		v = v[:i]
	}
}

// forwardedFors visits the for= value of each element of one RFC 7239
// Forwarded field line, from the right, with quoted strings unquoted (see
// forwardedElement); empty elements are skipped. It reports whether visit
// wants more.
//
// The elements are cut at the commas outside quoted strings as read from
// the right: going left, a '"' opens a quoted string (it ends one, read
// forwards), and inside one a '"' preceded by an odd number of
// backslashes is escaped content while one preceded by an even number
// ends it. For a line that follows the grammar this cuts where a reading
// from the left does; for one that does not, the elements to the right of
// the fault are still read as their writer meant. Text left of a quote
// that never ends is one element, malformed.
func forwardedFors(v string, visit func(string) bool) bool {
	end, quoted := len(v), false
	for i := len(v) - 1; i >= 0; i-- {
		switch c := v[i]; {
		case quoted && c == '"':
			k := 0 // the backslashes just before the quote
			for i-1-k >= 0 && v[i-1-k] == '\\' {
				k++
			}
			if k%2 == 1 {
				i -= k // an escaped quote: it and its backslashes are content
			} else {
				quoted = false
			}
		case c == '"':
			quoted = true
		case c == ',' && !quoted:
			if !visitElement(v[i+1:end], visit) {
				return false
			}
			end = i
		}
	}
	if quoted {
		return visit("")
	}
	return visitElement(v[:end], visit)
}

// visitElement visits the for= value of element e, "" when it has none, has
// two or is malformed; an empty element is skipped. It reports whether
// visit wants more.
func visitElement(e string, visit func(string) bool) bool {
	e = trimOWS(e)
	if e == "" {
		return true
	}
	value, _ := forwardedElement(e)
	return visit(value)
}

// forwardedElement parses one element of a Forwarded field, e, by RFC
// 7239's grammar, with RFC 9110's token and quoted-string:
//
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// It allows optional whitespace around ';' and '=', and ':', '[' and ']' in
// an unquoted value (RFC 7239 wants ports and IPv6 addresses quoted; some
// proxies do not quote them). It returns the element's for= value, unquoted,
// and true when the element is well formed and holds exactly one for=
// parameter (the names are case-insensitive); "" and false otherwise. It
// never reads past the end of e, whatever e holds.
func forwardedElement(e string) (string, bool) {
	p := elementParser{s: e}
	var forValue string
	fors := 0
	for {
		p.skipOWS()
		if p.done() {
			break
		}
		if p.eat(';') {
			continue // an empty pair
		}
		name := p.token()
		p.skipOWS()
		if name == "" || !p.eat('=') {
			return "", false
		}
		p.skipOWS()
		value, ok := p.value()
		if !ok {
			return "", false
		}
		if strings.EqualFold(name, "for") {
			forValue = value
			fors++
		}
		p.skipOWS()
		if !p.done() && !p.eat(';') {
			return "", false
		}
	}
	if fors != 1 {
		return "", false
	}
	return forValue, true
}

// elementParser reads one Forwarded element. It never reads past the end of
// s, whatever s holds.
type elementParser struct {
	s string
	i int
}

func (p *elementParser) done() bool { return p.i >= len(p.s) }

func (p *elementParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// eat consumes c if it is next.
func (p *elementParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// token reads an RFC 9110 token, possibly empty.
func (p *elementParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// value reads a token (with ':', '[' and ']' allowed) or a quoted string,
// unquoted, and reports whether it was well formed: a non-empty token, or a
// quoted string that ends, whose characters are RFC 9110's qdtext or
// quoted-pair (no control character but a tab).
func (p *elementParser) value() (string, bool) {
	if !p.eat('"') {
		start := p.i
		for p.i < len(p.s) && (isTokenChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '[' || p.s[p.i] == ']') {
			p.i++
		}
		return p.s[start:p.i], p.i > start
	}
	start := p.i
	var b []byte // only for a string with escapes
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			if b == nil {
				return p.s[start : p.i-1], true
			}
			return string(b), true
		case !isQuotedChar(c):
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.s) || !isQuotedChar(p.s[p.i+1]) {
				return "", false
			}
			if b == nil {
				b = append([]byte(nil), p.s[start:p.i]...)
			}
			b = append(b, p.s[p.i+1])
			p.i += 2
		default:
			if b != nil {
				b = append(b, c)
			}
			p.i++
		}
	}
	return "", false // unterminated
}

// isQuotedChar reports whether c may appear in an RFC 9110 quoted string,
// as qdtext or in a quoted-pair: a tab, a space, a visible character or
// obs-text.
func isQuotedChar(c byte) bool {
	return c == '\t' || c >= ' ' && c != 0x7f
}

// isTokenChar reports whether c may appear in an RFC 9110 token.
func isTokenChar(c byte) bool {
	return c > ' ' && c < 0x7f && strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) < 0
}

// parseHop parses one forwarding entry as an IP address: "192.0.2.1",
// "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:8080",
// with an optional zone. A port is dropped whatever it holds (RFC 7239
// allows obfuscated ones); anything else, "unknown" and obfuscated
// identifiers included, is not an address.
func parseHop(s string) (netip.Addr, bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || len(rest) == 1) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
		return ratefields.Normalize(a), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return ratefields.Normalize(a), true
	}
	// An IPv4 address with a port: exactly one colon.
	host, port, ok := strings.Cut(s, ":")
	if !ok || port == "" || strings.Contains(port, ":") {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}
