package ratelimit

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMustReturnsTheValueWithoutAnError(t *testing.T) {
	assert.Equal(t, 7, Must(7, nil))
}

func TestMustPanicsWithTheConstructorsError(t *testing.T) {
	_, err := NewTokenBucket(PerSecond(5), 0)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.PanicsWithError(t, err.Error(), func() { Must(NewTokenBucket(PerSecond(5), 0)) })
	assert.PanicsWithValue(t, errors.ErrUnsupported, func() { Must(0, errors.ErrUnsupported) })
}
