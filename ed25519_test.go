package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// ed25519Header is the shape of an Ed25519 Webhook-Signature (protocol
// section 7.1): a decimal time, a ds_ kid and an unpadded base64url
// signature of 64 bytes.
var ed25519Header = regexp.MustCompile(`^t=(\d+),kid=(ds_[A-Za-z0-9_-]{43}),ed25519=[A-Za-z0-9_-]{86}$`)

// subscribeEd25519 creates subscription id on pattern to h's receiver,
// signed with Ed25519.
func (h *harness) subscribeEd25519(id, pattern string) {
	h.t.Helper()
	rec := h.do(http.MethodPut, pattern+"?subscription="+id, fmt.Sprintf(`{"webhook":%q,"signature":"ed25519"}`, h.recv.url()))
	require.Equal(h.t, http.StatusCreated, rec.Code, rec.Body.String())
	require.JSONEq(h.t, `"ed25519"`, string(fieldOf(h.t, rec.Body.Bytes(), "signature")))
}

func fieldOf(t testing.TB, body []byte, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m))
	return m[name]
}

// jwksOf fetches e's JWKS through its handler.
func jwksOf(t testing.TB, e *webhooks.Engine) (kids []string, raw []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	e.JWKSHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/stream/__ds/jwks.json", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &set))
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids, rec.Body.Bytes()
}

// TestEd25519DeliveryVerifies: a subscription that chooses Ed25519 gets
// deliveries signed as the protocol writes, which package receiver
// verifies with the engine's JWKS, and its HMAC secret does not.
func TestEd25519DeliveryVerifies(t *testing.T) {
	h := newHarness(t)
	jwks := httptest.NewServer(h.engine.JWKSHandler())
	t.Cleanup(jwks.Close)
	h.subscribeEd25519("sub", "/s/*")
	h.create("/s/a", 10)
	d := h.nextDelivery()

	sig := d.header.Get(receiver.SignatureHeader)
	m := ed25519Header.FindStringSubmatch(sig)
	require.NotNil(t, m, "signature header %q", sig)
	require.Equal(t, strconv.FormatInt(h.clock.Now().Unix(), 10), m[1])
	require.Equal(t, webhooks.SigningKeyID(h.engine), m[2])
	require.Equal(t, d.n.WakeID, d.header.Get(receiver.IDHeader))

	v, err := receiver.NewVerifier(receiver.WithJWKS(jwks.URL, jwks.Client()), receiver.WithClock(h.clock.Now))
	require.NoError(t, err)
	require.NoError(t, v.Verify(t.Context(), d.header, d.body))
	err = v.Verify(t.Context(), d.header, append(bytes.Clone(d.body), ' '))
	require.ErrorIs(t, err, receiver.ErrInvalidSignature, "a changed body")

	sub, err := h.engine.Subscription(t.Context(), "sub")
	require.NoError(t, err)
	withSecret, err := receiver.NewVerifier(receiver.WithSecret(sub.Secret), receiver.WithClock(h.clock.Now))
	require.NoError(t, err)
	require.ErrorIs(t, withSecret.Verify(t.Context(), d.header, d.body), receiver.ErrInvalidSignature,
		"the subscription's secret signs nothing")
}

// TestEd25519IsNotTheDefault: HMAC stays the default, as seed 001 asks.
func TestEd25519IsNotTheDefault(t *testing.T) {
	h := newHarness(t)
	d := h.wake("sub", "/s/*", "/s/a")
	require.Regexp(t, `^t=\d+,sha256=[0-9a-f]{64}$`, d.header.Get(receiver.SignatureHeader))
	rec := h.do(http.MethodPut, "/s/*?subscription=bad", fmt.Sprintf(`{"webhook":%q,"signature":"Ed25519"}`, h.recv.url()))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), `\"ed25519\"`, "the error lists the schemes")
}

