package exampleserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/internal/pgtest"
)

// TestPostgresInstancesShareStreamsAndSubscriptions starts two servers on
// one database: what is created through one is served by the other.
func TestPostgresInstancesShareStreamsAndSubscriptions(t *testing.T) {
	dsn := pgtest.SchemaDSN(t)
	a, _ := startServer(t, exampleserver.Config{Dev: true, Postgres: dsn})
	b, _ := startServer(t, exampleserver.Config{Dev: true, Postgres: dsn})
	require.NotEqual(t, a.base, b.base)

	resp, body := a.do(t, http.MethodPut, "/agents/task-1", "application/json", "", []byte(`{"n":1}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = a.do(t, http.MethodPost, "/agents/task-1", "application/json", "", []byte(`{"n":2}`))
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
	tail := resp.Header.Get("Stream-Next-Offset")

	resp, body = b.do(t, http.MethodGet, "/agents/task-1?offset=-1", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.JSONEq(t, `[{"n":1},{"n":2}]`, string(body))
	require.Equal(t, tail, resp.Header.Get("Stream-Next-Offset"))

	resp, body = a.do(t, http.MethodPut, "/agents/*?subscription=s1", "application/json", "",
		[]byte(`{"webhook":"http://127.0.0.1:1/hook","description":"through a"}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	resp, body = b.do(t, http.MethodGet, "/**?subscriptions", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var list struct {
		Subscriptions []struct {
			ID          string `json:"subscription_id"`
			Pattern     string `json:"pattern"`
			Description string `json:"description"`
		} `json:"subscriptions"`
	}
	require.NoError(t, json.Unmarshal(body, &list), "%s", body)
	require.Len(t, list.Subscriptions, 1, "%s", body)
	require.Equal(t, "s1", list.Subscriptions[0].ID)
	require.Equal(t, "/agents/*", list.Subscriptions[0].Pattern)
	require.Equal(t, "through a", list.Subscriptions[0].Description)
}

func TestPostgresExcludesDataDir(t *testing.T) {
	_, err := exampleserver.Start(context.Background(), exampleserver.Config{
		Addr: "127.0.0.1:0", Dev: true, Postgres: "postgres://127.0.0.1:1/none", DataDir: t.TempDir(),
	})
	require.ErrorContains(t, err, "exclude each other")
}

// TestPostgresEncryptionKey checks that the key reaches pgstore: a database
// made with one cannot be opened without it.
func TestPostgresEncryptionKey(t *testing.T) {
	dsn := pgtest.SchemaDSN(t)
	key := bytes.Repeat([]byte{0xa5}, 32)
	startServer(t, exampleserver.Config{Dev: true, Postgres: dsn, EncryptionKey: key})
	_, err := exampleserver.Start(context.Background(), exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, Postgres: dsn})
	require.ErrorContains(t, err, "opening the engine's store")
}

// TestPostgresConcurrentStreamsDoNotExhaustThePool creates more matching
// streams at once than a pool has connections. The engine reads the
// streams while it holds a consumer's row locked; were the streams and the
// engine's Store on one pool, every connection could be held by an update
// waiting for another to read a stream, and nothing would move.
func TestPostgresConcurrentStreamsDoNotExhaustThePool(t *testing.T) {
	dsn := pgtest.SchemaDSN(t) + "&pool_max_conns=2"
	a, _ := startServer(t, exampleserver.Config{Dev: true, Postgres: dsn})
	resp, body := a.do(t, http.MethodPut, "/many/*?subscription=s1", "application/json", "",
		[]byte(`{"webhook":"http://127.0.0.1:1/hook"}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	const streams = 16
	hc := &http.Client{Timeout: 20 * time.Second}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPut, a.base+fmt.Sprintf("/many/%d", i), strings.NewReader(`{"n":1}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					err = fmt.Errorf("/many/%d: %s", i, resp.Status)
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
