package ratefields

// PolicyItem is one member of RateLimit-Policy as read
// (draft-ietf-httpapi-ratelimit-headers-11, section 3.1).
type PolicyItem struct {
	// Name is the policy's name, a String (unescaped) or a Token.
	Name string
	// Q is q, the quota, >= 0.
	Q int64
	// W is w, the time window in seconds, > 0; 0 when the item has none.
	W int64
	// QU is qu, the quota unit; "" when the item has none, which means
	// the draft's default unit, "requests".
	QU string
}

// LimitItem is one service limit item of RateLimit as read
// (draft-ietf-httpapi-ratelimit-headers-11, section 4.1).
type LimitItem struct {
	// Name is the policy's name, a String (unescaped) or a Token.
	Name string
	// R is r, the remaining quota, >= 0.
	R int64
	// T is t, the effective window in seconds, >= 0; -1 when the item has
	// none.
	T int64
}

// ParsePolicies reads RateLimit-Policy, whose field lines are values, as
// one structured-field list (RFC 9651): the members whose name is a String
// or a Token, whose q is an Integer >= 0, whose w, when there, is an
// Integer > 0 and whose qu, when there, is a non-empty String, in order.
// Other members are skipped, and so are parameters the draft does not
// define (pk among them); a parameter given twice counts by its last
// value. It returns nil when the field is malformed, which RFC 9651 asks
// to ignore as a whole, or has no member to keep. It allocates the slice
// returned, and the names that hold escapes.
func ParsePolicies(values []string) []PolicyItem {
	var out []PolicyItem
	ok := readList(values, func(item bareItem, params string) {
		name, ok := itemName(item)
		if !ok {
			return
		}
		q, ok := param(params, "q")
		if !ok || q.kind != kindInteger || q.n < 0 {
			return
		}
		pi := PolicyItem{Name: name, Q: q.n}
		if w, ok := param(params, "w"); ok {
			if w.kind != kindInteger || w.n <= 0 {
				return
			}
			pi.W = w.n
		}
		if qu, ok := param(params, "qu"); ok {
			if qu.kind != kindString || qu.s == "" {
				return
			}
			pi.QU = unescape(qu.s)
		}
		out = append(out, pi)
	})
	if !ok {
		return nil
	}
	return out
}

// ParseLimits reads RateLimit, whose field lines are values, as one
// structured-field list (RFC 9651): the service limit items whose name is
// a String or a Token, whose r is an Integer >= 0 and whose t, when there,
// is an Integer >= 0, in order. Other members are skipped, and so are
// parameters the draft does not define (pk among them); a parameter given
// twice counts by its last value. It returns nil when the field is
// malformed, which RFC 9651 asks to ignore as a whole, or has no member
// to keep. It allocates the slice returned, and the names that hold
// escapes.
func ParseLimits(values []string) []LimitItem {
	var out []LimitItem
	ok := readList(values, func(item bareItem, params string) {
		name, ok := itemName(item)
		if !ok {
			return
		}
		r, ok := param(params, "r")
		if !ok || r.kind != kindInteger || r.n < 0 {
			return
		}
		li := LimitItem{Name: name, R: r.n, T: -1}
		if t, ok := param(params, "t"); ok {
			if t.kind != kindInteger || t.n < 0 {
				return
			}
			li.T = t.n
		}
		out = append(out, li)
	})
	if !ok {
		return nil
	}
	return out
}

// itemName returns the name a list member gives its policy: a String's
// text, unescaped, or a Token. It reports false for other members.
func itemName(item bareItem) (string, bool) {
	switch item.kind {
	case kindString:
		return unescape(item.s), true
	case kindToken:
		return item.s, true
	}
	return "", false
}
