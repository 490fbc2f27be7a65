package redisbatch

import (
	"strconv"
	"strings"
)

// StoredKey returns the Redis key of a limiter's key: prefix, seg, then
// key in a hash tag, so that every Redis key made of one key is in the
// hash slot key alone is in (prefix and seg hold no braces), whatever the
// limiter, and a Composite's parts on one key can be decided by one script
// call on a cluster. The name is one of three forms, which no two keys
// share:
//   - "{" + key + "}", for a key that is not empty and has no '}' (and so
//     no hash tag of its own): most keys;
//   - key as it is, for a key with a hash tag of its own ("{acme}:alice")
//     that is not of the first form or the third;
//   - "{" + tag + "}#" + key, for any other key: one whose hash tag opens
//     it and either ends it or is followed by '#' ("{acme}", "{a}#b"), tag
//     being its hash tag, and one with no hash tag that braces cannot hold
//     (empty, or with a '}'), tag being then three letters or digits in
//     its slot (see slotTags).
//
// A name of the first form has its first '}' last; one of the third, its
// first '}' followed by '#'; one of the second, neither, when it starts
// with '{': so the form, and key, can be read back from any name.
func StoredKey(prefix, seg, key string) string {
	if key != "" && strings.IndexByte(key, '}') < 0 {
		return prefix + seg + "{" + key + "}"
	}
	if hashTag(key) != key {
		// key has a hash tag: key[j] is the first '}' after its first '{'.
		if key[0] != '{' {
			return prefix + seg + key
		}
		j := strings.IndexByte(key, '}')
		if j < len(key)-1 && key[j+1] != '#' {
			return prefix + seg + key
		}
		return prefix + seg + key[:j+1] + "#" + key
	}
	tag := slotTags[HashSlot(key)]
	return prefix + seg + "{" + string(tag[:]) + "}#" + key
}

// KeyOf returns the key whose form in a stored name (what StoredKey
// writes after prefix and seg) is form, as StoredKey's forms say it can be
// read back.
func KeyOf(form string) string {
	if form == "" || form[0] != '{' {
		return form
	}
	j := strings.IndexByte(form, '}')
	switch {
	case j < 0:
		return form
	case j == len(form)-1:
		return form[1:j]
	case form[j+1] == '#':
		return form[j+2:]
	}
	return form
}

// FormAfter returns the form of a stored name rest, what StoredKey wrote
// after prefix, whose seg holds colons colons: rest after its first
// colons colons (a seg ends with one and holds no other but its fields').
func FormAfter(rest string, colons int) string {
	for range colons {
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			return rest
		}
		rest = rest[i+1:]
	}
	return rest
}

// tokenPrefix starts the name of every Redis key that remembers a token,
// so that no limiter key (which starts with the limiter's prefix) can be
// one.
const tokenPrefix = "ratelimit:settled:"

// tokenKey returns the name of the Redis key that remembers token for the
// Redis key key: tokenPrefix, the length of key in decimal, ":", key, ":"
// and token, so that no two (key, token) pairs share a name (the length
// says where key ends). It is in key's hash slot: when key has a hash
// tag, that is the name's first (nothing before key has a brace);
// otherwise "{" + tag + "}", tag being three letters or digits in key's
// slot (see slotTags), comes first, so that braces in key or token
// cannot make another. The two forms start apart, with a digit and with
// "{".
func tokenKey(key, token string) string {
	n := strconv.Itoa(len(key))
	if hashTag(key) != key {
		return tokenPrefix + n + ":" + key + ":" + token
	}
	tag := slotTags[HashSlot(key)]
	return tokenPrefix + "{" + string(tag[:]) + "}" + n + ":" + key + ":" + token
}
