package httplimit

import (
	"net/netip"
	"strings"
)

// maxHops is how many of the rightmost forwarding entries KeyByIP considers,
// so that a huge header costs no more than a scan.
const maxHops = 64

// hopRing keeps the last maxHops forwarding entries pushed into it, in order.
// An entry is the raw text of one address; "" stands for an entry that is
// not one (a Forwarded element without for=, or a malformed one).
type hopRing struct {
	buf [maxHops]string
	n   int // entries ever pushed
}

// push appends an entry, dropping the oldest beyond maxHops.
func (h *hopRing) push(s string) {
	h.buf[h.n%maxHops] = s
	h.n++
}

// len returns how many entries can be read.
func (h *hopRing) len() int { return min(h.n, maxHops) }

// fromRight returns the i-th entry from the right, 0 being the last pushed;
// i < h.len().
func (h *hopRing) fromRight(i int) string { return h.buf[(h.n-1-i)%maxHops] }

// xForwardedFors pushes the entries of one X-Forwarded-For field line, a
// comma-separated list; empty entries are skipped, as HTTP lists allow.
func xForwardedFors(v string, hops *hopRing) {
	for v != "" {
		var entry string
		entry, v, _ = strings.Cut(v, ",")
		if entry = trimOWS(entry); entry != "" {
			hops.push(entry)
		}
	}
}

// forwardedFors pushes the for= value of each element of one RFC 7239
// Forwarded field line, with quoted strings unquoted; an element without
// for=, with two of them, or that does not parse pushes "". Empty elements
// are skipped.
func forwardedFors(v string, hops *hopRing) {
	p := sfParser{s: v}
	for {
		p.skipOWS()
		switch {
		case p.done():
			return
		case p.eat(','):
			// an empty element
		default:
			hops.push(p.element())
		}
	}
}

// sfParser reads a Forwarded field line. It never reads past the end of s,
// whatever s holds.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// eat consumes c if it is next.
func (p *sfParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// element reads one element, pairs separated by ';', up to and including the
// ',' that ends it, and returns its for= value, or "" if it has none, has two
// or is malformed. After a syntax error it skips to the next ',' outside a
// quoted string.
func (p *sfParser) element() string {
	var forValue string
	fors, ok := 0, true
	for ok {
		p.skipOWS()
		name := p.token()
		p.skipOWS()
		if name == "" || !p.eat('=') {
			ok = false
			break
		}
		p.skipOWS()
		value, valid := p.value()
		if !valid {
			ok = false
			break
		}
		if strings.EqualFold(name, "for") {
			forValue = value
			fors++
		}
		p.skipOWS()
		switch {
		case p.eat(';'):
		case p.done() || p.eat(','):
			if fors != 1 {
				return ""
			}
			return forValue
		default:
			ok = false
		}
	}
	p.skipElement()
	return ""
}

// token reads an RFC 9110 token, possibly empty.
func (p *sfParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// value reads a token or a quoted string, unquoted, and reports whether it
// was well formed.
func (p *sfParser) value() (string, bool) {
	if !p.eat('"') {
		// RFC 7239 wants ports and IPv6 quoted; take them unquoted too.
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
		case c == '\\' && p.i+1 < len(p.s):
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

// skipElement skips to just past the next ',' that is not inside a quoted
// string, or to the end.
func (p *sfParser) skipElement() {
	quoted := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case quoted && c == '\\':
			p.i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			return
		}
	}
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
		return normalize(a), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a), true
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
