package redisbatch

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOnceArgIsWrittenOnceUnlessTheServerRefusedItUnrun(t *testing.T) {
	cmd := redis.NewCmd(context.Background(), "evalsha")
	a := newOnceArg(12)
	a.cmd = cmd
	text, err := a.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, "12", string(text))
	assert.Equal(t, "12", a.String())

	// No reply (a timeout, a broken connection): the server may have run it.
	_, err = a.MarshalBinary()
	require.ErrorIs(t, err, ErrNotResent)

	// A cluster redirect or a server not ready: it did not run.
	for _, reply := range []string{"MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381", "TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down", "LOADING Redis is loading the dataset in memory", "READONLY You can't write against a read only replica.",
		"MASTERDOWN Link with MASTER is down", "ERR max number of clients reached"} {
		cmd.SetErr(redisReplyError(reply))
		text, err = a.MarshalBinary()
		require.NoError(t, err, reply)
		assert.Equal(t, "12", string(text))
		require.NoError(t, cmd.Err(), "%s: a write after an unrun answer needs an unrun answer of its own", reply)
		_, err = a.MarshalBinary()
		require.ErrorIs(t, err, ErrNotResent, reply)
	}

	// Any other error, a reply of the script's or not, may follow a run.
	for _, err := range []error{io.EOF, errors.New("MOVED but not a reply"), redisReplyError("ERR user_script:1: Script attempted to access a non local key"), redisReplyError("OOM command not allowed")} {
		cmd.SetErr(err)
		_, got := a.MarshalBinary()
		require.ErrorIs(t, got, ErrNotResent, "%v", err)
	}

	// Without a command to ask, never twice.
	b := newOnceArg(1)
	_, err = b.MarshalBinary()
	require.NoError(t, err)
	_, err = b.MarshalBinary()
	require.ErrorIs(t, err, ErrNotResent)
}

// redisReplyError is an error reply as go-redis returns one.
type redisReplyError string

func (e redisReplyError) Error() string { return string(e) }
func (redisReplyError) RedisError()     {}
