package ratelimit

import (
	"strconv"
	"sync/atomic"
)

// windowSegs gives the seg of a window, "<window>:" in the window's unit,
// which follows a prefix in the key of a key whose counts are of windows
// of one length (a sliding counter's built WithPolicyFunc), remembering
// the last one it made, so that a limiter whose keys mostly share one
// window makes it once. Its zero value is ready; it is safe for
// concurrent use.
type windowSegs struct {
	last atomic.Pointer[windowSeg]
}

// windowSeg is one window's seg.
type windowSeg struct {
	window int64
	seg    string
}

// of returns the seg of window.
func (s *windowSegs) of(window int64) string {
	if w := s.last.Load(); w != nil && w.window == window {
		return w.seg
	}
	w := &windowSeg{window: window, seg: strconv.FormatInt(window, 10) + ":"}
	s.last.Store(w)
	return w.seg
}
