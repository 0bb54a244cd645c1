package startstop

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waiter is a part whose goroutine waits for its context to end.
type waiter struct {
	Base
	starts int
}

func (w *waiter) Start(ctx context.Context) {
	ctx, ok, stopped := w.StartInit(ctx)
	if !ok {
		return
	}
	w.starts++
	go func() {
		defer stopped()
		<-ctx.Done()
	}()
}

func TestStartTwiceStartsOnce(t *testing.T) {
	var w waiter
	w.Start(context.Background())
	w.Start(context.Background())
	require.Equal(t, 1, w.starts)
	w.Stop()
}

func TestStopTwiceAndBeforeStart(t *testing.T) {
	var w waiter
	w.Stop() // before Start: nothing to stop
	require.Nil(t, w.Stopped())
	w.Start(context.Background())
	stopped := w.Stopped()
	w.Stop()
	w.Stop()
	require.Nil(t, w.Stopped())
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the part stopped")
	}
}

func TestRestartAfterStop(t *testing.T) {
	var w waiter
	w.Start(context.Background())
	w.Stop()
	w.Start(context.Background())
	require.Equal(t, 2, w.starts)
	w.Stop()
}

func TestStopAll(t *testing.T) {
	var a, b waiter
	a.Start(context.Background())
	StopAll(&a, &b) // b never started
	require.Nil(t, a.Stopped())
}
