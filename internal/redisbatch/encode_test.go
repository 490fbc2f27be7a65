package redisbatch

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// TestCompactFormSendsOneCostForABatchOfEqualCosts checks the arguments a
// batch of plain Allows is sent with: one cost when there are several and
// all are equal, a cost per request otherwise.
func TestCompactFormSendsOneCostForABatchOfEqualCosts(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	s := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(TokenBucket, 5, 1000)}, Coalesce: true})
	batch := func(costs ...int) []*Request {
		b := make([]*Request, len(costs))
		for i, n := range costs {
			b[i] = &Request{Ctx: context.Background(), Key: "k" + strconv.Itoa(i), N: n}
		}
		return b
	}
	// ARGV after the keys: R, then S and the limit, then the costs.
	argv := func(b []*Request) []any {
		args := s.command(context.Background(), b, "evalsha", s.script.sha).Args()
		return args[3+len(b):]
	}
	for _, tc := range []struct {
		costs []int
		want  []any
	}{
		{[]int{1, 1, 1}, []any{"-3", 1, "t", int64(5), int64(1000), 1}},
		{[]int{2, 1, 2}, []any{"-3", 1, "t", int64(5), int64(1000), 2, 1, 2}},
		{[]int{3}, []any{"-1", 1, "t", int64(5), int64(1000), 3}},
	} {
		got := argv(batch(tc.costs...))
		got[0] = fmt.Sprint(got[0]) // the once-only first argument, as it is written
		assert.Equal(t, tc.want, got, "costs %v", tc.costs)
	}
}
