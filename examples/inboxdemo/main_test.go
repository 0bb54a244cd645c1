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

// TestInboxDemo runs the demo as `go run ./examples/inboxdemo` does and
// checks that its narrative shows the delivery accepted during the
// outage, retried, processed after it, and the forgery dead-lettered.
func TestInboxDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	got := out.String()
	for _, want := range []string{
		"over the raw bytes: 202",
		"attempt 1 failed: the processor's database is down",
		"attempt 2 failed",
		"delivery-1, issues event, signature verified",
		"forged-1 in /inbox/github/dead: ",
		"no signature matches the body; never processed",
	} {
		require.Contains(t, got, want)
	}
}

// TestInboxDemoStopsWhenContextEnds checks that the demo returns an error,
// rather than hanging or claiming success, once its deadline has passed.
func TestInboxDemoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	require.Error(t, run(ctx, &bytes.Buffer{}))
}
