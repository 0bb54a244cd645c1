package receiver

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// RFC 8037's Ed25519 example key (appendix A.1), whose kid RFC 8037 A.3
// gives as a thumbprint.
const (
	rfcSeed = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
	rfcKid  = "ds_kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
	// rfcSig is testBody signed at testSignTime with that key, computed
	// with node's crypto:
	//
	//	key = crypto.createPrivateKey({key: {kty: 'OKP', crv: 'Ed25519', d, x}, format: 'jwk'})
	//	crypto.sign(null, Buffer.concat([Buffer.from('1704067200.'), body]), key).toString('base64url')
	rfcSig = "8l_i-lVEdNq8Ucfyj3BTe7MIk-SAeeFpjhd1EebyFTkT-p9MEjCA8sN43Hb2XY1FCyJVqPXbsAoyvQO-DqlWCA"
)

func rfcKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	seed, err := base64.RawURLEncoding.DecodeString(rfcSeed)
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func newEd25519Key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signEd25519 is an Ed25519 header, as the engine signs, naming kid.
func signEd25519(k ed25519.PrivateKey, kid string, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := ed25519.Sign(k, webhooksig.Ed25519Message(ts, body))
	return "t=" + ts + ",kid=" + kid + ",ed25519=" + base64.RawURLEncoding.EncodeToString(sig)
}

func kidOf(k ed25519.PrivateKey) string { return webhooksig.KeyID(k.Public().(ed25519.PublicKey)) }

// jwksServer serves a key set that a test may change, and counts fetches.
type jwksServer struct {
	srv     *httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	keys    []webhooksig.JWK
	status  int
}

func newJWKSServer(t *testing.T, keys ...ed25519.PrivateKey) *jwksServer {
	s := &jwksServer{status: http.StatusOK}
	s.set(keys...)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.WriteHeader(s.status)
		_ = json.NewEncoder(w).Encode(webhooksig.JWKS{Keys: s.keys})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *jwksServer) set(keys ...ed25519.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = nil
	for _, k := range keys {
		s.keys = append(s.keys, webhooksig.PublicJWK(k.Public().(ed25519.PublicKey)))
	}
}

func (s *jwksServer) fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

// mockNow is a clock a test moves.
type mockNow struct {
	mu  sync.Mutex
	now time.Time
}

func (c *mockNow) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *mockNow) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func jwksVerifier(t *testing.T, s *jwksServer, clock *mockNow) *Verifier {
	t.Helper()
	v, err := NewVerifier(WithJWKS(s.srv.URL, s.srv.Client()), WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEd25519KnownAnswer(t *testing.T) {
	k := rfcKey(t)
	if kid := kidOf(k); kid != rfcKid {
		t.Fatalf("kid = %s, want %s", kid, rfcKid)
	}
	want := "t=1704067200,kid=" + rfcKid + ",ed25519=" + rfcSig
	if got := signEd25519(k, rfcKid, testSignTime, testBody); got != want {
		t.Fatalf("header = %s\nwant     %s", got, want)
	}
	s := newJWKSServer(t, k)
	v := jwksVerifier(t, s, &mockNow{now: testSignTime})
	if err := verifyHeader(v, want, testBody); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

// TestEd25519Refuses: a wrong key, an unknown kid, a stale or future
// timestamp, a changed body and malformed headers fail, and a stale
// timestamp fetches nothing.
func TestEd25519Refuses(t *testing.T) {
	k, other := rfcKey(t), newEd25519Key(t)
	good := signEd25519(k, rfcKid, testSignTime, testBody)
	for name, tc := range map[string]struct {
		header string
		body   []byte
		at     time.Duration
	}{
		"wrong key":        {header: signEd25519(other, rfcKid, testSignTime, testBody), body: testBody},
		"unknown kid":      {header: signEd25519(other, kidOf(other), testSignTime, testBody), body: testBody},
		"changed body":     {header: good, body: append([]byte(" "), testBody...)},
		"stale":            {header: good, body: testBody, at: DefaultTolerance + time.Second},
		"future":           {header: good, body: testBody, at: -DefaultTolerance - time.Second},
		"padded signature": {header: good + "=", body: testBody},
		"no kid":           {header: "t=1704067200,kid=,ed25519=" + rfcSig, body: testBody},
		"extra entry":      {header: good + ",ed25519=" + rfcSig, body: testBody},
		"std base64":       {header: "t=1704067200,kid=" + rfcKid + ",ed25519=" + base64.StdEncoding.EncodeToString(make([]byte, 64)), body: testBody},
	} {
		t.Run(name, func(t *testing.T) {
			s := newJWKSServer(t, k)
			v := jwksVerifier(t, s, &mockNow{now: testSignTime.Add(tc.at)})
			err := verifyHeader(v, tc.header, tc.body)
			if !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
			}
			if tc.at != 0 && s.fetches.Load() != 0 {
				t.Errorf("a stale signature fetched the key set")
			}
		})
	}
}

// TestEd25519WithoutKeySet: a Verifier of secrets alone refuses an
// Ed25519 signature, and one with only a key set refuses HMAC ones.
func TestEd25519WithoutKeySet(t *testing.T) {
	k := rfcKey(t)
	err := verifyHeader(verifierAt(t, testSignTime, testSecret), signEd25519(k, rfcKid, testSignTime, testBody), testBody)
	if !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
	}
	v := jwksVerifier(t, newJWKSServer(t, k), &mockNow{now: testSignTime})
	if err := verifyHeader(v, signStreamhooks(testSecret, testSignTime, testBody), testBody); !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
	}
}

