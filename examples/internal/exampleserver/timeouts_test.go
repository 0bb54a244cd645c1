package exampleserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/dstream"
)

// TestHTTPTimeoutsOutlastLongPolls checks the server Start runs: every
// timeout is set, and a long-poll that waits its full time still has 10
// seconds or more to write its response before ReadTimeout (which would
// cancel its context) or WriteTimeout ends it.
func TestHTTPTimeoutsOutlastLongPolls(t *testing.T) {
	r, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", Dev: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.NoError(t, r.Close(ctx))
	})
	hs := r.http
	longPoll := dstream.DefaultLongPollTimeout
	require.Positive(t, hs.ReadHeaderTimeout)
	require.GreaterOrEqual(t, hs.ReadTimeout, longPoll+10*time.Second)
	require.GreaterOrEqual(t, hs.WriteTimeout, longPoll+10*time.Second)
	require.Positive(t, hs.IdleTimeout)
}
