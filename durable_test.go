package webhooks_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// durableOpen opens the SQLite store at path for the rest of the test.
func durableOpen(t *testing.T, path string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// TestEngineRestartOnSQLite restarts the engine and its store: the LIVE
// consumer, its deadline and the token signing key come back from the file,
// so the consumer's token still works and its ack lands.
func TestEngineRestartOnSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.db")
	var (
		d    delivery
		live *webhooks.Consumer
	)
	t.Run("before", func(t *testing.T) {
		h := newHarnessStore(t, durableOpen(t, path))
		d = h.live()
		live = h.consumer(agentAID)
	})
	t.Run("after", func(t *testing.T) {
		h := newHarnessStore(t, durableOpen(t, path))
		require.Equal(t, live, h.consumer(agentAID))
		h.source.set(agentA, 10)
		r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(d.n.Epoch), Acks: streamOffsets(agentA, offset(10))})
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, streamOffsets(agentA, offset(10)), h.consumer(agentAID).Streams)
	})
}
