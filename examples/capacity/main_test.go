package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every command runs at a tiny size on the test database, in schemas of
// its own that it drops.
func TestCommands(t *testing.T) {
	dsn := os.Getenv("STREAMHOOKS_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("STREAMHOOKS_TEST_POSTGRES is not set")
	}
	ctx := context.Background()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	c := config{dsn: dsn, schema: "capacity_test_" + hex.EncodeToString(suffix), subs: 10, consumers: 50,
		samples: 20, idleFor: 10 * time.Millisecond, instances: 2, changes: 3}
	base := c
	base.schema, base.consumers = c.schema+"_base", 0
	for _, s := range []string{c.schema, base.schema} {
		t.Cleanup(func() { require.NoError(t, exec(context.Background(), dsn, "DROP SCHEMA IF EXISTS "+s+" CASCADE")) })
	}
	require.NoError(t, seed(ctx, c))
	require.NoError(t, seed(ctx, base))
	c.baseline = base.schema
	require.NoError(t, run(ctx, c))
	require.NoError(t, notify(ctx, c))
	c.deadlines = true
	require.NoError(t, seed(ctx, c))
	c.baseline = ""
	require.NoError(t, run(ctx, c))
}
