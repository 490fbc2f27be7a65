package outbound

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// FuzzObserveAnyFields feeds an Upstream answers whose rate-limit fields
// hold anything: nothing panics, a pause is never negative nor longer than
// MaxPause, and a learned limit is never above the limiter's own.
func FuzzObserveAnyFields(f *testing.F) {
	f.Add(429, `"a";r=0;t=5`, `"a";q=5;w=1`, "7", "0", "1796558430", "Sun, 06 Dec 2026 12:00:00 GMT")
	f.Add(200, `"a";r=1;t=1, "b";r=0`, `"a";q=100;w=1;qu="tokens"`, "junk", "-1", "6m0s", "")
	f.Add(503, ``, `"a";q=999999999999999;w=999999999999999`, "31536000", "x", "1.5", "yesterday")
	f.Fuzz(func(t *testing.T, status int, rl, policy, retryAfter, remaining, reset, date string) {
		ft := newFakeTime()
		store := NewMemoryStore(ft.clock)
		u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store, MaxPause: time.Minute})
		h := http.Header{}
		for k, v := range map[string]string{
			"Ratelimit": rl, "Ratelimit-Policy": policy, "Retry-After": retryAfter,
			"X-Ratelimit-Remaining": remaining, "X-Ratelimit-Reset": reset, "Date": date,
			"X-Ratelimit-Remaining-Tokens": remaining, "X-Ratelimit-Reset-Tokens": reset,
		} {
			h.Set(k, v)
		}
		ctx := context.Background()
		p, err := u.Admit(ctx, "api", 1)
		if err != nil {
			t.Fatal(err)
		}
		l := u.Observe(ctx, p, Answer{Status: status, Header: h})
		if l.Pause < 0 || l.Pause > time.Minute {
			t.Fatalf("a pause of %v", l.Pause)
		}
		st, err := store.Load(ctx, "api")
		if err != nil {
			t.Fatal(err)
		}
		if st.Pause < 0 || st.Pause > time.Minute {
			t.Fatalf("a stored pause of %v", st.Pause)
		}
		if p := u.learned(st.Policy); p.Limit > 10 || p.Limit < 0 || p.Limit > 0 && p.Window < time.Second*time.Duration(p.Limit)/10 {
			t.Fatalf("a learned limit of %d per %v above 10 per second", p.Limit, p.Window)
		}
	})
}
