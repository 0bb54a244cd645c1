package webhooks_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// A client's secret is "whsec_" and the base64 of 24 to 64 bytes that
// look random; anything else is refused at the door, naming the field,
// and never quoted back.
func TestClientSecretRule(t *testing.T) {
	b64 := func(key []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(key) }
	counting := func(n int) []byte {
		key := make([]byte, n)
		for i := range key {
			key[i] = byte(i * 7)
		}
		return key
	}
	for name, secret := range map[string]string{
		"no prefix":          base64.StdEncoding.EncodeToString(counting(32)),
		"not base64":         "whsec_!!!!" + strings.Repeat("A", 40),
		"url base64":         "whsec_" + base64.RawURLEncoding.EncodeToString(append(counting(31), 0xff, 0xfe)),
		"23 bytes":           b64(counting(23)),
		"65 bytes":           b64(counting(65)),
		"one byte repeated":  b64(make([]byte, 32)),
		"a word":             b64([]byte("passwordpasswordpassword")),
		"15 distinct values": b64([]byte(strings.Repeat("abcdefghijklmno", 3))),
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, webhooks.ValidateSecret(secret))
			h := newHarness(t)
			rec := h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"secret":%q}`, h.recv.url(), secret))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "secret")
			require.NotContains(t, rec.Body.String(), strings.TrimPrefix(secret, "whsec_"))
		})
	}
	for name, secret := range map[string]string{
		"24 bytes":           b64(counting(24)),
		"64 bytes":           b64(counting(64)),
		"16 distinct values": b64([]byte(strings.Repeat("abcdefghijklmnop", 2))),
	} {
		require.NoError(t, webhooks.ValidateSecret(secret), name)
	}
}

// A client's secret signs the deliveries, in either scheme; it is shown
// only in the create response, and rotation replaces it as it does one
// the engine made.
func TestClientSecretSignsAndRotates(t *testing.T) {
	for _, scheme := range []string{"streamhooks", "standard"} {
		t.Run(scheme, func(t *testing.T) {
			h := newHarness(t)
			secret := clientSecret(t)
			rec := h.do(http.MethodPut, "/agents/*?subscription=s1",
				fmt.Sprintf(`{"webhook":%q,"secret":%q,"signature":%q}`, h.recv.url(), secret, scheme))
			require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
			require.Equal(t, secret, decodeSub(t, rec).Secret)
			for _, read := range []string{"/**?subscription=s1", "/**?subscriptions"} {
				rec = h.do(http.MethodGet, read, "")
				require.Equal(t, http.StatusOK, rec.Code)
				require.NotContains(t, rec.Body.String(), strings.TrimPrefix(secret, "whsec_"), "reads never show the secret")
			}

			verify := func(secret string, d delivery) error {
				v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithClock(h.clock.Now))
				require.NoError(t, err)
				return v.Verify(context.Background(), d.header, d.body)
			}
			h.create("/agents/a", 0)
			h.appendTo("/agents/a", 5)
			require.NoError(t, verify(secret, h.nextDelivery()), "the client's secret signs")

			rotated, err := h.engine.RotateSecret(context.Background(), "s1", time.Hour)
			require.NoError(t, err)
			require.NotEqual(t, secret, rotated)
			h.create("/agents/b", 0)
			h.appendTo("/agents/b", 5)
			d := h.nextDelivery()
			require.NoError(t, verify(rotated, d), "the new secret signs")
			require.NoError(t, verify(secret, d), "the client's secret signs beside it for the overlap")
		})
	}
}

// name, created_at and updated_at: created_at is the creation time;
// updated_at moves on each PATCH, pause, resume and rotation, and not on
// a read; both, and the name, read back the same after a restart.
func TestSubscriptionNameAndTimes(t *testing.T) {
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h := newHarnessStore(t, store)
	created := h.clock.Now().UTC().Format(time.RFC3339Nano)
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"name":"Production ü"}`, h.recv.url()))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	v := decodeSub(t, rec)
	require.Equal(t, "Production ü", v.Name)
	require.Equal(t, created, v.CreatedAt)
	require.Equal(t, created, v.UpdatedAt)

	// The name is configuration: a repeated create must match it.
	rec = h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"name":"Production ü"}`, h.recv.url()))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"name":"Other"}`, h.recv.url()))
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	// No update may touch the verification: only verifying does.
	_, err = h.engine.UpdateSubscription(context.Background(), "s1", func(s *webhooks.Subscription) error {
		s.Verification = &webhooks.Verification{}
		return nil
	})
	var ve *webhooks.ValidationError
	require.ErrorAs(t, err, &ve)

	step := func(what string, do func()) {
		t.Helper()
		h.clock.Add(time.Second + 7*time.Nanosecond)
		do()
		v := h.getSub(t, "s1")
		require.Equal(t, created, v.CreatedAt, what)
		require.Equal(t, h.clock.Now().UTC().Format(time.RFC3339Nano), v.UpdatedAt, "%s moves updated_at", what)
	}
	step("a PATCH of the name", func() {
		rec := h.do(http.MethodPatch, "/**?subscription=s1", `{"name":"Staging"}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.Equal(t, "Staging", decodeSub(t, rec).Name)
	})
	step("a pause", func() {
		require.Equal(t, http.StatusOK, h.do(http.MethodPatch, "/**?subscription=s1", `{"status":"paused"}`).Code)
	})
	step("a resume", func() {
		require.Equal(t, http.StatusOK, h.do(http.MethodPatch, "/**?subscription=s1", `{"status":"active"}`).Code)
	})
	step("a rotation", func() {
		require.Equal(t, http.StatusOK, h.do(http.MethodPost, "/**?subscription=s1&rotate", "").Code)
	})
	before := h.getSub(t, "s1")
	h.clock.Add(time.Minute)
	require.Equal(t, before, h.getSub(t, "s1"), "a read changes nothing")
	rec = h.do(http.MethodPatch, "/**?subscription=s1", fmt.Sprintf(`{"name":%q}`, strings.Repeat("n", webhooks.MaxNameLength+1)))
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "name")

	// The same after a restart.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, h.engine.Stop(ctx))
	h.startEngine()
	require.Equal(t, before, h.getSub(t, "s1"))
}