// TestEd25519KeySetCache: the key set is fetched once, refetched when a
// signature names a kid it lacks (a rotation) but at most once every
// JWKSRefetchInterval, refetched after JWKSMaxAge, and kept while a
// refetch fails; a key set never fetched is ErrKeySetUnavailable.
func TestEd25519KeySetCache(t *testing.T) {
	old, next := newEd25519Key(t), newEd25519Key(t)
	s := newJWKSServer(t, old)
	clock := &mockNow{now: testSignTime}
	v := jwksVerifier(t, s, clock)
	verify := func(k ed25519.PrivateKey) error {
		return verifyHeader(v, signEd25519(k, kidOf(k), clock.Now(), testBody), testBody)
	}
	requireFetches := func(want int64) {
		t.Helper()
		if got := s.fetches.Load(); got != want {
			t.Fatalf("fetches = %d, want %d", got, want)
		}
	}
	for range 3 {
		if err := verify(old); err != nil {
			t.Fatal(err)
		}
	}
	requireFetches(1)

	// A rotation the cache has not seen: one refetch finds the new key.
	clock.add(JWKSRefetchInterval)
	s.set(old, next)
	if err := verify(next); err != nil {
		t.Fatalf("the new key after a rotation: %v", err)
	}
	requireFetches(2)

	// Forged kids fetch at most once an interval.
	forged := newEd25519Key(t)
	for range 3 {
		if err := verify(forged); !errors.Is(err, ErrInvalidSignature) {
			t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
		}
	}
	requireFetches(2)
	clock.add(JWKSRefetchInterval)
	if err := verify(forged); !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
	}
	requireFetches(3)

	// A key dropped from the set stops verifying once the cache expires;
	// while the server fails, the cached set serves.
	s.fail(http.StatusInternalServerError)
	clock.add(JWKSMaxAge)
	if err := verify(old); err != nil {
		t.Fatalf("a stale cache serves while the fetch fails: %v", err)
	}
	requireFetches(4)
	s.fail(http.StatusOK)
	s.set(next)
	clock.add(JWKSRefetchInterval)
	if err := verify(old); !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("a key dropped from the set: Verify = %v, want ErrInvalidSignature", err)
	}
	if err := verify(next); err != nil {
		t.Fatal(err)
	}
	requireFetches(5)

	// A Verifier that never got the key set says so, not "invalid".
	down := newJWKSServer(t, old)
	down.fail(http.StatusServiceUnavailable)
	v = jwksVerifier(t, down, clock)
	for range 2 {
		err := verifyHeader(v, signEd25519(old, kidOf(old), clock.Now(), testBody), testBody)
		if !errors.Is(err, ErrKeySetUnavailable) || errors.Is(err, ErrInvalidSignature) {
			t.Fatalf("Verify = %v, want ErrKeySetUnavailable alone", err)
		}
	}
	if got := down.fetches.Load(); got != 1 {
		t.Fatalf("fetches of a failing key set = %d, want 1 an interval", got)
	}
}

// TestEd25519ConcurrentVerifiesFetchOnce: racing Verifies of a cold cache
// make one fetch.
func TestEd25519ConcurrentVerifiesFetchOnce(t *testing.T) {
	k := rfcKey(t)
	s := newJWKSServer(t, k)
	v := jwksVerifier(t, s, &mockNow{now: testSignTime})
	header := signEd25519(k, rfcKid, testSignTime, testBody)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := v.Verify(context.Background(), http.Header{SignatureHeader: {header}}, testBody); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := s.fetches.Load(); got != 1 {
		t.Fatalf("fetches = %d, want 1", got)
	}
}

func TestWithJWKSRejectsEmptyURL(t *testing.T) {
	if _, err := NewVerifier(WithJWKS("", nil)); err == nil {
		t.Fatal("NewVerifier accepted an empty JWKS URL")
	}
}
