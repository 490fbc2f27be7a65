package httplimit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPrefersJSON(t *testing.T) {
	cases := []struct {
		accept []string
		want   bool
	}{
		{nil, true},
		{[]string{""}, true},
		{[]string{" , ,"}, true},
		{[]string{"*/*"}, true},
		{[]string{"application/json"}, true},
		{[]string{"application/problem+json"}, true},
		{[]string{"Application/Problem+JSON"}, true},
		{[]string{"application/*"}, true},
		{[]string{"application/json;charset=utf-8"}, true},
		{[]string{"text/plain", "application/json"}, true},            // equal weights, two lines
		{[]string{"text/plain;q=0.9, application/json;q=0.9"}, true},  // a tie goes to JSON
		{[]string{"text/html,application/xhtml+xml,*/*;q=0.8"}, true}, // a browser
		{[]string{"application/json;q=0.5, */*"}, false},              // JSON's own range is 0.5, text's is */*'s 1
		{[]string{"application/json;q=0.2, application/problem+json;q=0.7, text/plain;q=0.5"}, true}, // the best of equally specific ranges
		{[]string{"application/json;q=0.3, */*"}, false},                                             // a less specific range does not raise JSON
		{[]string{"text/plain"}, false},
		{[]string{"text/*"}, false},
		{[]string{"text/html"}, false},
		{[]string{"image/png"}, false},
		{[]string{"application/xml"}, false},
		{[]string{"application/json;q=0"}, false},
		{[]string{"*/*;q=0"}, false},
		{[]string{"application/json;q=0.5, text/plain;q=0.6"}, false},
		{[]string{"*/*, application/json;q=0"}, false},
		{[]string{"application/json;q=bogus, text/plain"}, true}, // a malformed weight is 1
		{[]string{"application/json ; Q=0.001, text/plain;q=0"}, true},
		{[]string{";;;,/,*/,/*, application"}, false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, prefersJSON(tc.accept), "%q", tc.accept)
	}
}

func TestParseQValue(t *testing.T) {
	good := map[string]int{"0": 0, "1": 1000, "0.": 0, "1.": 1000, "0.5": 500, "0.25": 250, "0.125": 125, "1.000": 1000, "0.001": 1}
	for s, want := range good {
		q, ok := parseQValue(s)
		assert.True(t, ok, s)
		assert.Equal(t, want, q, s)
	}
	for _, s := range []string{"", "2", "-0", "1.5", "1.001", "0.1234", "0,5", ".5", "0.5x", "1e0", " 1"} {
		_, ok := parseQValue(s)
		assert.False(t, ok, "%q", s)
	}
}
