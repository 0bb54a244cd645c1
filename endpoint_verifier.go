package webhooks

import (
	"context"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// verifier is the part that sends pending subscriptions' challenges as
// they come due: every challengeTick, and at once when kicked.
type verifier struct {
	startstop.Base
	clock clock.Clock
	kick  chan struct{}
	// due sends the challenges due; checked tells a test it returned.
	due     func(ctx context.Context)
	checked func()
}

// Start starts the verifier, unless it runs already.
func (v *verifier) Start(ctx context.Context) {
	run, ok, stopped := v.StartInit(ctx)
	if !ok {
		return
	}
	// Made before Start returns, so no tick of a mock clock is missed.
	ticker := v.clock.Ticker(challengeTick)
	go func() {
		defer stopped()
		defer ticker.Stop()
		for {
			select {
			case <-run.Done():
				return
			case <-ticker.C:
			case <-v.kick:
			}
			v.due(run)
			v.checked()
		}
	}()
}

// kickNow has the verifier look for due challenges now.
func (v *verifier) kickNow() {
	select {
	case v.kick <- struct{}{}:
	default:
	}
}
