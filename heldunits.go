package ratelimit

import (
	"cmp"
	"slices"
)

// heldUnits is one key's leases in a Concurrency: the units in flight.
// Times are the limiter's clock readings in ns. A lease whose expiry is at
// or before now holds nothing, whether or not it has been swept yet. The
// zero value holds nothing, as an absent key does.
type heldUnits struct {
	units   int64       // the sum of leases' units
	leases  []heldLease // in no order; its array is reused while the key stays
	soonest int64       // the earliest expiry of a lease, or earlier: a sweep is due at it
	latest  int64       // the latest expiry of a lease, exactly; 0 when there is none
}

// heldLease is one lease of a key.
type heldLease struct {
	id     uint64
	units  int64
	expiry int64
}

// sweep drops the leases that have expired at now.
func (h *heldUnits) sweep(now int64) {
	if len(h.leases) == 0 || now < h.soonest {
		return
	}
	kept := h.leases[:0]
	h.units, h.soonest, h.latest = 0, 0, 0
	for _, l := range h.leases {
		if l.expiry > now {
			kept = append(kept, l)
			h.note(l)
		}
	}
	clear(h.leases[len(kept):])
	h.leases = kept
}

// note counts l in h's units and expiries.
func (h *heldUnits) note(l heldLease) {
	if h.units == 0 || l.expiry < h.soonest {
		h.soonest = l.expiry
	}
	h.units += l.units
	h.latest = max(h.latest, l.expiry)
}

// free returns the units a limit of limit leaves free, never below 0.
func (h *heldUnits) free(limit int64) int64 { return max(limit-h.units, 0) }

// take adds a lease. The caller has swept h and checked that its units fit.
func (h *heldUnits) take(l heldLease) {
	h.leases = append(h.leases, l)
	h.note(l)
}

// find returns the index of the lease id, or -1.
func (h *heldUnits) find(id uint64) int {
	for i := range h.leases {
		if h.leases[i].id == id {
			return i
		}
	}
	return -1
}

// remove drops the lease at i and returns it.
func (h *heldUnits) remove(i int) heldLease {
	l := h.leases[i]
	last := len(h.leases) - 1
	h.leases[i] = h.leases[last]
	h.leases[last] = heldLease{}
	h.leases = h.leases[:last]
	h.units -= l.units
	if len(h.leases) == 0 {
		h.units, h.soonest, h.latest = 0, 0, 0
	} else if l.expiry == h.latest {
		h.latest = 0
		for _, o := range h.leases {
			h.latest = max(h.latest, o.expiry)
		}
	}
	return l
}

// renew moves the expiry of the lease at i to expiry.
func (h *heldUnits) renew(i int, expiry int64) {
	old := h.leases[i].expiry
	h.leases[i].expiry = expiry
	h.soonest = min(h.soonest, expiry)
	if expiry >= h.latest {
		h.latest = expiry
	} else if old == h.latest {
		h.latest = 0
		for _, o := range h.leases {
			h.latest = max(h.latest, o.expiry)
		}
	}
}

// wait returns the time from now until enough leases have expired for n
// units to fit within limit, were none released or extended: the earliest
// expiry of a lease when one is enough. The caller has swept h at now and
// found that n does not fit; n <= limit. It orders h's leases by expiry.
func (h *heldUnits) wait(limit, n, now int64) int64 {
	ls := h.leases
	slices.SortFunc(ls, func(a, b heldLease) int { return cmp.Compare(a.expiry, b.expiry) })
	free := limit - h.units
	for _, l := range ls {
		free += l.units
		if free >= n {
			return l.expiry - now
		}
	}
	return h.latest - now
}
