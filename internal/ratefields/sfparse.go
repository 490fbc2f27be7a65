package ratefields

import (
	"strings"
	"unicode/utf8"
)

// kind is the type of a structured-field bare item (RFC 9651, section
// 3.3), or of an inner list read as a list member.
type kind uint8

const (
	kindInteger kind = iota + 1
	kindDecimal
	kindString
	kindToken
	kindBytes
	kindBoolean
	kindDate
	kindDisplay
	kindInnerList
)

// bareItem is one bare item as read. For an Integer or a Date, n is its
// value; for a Decimal, its value in thousandths; for a Boolean, 1 or 0.
// For a String, s is its text between the quotes, still escaped (see
// unescape); for a Token, the token. Byte Sequences and Display Strings
// are checked but not kept.
type bareItem struct {
	kind kind
	n    int64
	s    string
}

// scanner reads a structured field by the parsing algorithms of RFC 9651
// (section 4.2), strictly: any step that fails there makes a method
// return false, and the whole field is then to be ignored.
type scanner struct {
	s string
	i int
}

// peek returns the next byte, or 0 at the end.
func (p *scanner) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// skipSP discards spaces.
func (p *scanner) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// skipOWS discards spaces and horizontal tabs.
func (p *scanner) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// readList reads the list that the field lines values make together, as
// if joined by ", " (RFC 9651, section 4.2): each line is taken without
// its leading and trailing spaces and tabs, as HTTP takes field values,
// and a line left empty adds no member. It calls f with each member's
// bare item (an inner list's kind is kindInnerList) and the text of its
// parameters, checked, for param to read. It returns false when the field
// is malformed: then f may have been called for the members before the
// fault, which the caller discards.
func readList(values []string, f func(item bareItem, params string)) bool {
	for _, v := range values {
		p := scanner{s: strings.Trim(v, " \t")}
		for p.i < len(p.s) {
			item, params, ok := p.member()
			if !ok {
				return false
			}
			f(item, params)
			p.skipOWS()
			if p.i == len(p.s) {
				break
			}
			if p.s[p.i] != ',' {
				return false
			}
			p.i++
			p.skipOWS()
			if p.i == len(p.s) {
				return false // a trailing comma
			}
		}
	}
	return true
}

// member reads an Item or an Inner List and its parameters (RFC 9651,
// section 4.2.1.1).
func (p *scanner) member() (bareItem, string, bool) {
	if p.peek() != '(' {
		item, ok := p.item()
		if !ok {
			return bareItem{}, "", false
		}
		params, ok := p.params()
		return item, params, ok
	}
	p.i++ // an Inner List, section 4.2.1.2
	for {
		p.skipSP()
		if p.i == len(p.s) {
			return bareItem{}, "", false
		}
		if p.s[p.i] == ')' {
			p.i++
			params, ok := p.params()
			return bareItem{kind: kindInnerList}, params, ok
		}
		if _, ok := p.item(); !ok {
			return bareItem{}, "", false
		}
		if _, ok := p.params(); !ok {
			return bareItem{}, "", false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return bareItem{}, "", false
		}
	}
}

// params reads the parameters of an item or inner list (RFC 9651,
// section 4.2.3.2) and returns their text, from the first ';' on.
func (p *scanner) params() (string, bool) {
	start := p.i
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		if _, ok := p.key(); !ok {
			return "", false
		}
		if p.peek() == '=' {
			p.i++
			if _, ok := p.item(); !ok {
				return "", false
			}
		}
	}
	return p.s[start:p.i], true
}

// key reads a parameter's key (RFC 9651, section 4.2.3.3).
func (p *scanner) key() (string, bool) {
	start := p.i
	if c := p.peek(); !isLCAlpha(c) && c != '*' {
		return "", false
	}
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if !isLCAlpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
	}
	return p.s[start:p.i], true
}

// item reads a bare item (RFC 9651, section 4.2.3.1).
func (p *scanner) item() (bareItem, bool) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), true
	case c == ':':
		return bareItem{kind: kindBytes}, p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return bareItem{kind: kindBoolean, n: int64(p.s[p.i-1] - '0')}, true
		}
		return bareItem{}, false
	case c == '@': // a Date, section 4.2.9
		p.i++
		item, ok := p.number()
		if !ok || item.kind != kindInteger {
			return bareItem{}, false
		}
		return bareItem{kind: kindDate, n: item.n}, true
	case c == '%':
		return bareItem{kind: kindDisplay}, p.display()
	}
	return bareItem{}, false
}

