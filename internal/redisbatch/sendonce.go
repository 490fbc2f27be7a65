package redisbatch

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ErrNotResent is the error of a script call that go-redis tried to send a
// second time after a failure that came once the call had been sent (a read
// that timed out, a connection that broke): the server may have run it, and
// a second run would decide its requests twice.
var ErrNotResent = errors.New("the Redis client tried to send the script call again after it had been sent; " +
	"it was not sent again, since the server may already have decided it")

// onceArg is the first argument of a batch script call, its number of
// requests, written so that go-redis sends the call at most once: go-redis
// writes a command's arguments each time it sends it, and retries a command
// whose connection failed after it was written (MaxRetries), though the
// server may have run it. onceArg lets a call be written again only when
// the server answered the earlier try with an error that says it did not
// run the call (unrun) and go-redis set that error on the command before
// trying again, as a cluster client does when it follows MOVED or ASK to
// another node. Any other second write fails with ErrNotResent, which
// go-redis returns without retrying; so a retry of go-redis's within one
// client, after LOADING or TRYAGAIN as after a timeout, becomes an error.
//
// cmd is the call's command; nil when the call is not made through a
// command of ours, and then no second write is allowed. It is safe for
// concurrent use.
type onceArg struct {
	text []byte // in buf
	buf  [20]byte
	cmd  *redis.Cmd
	sent atomic.Bool
}

func newOnceArg(requests int) *onceArg {
	a := &onceArg{}
	a.text = strconv.AppendInt(a.buf[:0], int64(requests), 10)
	return a
}

// MarshalBinary returns the argument's text the first time, and after an
// unrun answer; ErrNotResent otherwise.
func (a *onceArg) MarshalBinary() ([]byte, error) {
	if a.sent.Swap(true) {
		if a.cmd == nil || !unrun(a.cmd.Err()) {
			return nil, ErrNotResent
		}
		a.cmd.SetErr(nil) // the next second write needs an unrun answer of its own
	}
	return a.text, nil
}

// String returns the argument's text, for hooks and logs that print a
// command.
func (a *onceArg) String() string { return string(a.text) }

// unrunPrefixes are the prefixes of the error replies with which a Redis
// server refuses a command without running it, and after which go-redis may
// send the command again: to the slot's new owner, or once the server is
// ready.
var unrunPrefixes = [...]string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN ", "LOADING ", "READONLY ", "MASTERDOWN ", "NOREPLICAS "}

// unrun reports whether err is a reply with which the server refused a
// command without running it.
func unrun(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	for _, p := range unrunPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.HasPrefix(msg, "ERR max number of clients reached")
}
