package httplimit

import (
	"encoding/json"
	"net/http"

	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// QuotaExceededType is the problem type of the draft
// draft-ietf-httpapi-ratelimit-headers-11 (sections 5.1 and 10.2.1) for
// requests that exceed a quota policy, registered for 429 Too Many
// Requests: the type of the 429 answers' problem documents.
const QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// TemporaryReducedCapacityType is the problem type of the draft
// draft-ietf-httpapi-ratelimit-headers-11 (sections 5.2 and 10.2.2) for
// requests that cannot be served for a temporary reduction of the
// server's capacity, registered for 503 Service Unavailable: the type of
// the 503 answer to a failure of the limiter's backend under
// WithFailClosed, which serves no request it cannot limit.
const TemporaryReducedCapacityType = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

// The titles of the draft's problem types, as registered: RFC 9457 asks
// that a type's title not change from one occurrence to the next.
const (
	quotaExceededTitle   = "Quota Exceeded"
	reducedCapacityTitle = "Temporary Reduced Capacity"
)

// problem is an RFC 9457 problem document, with the draft's
// violated-policies extension member.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// reply is a canned answer: a status and the same message as a problem
// document and as plain text, built once at construction. It is immutable.
type reply struct {
	status int
	json   []byte
	text   []byte
}

// newReply builds the answer p. Should p fail to encode as JSON (it cannot:
// its fields are strings and an int), the reply is text only.
func newReply(p problem) reply {
	r := reply{status: p.Status, text: []byte(p.Title + ": " + p.Detail + "\n")}
	if js, err := json.Marshal(p); err == nil {
		r.json = append(js, '\n')
	}
	return r
}

// The Content-Type values of the canned answers.
const (
	problemJSON = "application/problem+json"
	plainText   = "text/plain; charset=utf-8"
)

// write answers r with the reply, as JSON or text as prefersJSON decides
// from r's Accept field. Fields already set on w.Header() are kept.
func (p *reply) write(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	body := p.text
	contentType := plainText
	if p.json != nil && prefersJSON(r.Header["Accept"]) {
		body, contentType = p.json, problemJSON
	}
	h["Content-Type"] = []string{contentType}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	delete(h, "Content-Length")
	w.WriteHeader(p.status)
	_, _ = w.Write(body)
}

// replies are a Middleware's canned answers that name no policy. The 429
// and 413 answers, which name the policy that bound a decision, belong to
// its format.
type replies struct {
	unavailable     reply // 503: the limiter's backend failed
	unknown         reply // 503: the request's limit is not known
	keyError        reply // 500: a KeyFunc's or CostFunc's failure
	unauthenticated reply // 401: a request without its credential
	badKey          reply // 400: a request without its key
	badCost         reply // 400: a request whose cost cannot be used
	longKey         reply // 400: a request whose key the limiter refuses as too long
}

// newDenied returns the 429 answer to a request denied by policy (the
// first for a single-policy limiter), which limits requests in flight
// when inFlight is true.
func newDenied(policy string, inFlight bool) reply {
	detail := "The request exceeds the rate limit; retry after the number of seconds in Retry-After."
	if inFlight {
		detail = "As many requests as the limit allows are in flight; retry after the number of seconds in Retry-After, or sooner once one of them ends."
	}
	return newReply(problem{
		Type:             QuotaExceededType,
		Title:            quotaExceededTitle,
		Status:           http.StatusTooManyRequests,
		Detail:           detail,
		ViolatedPolicies: []string{policy},
	})
}

// newTooLarge returns the 413 answer to a request whose cost exceeds the
// limit of policy. The draft registers no problem type for 413, and its
// quota-exceeded is registered for 429, so the document is of type
// about:blank, whose title is the status's, and names the policy in its
// detail.
func newTooLarge(policy string) reply {
	return newReply(problem{
		Type:   "about:blank",
		Title:  "Content Too Large",
		Status: http.StatusRequestEntityTooLarge,
		Detail: "The request costs more than the rate limit policy " + ratefields.Quote(policy) + " allows at once, so it can never succeed; that policy's q in RateLimit-Policy (or RateLimit-Limit) gives the most a request may cost.",
	})
}

// newReplies builds the canned answers that name no policy.
func newReplies() replies {
	return replies{
		unavailable: newReply(problem{
			Type:   TemporaryReducedCapacityType,
			Title:  reducedCapacityTitle,
			Status: http.StatusServiceUnavailable,
			Detail: "Rate limiting is unavailable; retry after the number of seconds in Retry-After.",
		}),
		unknown: newReply(problem{
			Type:   "about:blank",
			Title:  "Service Unavailable",
			Status: http.StatusServiceUnavailable,
			Detail: "The request's rate limit cannot be determined; retry after the number of seconds in Retry-After.",
		}),
		keyError: newReply(problem{
			Type:   "about:blank",
			Title:  "Internal Server Error",
			Status: http.StatusInternalServerError,
			Detail: "The request could not be matched to a rate limit.",
		}),
		unauthenticated: newReply(problem{
			Type:   "about:blank",
			Title:  "Unauthorized",
			Status: http.StatusUnauthorized,
			Detail: "The request does not carry the credential its rate limit is keyed by.",
		}),
		badKey: newReply(problem{
			Type:   "about:blank",
			Title:  "Bad Request",
			Status: http.StatusBadRequest,
			Detail: "The request does not carry what its rate limit is keyed by.",
		}),
		badCost: newReply(problem{
			Type:   "about:blank",
			Title:  "Bad Request",
			Status: http.StatusBadRequest,
			Detail: "The request's cost is not valid.",
		}),
		longKey: newReply(problem{
			Type:   "about:blank",
			Title:  "Bad Request",
			Status: http.StatusBadRequest,
			Detail: "The request's rate-limit key is longer than its rate limit takes.",
		}),
	}
}
