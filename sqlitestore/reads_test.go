package sqlitestore

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/combine/combinetest"
	"github.com/streamhooks/webhooks/storetest"
)

// TestReadsShareOneQuery holds each kind of batched read, so that the
// reads made next share one query.
func TestReadsShareOneQuery(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	defer s.Close()
	storetest.RunBatchedReads(t, s,
		func(t *testing.T) (func(), func(int)) { return combinetest.HoldLookups(t, &s.subscriptionReads) },
		func(t *testing.T) (func(), func(int)) { return combinetest.HoldLookups(t, &s.streamReads) })
}
