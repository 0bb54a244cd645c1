package webhooks_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// clientSecret is a secret a client chose: "whsec_" and 32 random bytes.
func clientSecret(t testing.TB) string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// challengeEndpoint is a webhook that answers challenges through
// receiver.Verifier.AnswerChallenge, or refuses them while refuse is set,
// and takes deliveries with 200.
type challengeEndpoint struct {
	srv        *httptest.Server
	challenges chan receiver.Challenge
	deliveries chan []byte

	mu     sync.Mutex
	refuse int // the status of refused challenges; 0 answers them
	hold   chan struct{}
}

func newChallengeEndpoint(t *testing.T, secret string, now func() time.Time) *challengeEndpoint {
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithClock(now))
	require.NoError(t, err)
	ce := &challengeEndpoint{challenges: make(chan receiver.Challenge, 100), deliveries: make(chan []byte, 100)}
	ce.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(receiver.ChallengeHeader) == "" {
			body, _ := io.ReadAll(r.Body)
			ce.deliveries <- body
			return
		}
		body, _ := io.ReadAll(r.Body)
		var c receiver.Challenge
		_ = json.Unmarshal(body, &c)
		ce.challenges <- c
		ce.mu.Lock()
		refuse, hold := ce.refuse, ce.hold
		ce.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if refuse != 0 {
			w.WriteHeader(refuse)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if ok, err := v.AnswerChallenge(w, r); !ok {
			http.Error(w, fmt.Sprint(err), http.StatusUnauthorized)
		}
	}))
	t.Cleanup(ce.srv.Close)
	return ce
}

func (ce *challengeEndpoint) set(refuse int, hold chan struct{}) {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	ce.refuse, ce.hold = refuse, hold
}

func (ce *challengeEndpoint) url() string { return ce.srv.URL + "/hook" }

// nextChallenge waits for the endpoint's next challenge.
func (ce *challengeEndpoint) nextChallenge(t *testing.T) receiver.Challenge {
	t.Helper()
	select {
	case c := <-ce.challenges:
		return c
	case <-time.After(waitFor):
		t.Fatal("no challenge arrived")
		return receiver.Challenge{}
	}
}

// newVerifyHarness is a harness whose engine signals checked after each
// pass of its verifier.
func newVerifyHarness(t *testing.T, store webhooks.Store, clk *mockclock.Clock, checked chan struct{}) *harness {
	t.Helper()
	h := &harness{t: t, clock: clk, store: store, source: newFakeSource(), recv: newReceiver(t)}
	h.startVerifyEngine(checked)
	return h
}

// startVerifyEngine starts a new engine over h's store, as startEngine
// does, that signals checked after each pass of its verifier.
func (h *harness) startVerifyEngine(checked chan struct{}) {
	h.t.Helper()
	e, err := webhooks.New(h.store, h.source,
		webhooks.WithClock(h.clock),
		webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithPollInterval(testPollInterval))
	require.NoError(h.t, err)
	webhooks.SignalProgress(e, h.signals())
	webhooks.SignalChallengesChecked(e, checked)
	h.engine = e
	h.handler = apiHandler(h.t, e)
	startForTest(h.t, e)
}

// verifyView is a subscription as the API shows it, in the fields these
// tests read.
type verifyView struct {
	Status       string `json:"status"`
	Name         string `json:"name"`
	Secret       string `json:"webhook_secret"`
	CreatedAt    string `json:"created_at"`
	UpdatedAt    string `json:"updated_at"`
	Verification *struct {
		Attempts      int     `json:"attempts"`
		NextAttemptAt *string `json:"next_attempt_at"`
		ExpiresAt     string  `json:"expires_at"`
		Expired       bool    `json:"expired"`
		LastError     string  `json:"last_error"`
	} `json:"verification"`
}

func decodeSub(t *testing.T, rec *httptest.ResponseRecorder) verifyView {
	t.Helper()
	var v verifyView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), rec.Body.String())
	return v
}