// TestJWKSDocument: the members, media type and caching of section 6.5.
func TestJWKSDocument(t *testing.T) {
	h := newHarness(t)
	handler := h.engine.JWKSHandler()
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/__ds/jwks.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/jwk-set+json", rec.Header().Get("Content-Type"))
	require.Equal(t, "public, max-age=300", rec.Header().Get("Cache-Control"))
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &set))
	require.Len(t, set.Keys, 1)
	k := set.Keys[0]
	require.Equal(t, webhooks.SigningKeyID(h.engine), k["kid"])
	require.Regexp(t, `^[A-Za-z0-9_-]{43}$`, k["x"], "x is 32 bytes of unpadded base64url")
	delete(k, "kid")
	delete(k, "x")
	require.Equal(t, map[string]string{"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA"}, k,
		"the members of section 6.5, and no private ones")

	head := httptest.NewRecorder()
	handler.ServeHTTP(head, httptest.NewRequest(http.MethodHead, "/__ds/jwks.json", nil))
	require.Equal(t, http.StatusOK, head.Code)
	require.Empty(t, head.Body.Bytes())
	require.Equal(t, strconv.Itoa(rec.Body.Len()), head.Header().Get("Content-Length"))

	post := httptest.NewRecorder()
	handler.ServeHTTP(post, httptest.NewRequest(http.MethodPost, "/__ds/jwks.json", nil))
	require.Equal(t, http.StatusMethodNotAllowed, post.Code)
	require.Equal(t, "GET, HEAD", post.Header().Get("Allow"))

	idle, err := webhooks.New(memstore.New(), newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase))
	require.NoError(t, err)
	early := httptest.NewRecorder()
	idle.JWKSHandler().ServeHTTP(early, httptest.NewRequest(http.MethodGet, "/__ds/jwks.json", nil))
	require.Equal(t, http.StatusServiceUnavailable, early.Code, "before Start")
	_, _, err = idle.RotateWebhookKey(t.Context())
	require.ErrorIs(t, err, webhooks.ErrNotStarted)
}

// TestWebhookKeyRotation: a rotation publishes the new key at once, signs
// with it from WebhookKeyActivation on, and publishes the old key until
// WebhookKeyRetention after that, then drops it.
func TestWebhookKeyRotation(t *testing.T) {
	h := newHarness(t)
	old := webhooks.SigningKeyID(h.engine)
	rotatedAt := h.clock.Now()
	next, activeAt, err := h.engine.RotateWebhookKey(t.Context())
	require.NoError(t, err)
	require.Equal(t, rotatedAt.Add(webhooks.WebhookKeyActivation), activeAt)
	require.NotEqual(t, old, next)
	kids, _ := jwksOf(t, h.engine)
	require.Equal(t, []string{old, next}, kids, "the new key is published before it signs")
	require.Equal(t, old, webhooks.SigningKeyID(h.engine))

	h.clock.Set(activeAt.Add(-time.Nanosecond))
	require.Equal(t, old, webhooks.SigningKeyID(h.engine), "the old key signs until the new one's time")
	h.clock.Set(activeAt)
	require.Equal(t, next, webhooks.SigningKeyID(h.engine), "the new key signs from its time")

	// A rotation within the window keeps the old key published.
	h.clock.Set(activeAt.Add(webhooks.WebhookKeyRetention - time.Nanosecond))
	third, _, err := h.engine.RotateWebhookKey(t.Context())
	require.NoError(t, err)
	kids, _ = jwksOf(t, h.engine)
	require.Equal(t, []string{old, next, third}, kids, "the old key is published through the replay window")
	h.clock.Set(activeAt.Add(webhooks.WebhookKeyRetention))
	kids, _ = jwksOf(t, h.engine)
	require.Equal(t, []string{next, third}, kids, "the old key is dropped once the window has passed")

	// The next rotation drops it from the Store too.
	fourth, _, err := h.engine.RotateWebhookKey(t.Context())
	require.NoError(t, err)
	stored, err := h.store.(webhooks.WebhookKeyStore).WebhookKeys(t.Context())
	require.NoError(t, err)
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(stored, &set))
	require.Len(t, set.Keys, 3, "the Store keeps the keys still published")
	restarted, err := webhooks.New(h.store, h.source, webhooks.WithClock(h.clock), webhooks.WithCallbackBaseURL(callbackBase))
	require.NoError(t, err)
	startForTest(t, restarted)
	kids, _ = jwksOf(t, restarted)
	require.Equal(t, []string{next, third, fourth}, kids)
}

// barrierKeys is a Store whose first reads of the webhook keys, once
// made, wait for each other, so that engines starting together all find
// none stored and race to store the first key.
type barrierKeys struct {
	*memstore.Store
	arrived sync.WaitGroup
	n       atomic.Int64 // reads so far
	waiters int64        // how many first reads wait for each other
}

func (b *barrierKeys) WebhookKeys(ctx context.Context) ([]byte, error) {
	keys, err := b.Store.WebhookKeys(ctx)
	if b.n.Add(1) <= b.waiters {
		b.arrived.Done()
		b.arrived.Wait()
	}
	return keys, err
}

