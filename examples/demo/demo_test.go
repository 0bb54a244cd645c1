package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo as `go run ./examples/demo` does and checks that
// its narrative shows both wake cycles complete.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))

	got := out.String()
	for _, want := range []string{
		"WOKEN       consumer demo-agents:%2Fagents%2Ftask-1, epoch 1, wake_id w_",
		"read        /agents/task-1 from offset -1: 3 events",
		"done        epoch 1 finished",
		"state       consumer is IDLE at epoch 1",
		"epoch 2 (re-wake)",
		": 2 events",
		"state       consumer is IDLE at epoch 2",
	} {
		require.Contains(t, got, want)
	}
}

// TestDemoStopsWhenContextEnds checks that the demo returns an error,
// rather than hanging or claiming success, once its deadline has passed.
func TestDemoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	require.Error(t, run(ctx, &bytes.Buffer{}))
}