func (h *harness) getSub(t *testing.T, id string) verifyView {
	t.Helper()
	rec := h.do(http.MethodGet, "/**?subscription="+id, "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return decodeSub(t, rec)
}

// waitSub waits, a pass of the verifier at a time, until subscription
// id as the API shows it satisfies cond, and returns it.
func (h *harness) waitSub(t *testing.T, checked chan struct{}, id string, cond func(v verifyView) bool) verifyView {
	t.Helper()
	timeout := time.After(waitFor)
	for {
		if v := h.getSub(t, id); cond(v) {
			return v
		}
		select {
		case <-checked:
		case <-timeout:
			t.Fatalf("subscription %s: %+v", id, h.getSub(t, id))
		}
	}
}

// failedAttempts is a waitSub condition: n challenges sent, the last
// failed and recorded.
func failedAttempts(n int) func(v verifyView) bool {
	return func(v verifyView) bool {
		return v.Verification != nil && v.Verification.Attempts == n && v.Verification.LastError != ""
	}
}

// waitChecked waits for a pass of the verifier.
func waitChecked(t *testing.T, checked chan struct{}) {
	t.Helper()
	select {
	case <-checked:
	case <-time.After(waitFor):
		t.Fatal("the verifier made no pass")
	}
}

// A pending subscription delivers nothing, and its cursor waits, until its
// endpoint echoes the challenge; then the events that waited are
// delivered. The challenge is signed with the subscription's secret.
func TestVerificationChallengeActivates(t *testing.T) {
	checked := make(chan struct{}, 1)
	h := newVerifyHarness(t, memstore.New(), newMockClock(), checked)
	secret := clientSecret(t)
	ce := newChallengeEndpoint(t, secret, h.clock.Now)
	ce.set(http.StatusServiceUnavailable, nil)
	h.create("/agents/a", 10)

	rec := h.do(http.MethodPut, "/agents/*?subscription=s1",
		fmt.Sprintf(`{"webhook":%q,"secret":%q,"verify":true,"deliver_policy":"all"}`, ce.url(), secret))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	v := decodeSub(t, rec)
	require.Equal(t, "pending", v.Status)
	require.Equal(t, secret, v.Secret, "the create response returns the client's secret")

	c := ce.nextChallenge(t)
	require.Equal(t, receiver.ChallengeType, c.Type)
	require.Equal(t, "s1", c.SubscriptionID)
	require.True(t, strings.HasPrefix(c.Challenge, "verify_"))
	v = h.waitSub(t, checked, "s1", failedAttempts(1))
	require.Equal(t, "pending", v.Status)
	require.Contains(t, v.Verification.LastError, "503")

	// Events that arrive while pending wait at the cursor.
	h.appendTo("/agents/a", 5)
	cons := h.consumer(webhooks.ConsumerID("s1", "/agents/a"))
	require.Equal(t, webhooks.StateIdle, cons.State, "a pending subscription starts no delivery")
	require.Equal(t, webhooks.OffsetNone, cons.Streams[0].Offset, "the cursor waits")
	require.Empty(t, ce.deliveries)

	// The retry, a minute later, is echoed: the subscription activates and
	// delivers what waited.
	ce.set(0, nil)
	h.clock.Add(time.Minute)
	ce.nextChallenge(t)
	select {
	case body := <-ce.deliveries:
		var n receiver.Notification
		require.NoError(t, json.Unmarshal(body, &n))
		require.Equal(t, webhooks.ConsumerID("s1", "/agents/a"), n.ConsumerID)
	case <-time.After(waitFor):
		t.Fatal("no delivery after the verification")
	}
	v = h.getSub(t, "s1")
	require.Equal(t, "active", v.Status)
	require.Nil(t, v.Verification)
	require.Equal(t, h.clock.Now().UTC().Format(time.RFC3339Nano), v.UpdatedAt, "activation moves updated_at")
}

// A challenge that fails is retried on ChallengeRetrySchedule until
// VerificationExpiry; then none is sent, and the subscription stays
// pending until an operator restarts the challenge or verifies it.
func TestVerificationRetryAndExpiry(t *testing.T) {
	checked := make(chan struct{}, 1)
	h := newVerifyHarness(t, memstore.New(), newMockClock(), checked)
	secret := clientSecret(t)
	ce := newChallengeEndpoint(t, secret, h.clock.Now)
	ce.set(http.StatusNotFound, nil)
	start := h.clock.Now()

	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"secret":%q,"verify":true}`, ce.url(), secret))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	ce.nextChallenge(t)

	// The attempts come at 0, 1m, 6m, 36m, 1h36m, then every hour.
	expiry := start.Add(webhooks.VerificationExpiry)
	attempts, due := 1, start
	for {
		next := due.Add(webhooks.ChallengeRetrySchedule[min(attempts, len(webhooks.ChallengeRetrySchedule))-1])
		v := h.waitSub(t, checked, "s1", func(v verifyView) bool {
			vv := v.Verification
			return failedAttempts(attempts)(v) && (vv.Expired || *vv.NextAttemptAt == next.UTC().Format(time.RFC3339Nano))
		})
		if !next.Before(expiry) {
			require.True(t, v.Verification.Expired, "no retry is due after the expiry")
			break
		}
		require.NotNil(t, v.Verification.NextAttemptAt, "attempt %d", attempts)
		require.Equal(t, next.UTC().Format(time.RFC3339Nano), *v.Verification.NextAttemptAt, "attempt %d", attempts)
		if before := next.Add(-webhooks.ChallengeTick); before.After(h.clock.Now()) {
			// The ticks before the retry is due send nothing.
			h.clock.Set(before)
			waitChecked(t, checked)
			require.Empty(t, ce.challenges)
		}
		h.clock.Set(next)
		ce.nextChallenge(t)
		attempts, due = attempts+1, next
	}
	require.Equal(t, 5+22, attempts, "0, 1m, 6m, 36m, 1h36m, and hourly until 24h")
	v := h.getSub(t, "s1")
	require.Nil(t, v.Verification.NextAttemptAt)
	require.Equal(t, start.Add(webhooks.VerificationExpiry).UTC().Format(time.RFC3339Nano), v.Verification.ExpiresAt)

	// Expired: no challenge any more.
	h.clock.Add(2 * time.Hour)
	waitChecked(t, checked)
	require.Empty(t, ce.challenges)
	require.Equal(t, "pending", h.getSub(t, "s1").Status)

	// An operator restarts it: a challenge at once, echoed this time.
	ce.set(0, nil)
	rec = h.do(http.MethodPost, "/**?subscription=s1&challenge", "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	v = decodeSub(t, rec)
	require.Equal(t, 0, v.Verification.Attempts)
	require.Equal(t, h.clock.Now().Add(webhooks.VerificationExpiry).UTC().Format(time.RFC3339Nano), v.Verification.ExpiresAt)
	ce.nextChallenge(t)
	h.waitSub(t, checked, "s1", func(v verifyView) bool { return v.Status == "active" })
}

// An endpoint that answers 2xx without echoing the challenge, or echoes
// another one, is not verified.
func TestVerificationNeedsTheEcho(t *testing.T) {
	for name, answer := range map[string]string{
		"empty":   ``,
		"other":   `{"challenge":"verify_0000"}`,
		"garbage": `challenge`,
	} {
		t.Run(name, func(t *testing.T) {
			checked := make(chan struct{}, 1)
			h := newVerifyHarness(t, memstore.New(), newMockClock(), checked)
			h.recv.queue(reply{status: http.StatusOK, body: answer})
			rec := h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"verify":true}`, h.recv.url()))
			require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
			d := h.nextDelivery()
			require.NotEmpty(t, d.header.Get(receiver.ChallengeHeader))
			require.NotEmpty(t, d.header.Get(receiver.SignatureHeader), "the challenge is signed")
			v := h.waitSub(t, checked, "s1", failedAttempts(1))
			require.Equal(t, "pending", v.Status)
			require.Contains(t, v.Verification.LastError, "without echoing the challenge")
		})
	}
}

