// Package startstop gives a background part of the engine an idempotent
// Start and Stop, after River's package of the same name: Start twice
// starts once, Stop twice stops once, and Stop before Start does nothing.
package startstop

import (
	"context"
	"sync"
)

// Base is embedded in a part that runs in the background. The part's
// Start calls StartInit first, returns at once unless it should start, and
// otherwise calls the returned stopped function once every goroutine it
// started has ended. Stop cancels the part's context and waits for that.
// The zero value is a part that has not started.
type Base struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{}
}

// StartInit begins a start. It returns the context the part runs in,
// cancelled by Stop, whether the part should start (false while it runs
// already), and the function the part calls once it has stopped, or has
// failed to start.
func (b *Base) StartInit(ctx context.Context) (context.Context, bool, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped != nil {
		return ctx, false, nil
	}
	ctx, b.cancel = context.WithCancel(ctx)
	stopped := make(chan struct{})
	b.stopped = stopped
	return ctx, true, sync.OnceFunc(func() { close(stopped) })
}

// Stop cancels the part's context and waits until it has stopped. It
// does nothing if the part is not running. A stopped part may start again.
func (b *Base) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped == nil {
		return
	}
	b.cancel()
	<-b.stopped
	b.cancel, b.stopped = nil, nil
}

// Stopped returns a channel closed once the running part has stopped; nil
// if it is not running.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

// StopAll stops every part at once, and waits until all have stopped.
func StopAll(parts ...interface{ Stop() }) {
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Stop()
		}()
	}
	wg.Wait()
}
