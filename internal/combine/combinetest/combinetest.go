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
	entered, let, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		b.Do(context.Background(), call, func([]C) {
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
		require.Eventually(t, func() bool { return b.Queued() == n }, 10*time.Second, time.Millisecond)
	}
}