// An operator verifies a pending subscription by hand; pausing, resuming
// or PATCHing its status are refused while it is pending, and verifying
// or challenging one that is not pending is a conflict.
func TestVerificationManual(t *testing.T) {
	checked := make(chan struct{}, 1)
	h := newVerifyHarness(t, memstore.New(), newMockClock(), checked)
	h.recv.queue(reply{status: http.StatusNotFound})
	h.create("/agents/a", 10)
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"verify":true,"deliver_policy":"all"}`, h.recv.url()))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	h.nextDelivery() // the challenge, refused
	h.waitSub(t, checked, "s1", failedAttempts(1))

	for _, status := range []string{"active", "paused"} {
		rec = h.do(http.MethodPatch, "/**?subscription=s1", fmt.Sprintf(`{"status":%q}`, status))
		require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	}
	_, err := h.engine.PauseSubscription(context.Background(), "s1")
	require.ErrorIs(t, err, webhooks.ErrPendingVerification)
	_, err = h.engine.ResumeSubscription(context.Background(), "s1")
	require.ErrorIs(t, err, webhooks.ErrPendingVerification)
	require.Equal(t, webhooks.StateIdle, h.consumer(webhooks.ConsumerID("s1", "/agents/a")).State)

	rec = h.do(http.MethodPost, "/**?subscription=s1&verify", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	v := decodeSub(t, rec)
	require.Equal(t, "active", v.Status)
	d := h.nextDelivery() // the events that waited
	require.Empty(t, d.header.Get(receiver.ChallengeHeader))
	require.Equal(t, webhooks.ConsumerID("s1", "/agents/a"), d.n.ConsumerID)

	for _, op := range []string{"verify", "challenge"} {
		rec = h.do(http.MethodPost, "/**?subscription=s1&"+op, "")
		require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	}
	_, err = h.engine.VerifySubscription(context.Background(), "s1")
	require.ErrorIs(t, err, webhooks.ErrNotPending)
}

// The verify and challenge routes are operator operations: the
// Authorizer sees them as OpOperate.
func TestVerificationRoutesAuthorized(t *testing.T) {
	var seen []webhooks.Operation
	var mu sync.Mutex
	h := newHarness(t, webhooks.WithAuthorizer(func(r *http.Request, op webhooks.Operation, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, op)
		if op == webhooks.OpOperate {
			return webhooks.ErrForbidden
		}
		return nil
	}))
	h.subscribe("s1", "/agents/*")
	for _, op := range []string{"verify", "challenge"} {
		rec := h.do(http.MethodPost, "/**?subscription=s1&"+op, "")
		require.Equal(t, http.StatusForbidden, rec.Code, rec.Body.String())
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []webhooks.Operation{webhooks.OpCreate, webhooks.OpOperate, webhooks.OpOperate}, seen)
}

// Engines that share a Store send one challenge at a time: the one that
// claims the attempt sends it, and the other, seeing the claim, does not.
func TestVerificationOneChallengeAcrossEngines(t *testing.T) {
	store := memstore.New()
	clk := newMockClock()
	secret := clientSecret(t)
	ce := newChallengeEndpoint(t, secret, clk.Now)
	hold := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the server closes
	ce.set(0, hold)
	// Stored pending and due before either engine starts, so that both
	// find it due at their first tick.
	require.NoError(t, store.CreateSubscription(context.Background(), &webhooks.Subscription{
		ID: "s1", Pattern: "/agents/*", Webhook: ce.url(), Secret: secret, CreatedAt: clk.Now(),
		Status: webhooks.StatusPending, Verification: &webhooks.Verification{NextAttemptAt: clk.Now(), ExpiresAt: clk.Now().Add(time.Hour)},
	}))
	checked := []chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	h := newVerifyHarness(t, store, clk, checked[0])
	engines := []*webhooks.Engine{h.engine}
	h.startVerifyEngine(checked[1])
	engines = append(engines, h.engine)

	// At their first tick, one engine claims it, sends it, and is held.
	clk.Add(webhooks.ChallengeTick)
	ce.nextChallenge(t)
	// One engine's pass ends while the other's challenge is held: it sent
	// none, since a send would wait on the hold too.
	select {
	case <-checked[0]:
	case <-checked[1]:
	case <-time.After(waitFor):
		t.Fatal("both engines sent the challenge")
	}
	// Neither sends it again while it is claimed, even asked directly,
	// whatever its own view of the subscription.
	for _, e := range engines {
		again := make(chan error, 1)
		go func() { again <- webhooks.Challenge(e, "s1") }()
		select {
		case err := <-again:
			require.NoError(t, err)
		case <-ce.challenges:
			t.Fatal("an engine sent the claimed challenge")
		}
	}
	require.Empty(t, ce.challenges, "one challenge at a time")
	release.Do(func() { close(hold) })
	timeout := time.After(waitFor)
	for {
		s, err := store.GetSubscription(context.Background(), "s1")
		require.NoError(t, err)
		if s.Status == webhooks.StatusActive {
			break
		}
		select {
		case <-checked[0]:
		case <-checked[1]:
		case <-timeout:
			t.Fatal("the echoed challenge did not activate the subscription")
		}
	}
	require.Empty(t, ce.challenges)
}

// A pending subscription whose webhook changes verifies the new one: a
// challenge goes there at once, and the verification starts again.
func TestVerificationFollowsTheWebhook(t *testing.T) {
	checked := make(chan struct{}, 1)
	h := newVerifyHarness(t, memstore.New(), newMockClock(), checked)
	h.recv.queue(reply{status: http.StatusNotFound})
	rec := h.do(http.MethodPut, "/agents/*?subscription=s1", fmt.Sprintf(`{"webhook":%q,"verify":true}`, h.recv.url()))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	h.nextDelivery()
	h.waitSub(t, checked, "s1", failedAttempts(1))

	rec = h.do(http.MethodPatch, "/**?subscription=s1", fmt.Sprintf(`{"webhook":%q}`, h.recv.url()+"/moved"))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, 0, decodeSub(t, rec).Verification.Attempts)
	d := h.nextDelivery() // at once, with no tick
	require.NotEmpty(t, d.header.Get(receiver.ChallengeHeader))
}