// number reads an Integer or a Decimal (RFC 9651, section 4.2.4): an
// Integer of at most 15 digits, a Decimal of at most 12 digits before its
// point and 1 to 3 after it.
func (p *scanner) number() (bareItem, bool) {
	neg := p.peek() == '-'
	if neg {
		p.i++
	}
	var n int64
	digits, frac := 0, -1 // digits before the point; after it, once seen
scan:
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case isDigit(c):
			n = n*10 + int64(c-'0')
			if frac >= 0 {
				frac++
			} else {
				digits++
			}
		case c == '.' && frac < 0 && digits > 0:
			if digits > 12 {
				return bareItem{}, false
			}
			frac = 0
		default:
			break scan
		}
		if frac < 0 && digits > 15 || frac > 3 {
			return bareItem{}, false
		}
	}
	if digits == 0 || frac == 0 {
		return bareItem{}, false
	}
	if neg {
		n = -n
	}
	if frac < 0 {
		return bareItem{kind: kindInteger, n: n}, true
	}
	for ; frac < 3; frac++ {
		n *= 10
	}
	return bareItem{kind: kindDecimal, n: n}, true
}

// str reads a String (RFC 9651, section 4.2.5): its text between the
// quotes is kept escaped, a backslash before each '"' and '\'.
func (p *scanner) str() (bareItem, bool) {
	p.i++
	start := p.i
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '\\':
			p.i++
			if p.i == len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return bareItem{}, false
			}
		case c == '"':
			p.i++
			return bareItem{kind: kindString, s: p.s[start : p.i-1]}, true
		case c < 0x20 || c > 0x7e:
			return bareItem{}, false
		}
	}
	return bareItem{}, false
}

// unescape returns the text of a String as read by str, its escapes
// removed: s itself when it has none.
func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
		}
		b = append(b, s[i])
	}
	return string(b)
}

// token reads a Token (RFC 9651, section 4.2.6), whose first byte is '*'
// or a letter.
func (p *scanner) token() bareItem {
	start := p.i
	for p.i++; p.i < len(p.s) && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/'); p.i++ {
	}
	return bareItem{kind: kindToken, s: p.s[start:p.i]}
}

// bytes checks a Byte Sequence (RFC 9651, section 4.2.7): base64 between
// colons, its padding optional and its pad bits not checked, as the RFC
// advises.
func (p *scanner) bytes() bool {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return false
	}
	b64 := p.s[p.i : p.i+end]
	p.i += end + 1
	data := strings.TrimRight(b64, "=")
	pad := len(b64) - len(data)
	for i := 0; i < len(data); i++ {
		if c := data[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' {
			return false
		}
	}
	switch {
	case len(data)%4 == 1:
		return false // no whole byte in the last group
	case pad == 0:
		return true
	}
	return pad <= 2 && len(b64)%4 == 0 && pad == (4-len(data)%4)%4
}

// display checks a Display String (RFC 9651, section 4.2.10): printable
// ASCII between '%"' and '"', with each byte beyond it written as '%' and
// two lower-case hex digits, which must make UTF-8.
func (p *scanner) display() bool {
	p.i++
	if p.peek() != '"' {
		return false
	}
	p.i++
	var utf []byte
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c < 0x20 || c > 0x7e:
			return false
		case c == '%':
			if p.i+2 >= len(p.s) {
				return false
			}
			h, l := lowerHex(p.s[p.i+1]), lowerHex(p.s[p.i+2])
			if h < 0 || l < 0 {
				return false
			}
			utf = append(utf, byte(h<<4|l))
			p.i += 2
		case c == '"':
			p.i++
			return utf8.Valid(utf)
		default:
			utf = append(utf, c)
		}
	}
	return false
}

// param returns the value of parameter key in params, text that params
// has checked: the last one when key is there more than once (RFC 9651,
// section 4.2.3.2), a Boolean true for a key without a value. It reports
// false when key is not there.
func param(params, key string) (bareItem, bool) {
	var v bareItem
	found := false
	p := scanner{s: params}
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		k, _ := p.key()
		item := bareItem{kind: kindBoolean, n: 1}
		if p.peek() == '=' {
			p.i++
			item, _ = p.item()
		}
		if k == key {
			v, found = item, true
		}
	}
	return v, found
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }

// isTChar reports whether c is a tchar of RFC 9110, section 5.6.2.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// lowerHex returns the value of a lower-case hex digit, or -1.
func lowerHex(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}
