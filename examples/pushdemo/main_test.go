package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPushDemo runs the demo as `go run ./examples/pushdemo` does and
// checks that its narrative shows both batches pushed, filtered and acked.
func TestPushDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	got := out.String()
	for _, want := range []string{
		"POST        delivery msg_",
		": 2 events of /orders/eu, offsets -1 → ",
		`              {"type":"order.paid","id":"o1"}`,
		`              {"type":"refund.issued.partial","id":"o1"}`,
		"state       consumer is IDLE, cursor at ",
	} {
		require.Contains(t, got, want)
	}
	require.NotContains(t, got, `"user.login"`, "filtered out")
}

// TestPushDemoStopsWhenContextEnds checks that the demo returns an error,
// rather than hanging or claiming success, once its deadline has passed.
func TestPushDemoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	require.Error(t, run(ctx, &bytes.Buffer{}))
}
