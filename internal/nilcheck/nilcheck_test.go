package nilcheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIsNilSeesNilsInsideInterfaces(t *testing.T) {
	var p *int
	var m map[string]int
	var s []int
	var c chan int
	var f func()
	n := 1
	tests := []struct {
		name string
		v    any
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil pointer", p, true},
		{"nil map", m, true},
		{"nil slice", s, true},
		{"nil chan", c, true},
		{"nil func", f, true},
		{"pointer", &n, false},
		{"int", 0, false},
		{"string", "", false},
		{"struct", struct{}{}, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, IsNil(tt.v), tt.name)
	}
}
