package combine_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamhooks/webhooks/internal/combine"
	"github.com/streamhooks/webhooks/internal/combine/combinetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// call is a test call: it records the batch that ran it.
type call struct {
	ctx   context.Context
	n     int
	batch int // size of the batch that ran it
	err   error
}

func (c *call) Context() context.Context { return c.ctx }
func (c *call) Fail(err error)           { c.err = err }

// run records each call's batch size.
func run(calls []*call) {
	for _, c := range calls {
		c.batch = len(calls)
	}
}

// Calls made while a batch runs wait, and then run together in the next
// batch, each once.
func TestQueuedCallsShareTheNextBatch(t *testing.T) {
	var b combine.Combiner[*call]
	release, queued := combinetest.Hold(t, &b, &call{ctx: t.Context()})
	calls := make([]*call, 5)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = &call{ctx: t.Context(), n: i}
		wg.Go(func() { require.True(t, b.Do(t.Context(), calls[i], run)) })
		queued(i + 1)
	}
	release()
	wg.Wait()
	for _, c := range calls {
		require.Equal(t, len(calls), c.batch, "call %d", c.n)
	}
	require.Zero(t, b.Queued())
	// The next call leads a batch of its own at once.
	alone := &call{ctx: t.Context()}
	require.True(t, b.Do(t.Context(), alone, run))
	require.Equal(t, 1, alone.batch)
}

// A call whose caller gives up while it is queued leaves the queue: Do
// returns false and the call never runs.
func TestCallLeavesTheQueueWhenItsContextEnds(t *testing.T) {
	var b combine.Combiner[*call]
	release, queued := combinetest.Hold(t, &b, &call{ctx: t.Context()})
	ctx, cancel := context.WithCancel(t.Context())
	c := &call{ctx: ctx}
	done := make(chan bool)
	go func() { done <- b.Do(ctx, c, run) }()
	queued(1)
	cancel()
	require.False(t, <-done)
	require.Zero(t, b.Queued())
	release()
	require.Zero(t, c.batch, "it never ran")
}

// Begin fails the calls whose callers gave up, and its context goes on
// until the last of the others gives up too.
func TestBeginFailsGoneCallersAndLastsWhileOneWaits(t *testing.T) {
	gone, cancelGone := context.WithCancel(t.Context())
	cancelGone()
	a, cancelA := context.WithCancel(t.Context())
	b, cancelB := context.WithCancel(t.Context())
	calls := []*call{{ctx: gone, n: 0}, {ctx: a, n: 1}, {ctx: b, n: 2}}
	waiting, ctx, stop := combine.Begin(calls)
	defer stop()
	require.Equal(t, calls[1:], waiting)
	require.True(t, errors.Is(calls[0].err, context.Canceled))
	cancelA()
	require.NoError(t, ctx.Err(), "one caller still waits")
	cancelB()
	<-ctx.Done()
}
