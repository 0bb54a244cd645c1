// Package combinetest helps test the Stores that batch calls with
// package combine.
package combinetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/combine"
)

// Hold makes a call through b whose batch waits for release, so that the
// calls made next queue and then share the next batch. queued returns
// once n calls are queued. release runs at the end of the test if the
// test has not called it.
func Hold[C any](t testing.TB, b *combine.Combiner[C], call C) (release func(), queued func(n int)) {
	t.Helper()
	return hold(t, func(wait func()) {
		b.Do(context.Background(), call, func([]C) { wait() })
	}, b.Queued)
}

// HoldLookups is Hold for the Get calls of l.
func HoldLookups[K comparable, V any](t testing.TB, l *combine.Lookups[K, V]) (release func(), queued func(n int)) {
	t.Helper()
	return hold(t, func(wait func()) {
		var key K
		_, _ = l.Get(context.Background(), key, func(context.Context, []K) (map[K]V, error) {
			wait()
			return nil, nil
		}, func(v V) V { return v }, nil)
	}, l.Queued)
}

// hold runs call in a goroutine, which calls wait inside its batch, and
// returns once wait was called.
func hold(t testing.TB, call func(wait func()), queuedNow func() int) (release func(), queued func(n int)) {
	t.Helper()
	entered, let, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		call(func() {
			close(entered)
			<-let
		})
	}()
	<-entered
	released := false
	release = func() {
		if !released {
			released = true
			close(let)
			<-done
		}
	}
	t.Cleanup(release)
	return release, func(n int) {
		require.Eventually(t, func() bool { return queuedNow() == n }, 10*time.Second, time.Millisecond)
	}
}
