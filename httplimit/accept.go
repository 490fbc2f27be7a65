package httplimit

import "strings"

// prefersJSON reports whether an answer should be an application/problem+json
// document rather than text/plain, given the request's Accept field values.
//
// Each of the two types gets the weight (q) of the most specific media range
// that matches it: application/problem+json or application/json, then
// application/*, then */* for JSON; text/plain, then text/*, then */* for
// text. JSON is chosen when its weight is above 0 and not below text's, so a
// request with no Accept field, or with "*/*" (curl's default), gets JSON,
// and one that asks only for text/plain, or for neither type, gets text. A
// malformed weight counts as 1. It never fails, whatever the input.
func prefersJSON(accept []string) bool {
	var js, txt match
	ranges := 0
	for _, field := range accept {
		for field != "" {
			var item string
			item, field, _ = strings.Cut(field, ",")
			mediaType, params, _ := strings.Cut(item, ";")
			mediaType = trimOWS(mediaType)
			if mediaType == "" {
				continue
			}
			ranges++
			q := weight(params)
			typ, sub, _ := strings.Cut(mediaType, "/")
			switch {
			case typ == "*" && sub == "*":
				js.offer(1, q)
				txt.offer(1, q)
			case strings.EqualFold(typ, "application"):
				switch {
				case sub == "*":
					js.offer(2, q)
				case strings.EqualFold(sub, "problem+json"), strings.EqualFold(sub, "json"):
					js.offer(3, q)
				}
			case strings.EqualFold(typ, "text"):
				switch {
				case sub == "*":
					txt.offer(2, q)
				case strings.EqualFold(sub, "plain"):
					txt.offer(3, q)
				}
			}
		}
	}
	if ranges == 0 {
		return true // no Accept field: any type will do
	}
	return js.q > 0 && js.q >= txt.q
}

// match is the best media range found so far for one type: how specific it
// is (0 for none) and its weight in thousandths.
type match struct {
	specificity int
	q           int
}

// offer considers a range of the given specificity and weight: a more
// specific range replaces the one found so far, an equally specific one
// raises its weight.
func (m *match) offer(specificity, q int) {
	switch {
	case specificity > m.specificity:
		m.specificity, m.q = specificity, q
	case specificity == m.specificity:
		m.q = max(m.q, q)
	}
}

// weight returns the q parameter among a media range's parameters in
// thousandths: 1000 when absent or malformed.
func weight(params string) int {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		name, value, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(trimOWS(name), "q") {
			continue
		}
		if q, ok := parseQValue(trimOWS(value)); ok {
			return q
		}
		return 1000
	}
	return 1000
}

// parseQValue parses an RFC 9110 qvalue, "0" to "1" with up to three
// decimals, into thousandths.
func parseQValue(s string) (int, bool) {
	if s == "" || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	q := int(s[0]-'0') * 1000
	rest := s[1:]
	if rest == "" {
		return q, true
	}
	if rest[0] != '.' || len(rest) > 4 {
		return 0, false
	}
	scale := 100
	for i := 1; i < len(rest); i++ {
		c := rest[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		q += int(c-'0') * scale
		scale /= 10
	}
	if q > 1000 {
		return 0, false
	}
	return q, true
}

// trimOWS trims spaces and tabs from both ends of s.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}