// TestWebhookKeysShared: engines on one Store, started together, sign
// with one key; a rotation through one is published by the other after
// its next reread; a restart keeps the keys.
func TestWebhookKeysShared(t *testing.T) {
	store := &barrierKeys{Store: memstore.New(), waiters: 4}
	store.arrived.Add(4)
	clk := newMockClock()
	source := newFakeSource()
	newEngine := func() *webhooks.Engine {
		e, err := webhooks.New(store, source, webhooks.WithClock(clk), webhooks.WithCallbackBaseURL(callbackBase),
			webhooks.WithPollInterval(testPollInterval))
		require.NoError(t, err)
		return e
	}
	engines := make([]*webhooks.Engine, 4)
	refreshed := make([]chan struct{}, len(engines))
	for i := range engines {
		engines[i] = newEngine()
		refreshed[i] = make(chan struct{}, 1)
		webhooks.SignalWebhookKeysRefreshed(engines[i], refreshed[i])
	}
	var wg sync.WaitGroup
	for _, e := range engines {
		wg.Go(func() { startForTest(t, e) })
	}
	wg.Wait()
	first, _ := jwksOf(t, engines[0])
	require.Len(t, first, 1)
	for _, e := range engines {
		kids, _ := jwksOf(t, e)
		require.Equal(t, first, kids, "engines starting together share one key")
		require.Equal(t, first[0], webhooks.SigningKeyID(e))
	}

	next, activeAt, err := engines[0].RotateWebhookKey(t.Context())
	require.NoError(t, err)
	clk.Add(webhooks.WebhookKeyRefresh)
	for i, e := range engines[1:] {
		select {
		case <-refreshed[i+1]:
		case <-time.After(waitFor):
			t.Fatal("no reread of the keys")
		}
		kids, _ := jwksOf(t, e)
		require.Equal(t, []string{first[0], next}, kids, "a rotation through one engine is published by the others")
	}
	clk.Set(activeAt)
	for _, e := range engines {
		require.Equal(t, next, webhooks.SigningKeyID(e), "every engine signs with the new key from its time")
	}

	restarted := newEngine()
	startForTest(t, restarted)
	kids, _ := jwksOf(t, restarted)
	require.Equal(t, []string{first[0], next}, kids, "a restart keeps the keys")
}

// failingKeys is a Store whose webhook keys cannot be read.
type failingKeys struct {
	*memstore.Store
}

func (failingKeys) WebhookKeys(context.Context) ([]byte, error) {
	return nil, fmt.Errorf("keys: %w", webhooks.ErrStoreUnavailable)
}

func (failingKeys) UpdateWebhookKeys(context.Context, func([]byte) ([]byte, error)) ([]byte, error) {
	return nil, errors.New("unreachable")
}

// TestStartFailsWithoutWebhookKeys: an engine whose Store cannot give it
// its keys does not start, as without its token key.
func TestStartFailsWithoutWebhookKeys(t *testing.T) {
	e, err := webhooks.New(failingKeys{memstore.New()}, newFakeSource(), webhooks.WithCallbackBaseURL(callbackBase), webhooks.WithClock(mockclock.New()))
	require.NoError(t, err)
	require.ErrorIs(t, e.Start(t.Context()), webhooks.ErrStoreUnavailable)
}

// TestEd25519NodeVerifies checks an engine's Ed25519 delivery with node's
// crypto alone (testdata/verify_ed25519.mjs): the key imported from the
// JWKS, selected by kid, the signature over "<t>.<raw body>". Under CI
// node must be there.
func TestEd25519NodeVerifies(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is required in CI: ", err)
		}
		t.Skip("node not on PATH")
	}
	h := newHarness(t)
	h.subscribeEd25519("sub", "/s/*")
	h.create("/s/a", 10)
	d := h.nextDelivery()
	_, jwks := jwksOf(t, h.engine)
	now := strconv.FormatInt(h.clock.Now().Unix(), 10)
	run := func(header string, body []byte) (int, string) {
		t.Helper()
		cmd := exec.Command(node, "testdata/verify_ed25519.mjs", header, string(jwks), now)
		cmd.Stdin = bytes.NewReader(body)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("running node: %v", err)
		}
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	header := d.header.Get(receiver.SignatureHeader)
	if code, stderr := run(header, d.body); code != 0 {
		t.Fatalf("node rejected our signature %q: exit %d, stderr %q", header, code, stderr)
	}
	// A clean exit 1 is the verifier returning false, not a crash.
	if code, stderr := run(header, append(bytes.Clone(d.body), ' ')); code != 1 || stderr != "" {
		t.Fatalf("node on a tampered body: exit %d, stderr %q; want exit 1", code, stderr)
	}
}
