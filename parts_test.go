package webhooks_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/memstore"
)

// Each background part of the engine starts once however often Start is
// called, stops once however often Stop is, and does nothing on a Stop
// before Start; once stopped, none of its goroutines is left. A part that
// started its goroutines again on a second Start would leave the second
// set running past Stop, and goleak would find them.
func TestPartsStartAndStopIdempotently(t *testing.T) {
	newLoaded := func(t *testing.T) *webhooks.Engine {
		e, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithClock(mockclock.New()),
			webhooks.WithCallbackBaseURL(callbackBase))
		require.NoError(t, err)
		require.NoError(t, webhooks.LoadForBench(context.Background(), e))
		return e
	}
	names := slices.Sorted(maps.Keys(webhooks.Parts(newLoaded(t))))
	require.Len(t, names, 9)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			p := webhooks.Parts(newLoaded(t))[name]
			p.Stop() // before Start: nothing to stop
			ctx := context.Background()
			p.Start(ctx)
			p.Start(ctx)
			p.Stop()
			p.Stop()
		})
	}
}
