// Package narratetest checks the one-process demos the way a reader runs
// them.
package narratetest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Run is a demo's entry point: it narrates to out until done or ctx ends.
type Run func(ctx context.Context, out io.Writer) error

// Narrates runs a demo within timeout, as `go run` does, checks that it
// succeeds and that its narrative holds each of wants, and returns it.
func Narrates(t *testing.T, run Run, timeout time.Duration, wants ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	got := out.String()
	for _, want := range wants {
		require.Contains(t, got, want)
	}
	return got
}

// StopsWhenContextEnds checks that a demo returns an error, rather than
// hanging or claiming success, once its deadline has passed.
func StopsWhenContextEnds(t *testing.T, run Run) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	require.Error(t, run(ctx, &bytes.Buffer{}))
}
