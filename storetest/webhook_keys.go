package storetest

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// The webhook key cases run only for a Store that implements
// webhooks.WebhookKeyStore, and skip otherwise.

// webhookKeys returns s's WebhookKeyStore, or skips the test.
func webhookKeys(t *testing.T, s webhooks.Store) webhooks.WebhookKeyStore {
	t.Helper()
	k, ok := s.(webhooks.WebhookKeyStore)
	if !ok {
		t.Skip("the Store does not implement webhooks.WebhookKeyStore")
	}
	return k
}

// keySet is a key set of arbitrary bytes, NUL and non-UTF-8 included, as
// the engine's encoding may hold.
var keySet = []byte("key set\x00\xff\xfe")

// testWebhookKeys checks the read-modify-write of the key set: none at
// first, fn sees what is stored, an error changes nothing, and the caller
// owns what it passes and gets.
func testWebhookKeys(t *testing.T, s webhooks.Store) {
	ks := webhookKeys(t, s)
	ctx := t.Context()
	got, err := ks.WebhookKeys(ctx)
	require.NoError(t, err)
	require.Empty(t, got, "an empty store has no key set")

	mine := slices.Clone(keySet)
	var seen []byte
	got, err = ks.UpdateWebhookKeys(ctx, func(old []byte) ([]byte, error) {
		seen = old
		return mine, nil
	})
	require.NoError(t, err)
	require.Empty(t, seen, "the first update sees no key set")
	require.Equal(t, keySet, got)
	mine[0], got[1] = 'X', 'Y'
	got, err = ks.WebhookKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, keySet, got, "the Store keeps a copy of what it is given and gives copies")

	boom := errors.New("boom")
	_, err = ks.UpdateWebhookKeys(ctx, func(old []byte) ([]byte, error) {
		require.Equal(t, keySet, old, "fn sees the stored key set")
		return []byte("lost"), boom
	})
	require.ErrorIs(t, err, boom)
	got, err = ks.WebhookKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, keySet, got, "an update whose fn fails changes nothing")

	rotated := append(slices.Clone(keySet), " rotated"...)
	got, err = ks.UpdateWebhookKeys(ctx, func([]byte) ([]byte, error) { return rotated, nil })
	require.NoError(t, err)
	require.Equal(t, rotated, got)
	got, err = ks.WebhookKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, rotated, got, "a later update replaces the key set")
}

// testConcurrentWebhookKeys races updates of the key set through one
// store.
func testConcurrentWebhookKeys(t *testing.T, s webhooks.Store) {
	raceWebhookKeys(t, 16, s)
}

// testSharedWebhookKeys races updates through both handles, then rotates
// through one and reads through the other: engines sharing the database
// must sign with one key and publish every rotation.
func testSharedWebhookKeys(t *testing.T, a, b webhooks.Store) {
	raceWebhookKeys(t, 8, a, b)
	ka, kb := webhookKeys(t, a), webhookKeys(t, b)
	rotated := []byte("rotated through a")
	_, err := ka.UpdateWebhookKeys(t.Context(), func([]byte) ([]byte, error) { return rotated, nil })
	require.NoError(t, err)
	got, err := kb.WebhookKeys(t.Context())
	require.NoError(t, err)
	require.Equal(t, rotated, got, "a rotation through one handle is seen through the other")
}

// raceWebhookKeys makes workers updates at once, spread over stores in
// turn, in two rounds. In the first each stores its own key set if none is
// stored, as engines starting together do: all must get the same one. In
// the second each appends its mark, as rotations do: none may be lost.
func raceWebhookKeys(t *testing.T, workers int, stores ...webhooks.Store) {
	race := func(fn func(i int, old []byte) []byte) [][]byte {
		got := make([][]byte, workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range workers {
			ks := webhookKeys(t, stores[i%len(stores)])
			wg.Go(func() {
				<-start
				v, err := ks.UpdateWebhookKeys(t.Context(), func(old []byte) ([]byte, error) {
					// A yield widens the window a Store that does not
					// serialize updates leaves open.
					runtime.Gosched()
					return fn(i, old), nil
				})
				if err != nil {
					t.Error(err)
				}
				got[i] = v
			})
		}
		close(start)
		wg.Wait()
		return got
	}
	first := race(func(i int, old []byte) []byte {
		if len(old) > 0 {
			return old
		}
		return fmt.Appendf(nil, "set-%d;", i)
	})
	require.Regexp(t, `^set-\d+;$`, string(first[0]))
	for _, v := range first {
		require.Equal(t, first[0], v, "engines starting together got different key sets")
	}
	race(func(i int, old []byte) []byte { return fmt.Appendf(old, "mark-%d;", i) })
	for _, s := range stores {
		got, err := webhookKeys(t, s).WebhookKeys(t.Context())
		require.NoError(t, err)
		for i := range workers {
			require.Equal(t, 1, strings.Count(string(got), fmt.Sprintf("mark-%d;", i)),
				"racing updates of the key set must each apply once: %q", got)
		}
	}
}

// testDurableWebhookKeys checks that the key set survives a restart.
func testDurableWebhookKeys(t *testing.T, r *reopener) {
	ks := webhookKeys(t, r.cur)
	_, err := ks.UpdateWebhookKeys(t.Context(), func([]byte) ([]byte, error) { return keySet, nil })
	require.NoError(t, err)
	for range 2 {
		got, err := webhookKeys(t, r.reopen()).WebhookKeys(t.Context())
		require.NoError(t, err)
		require.Equal(t, keySet, got, "the webhook key set survives a restart")
	}
}
