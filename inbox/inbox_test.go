package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// memAppender keeps what is appended, and fails while err is set.
type memAppender struct {
	mu      sync.Mutex
	err     error
	streams map[string][][]byte
}

func (a *memAppender) Append(_ context.Context, stream string, record []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if a.streams == nil {
		a.streams = make(map[string][][]byte)
	}
	a.streams[stream] = append(a.streams[stream], record)
	return nil
}

func (a *memAppender) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
}

// records decodes the records appended to stream.
func (a *memAppender) records(t *testing.T, stream string) []Record {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var recs []Record
	for _, data := range a.streams[stream] {
		var rec Record
		require.NoError(t, json.Unmarshal(data, &rec))
		recs = append(recs, rec)
	}
	return recs
}

const githubStream = "/inbox/github/records"

// testProviders is one provider of each scheme; slack answers 200.
func testProviders() []Provider {
	return []Provider{
		{Name: "github", Scheme: GitHub{Secret: "gh-secret"}},
		{Name: "stripe", Scheme: Stripe{Secret: "whsec_stripe_test"}},
		{Name: "standard", Scheme: StandardWebhooks{Secret: standardSecret}},
		{Name: "slack", Scheme: Slack{Secret: slackSecret}, Status: http.StatusOK},
		{Name: "generic", Scheme: HMAC{Secret: "s", Header: "X-Sig", DeliveryIDHeader: "X-Id"}, Stream: "/elsewhere"},
	}
}

// newTestHandler returns a Handler for testProviders on a memAppender and
// a mock clock.
func newTestHandler(t *testing.T, opts ...Option) (*Handler, *memAppender, *mockclock.Clock) {
	t.Helper()
	app := &memAppender{}
	clk := mockclock.New()
	clk.Set(receivedAt)
	h, err := New(app, testProviders(), append([]Option{WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return h, app, clk
}

// post sends body to path with the given headers and returns the response.
func post(h http.Handler, path, body string, kv ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for i := 0; i < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// errorOf decodes an error response and checks its shape.
func errorOf(t *testing.T, w *httptest.ResponseRecorder) (code, message string) {
	t.Helper()
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	var resp struct {
		OK    *bool `json:"ok"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &resp), w.Body.String())
	require.NotNil(t, resp.OK)
	assert.False(t, *resp.OK)
	return resp.Error.Code, resp.Error.Message
}

func TestAccepted(t *testing.T) {
	h, app, _ := newTestHandler(t)
	// Not UTF-8, and JSON whose whitespace matters to its signature.
	body := "{ \"b\": 1,\n \"a\": \"\xff\xfe\" }"
	w := post(h, "/inbox/github", body,
		"Content-Type", "application/json",
		"X-GitHub-Delivery", "d-1",
		"X-GitHub-Event", "push",
		"X-Hub-Signature-256", "sha256=00",
		"User-Agent", "GitHub-Hookshot/1",
		"Authorization", "Bearer secret",
		"Cookie", "session=secret")
	assert.Equal(t, http.StatusAccepted, w.Code)
	assert.Empty(t, w.Body.String())

	recs := app.records(t, githubStream)
	require.Len(t, recs, 1)
	rec := recs[0]
	assert.Equal(t, "github", rec.Provider)
	assert.Equal(t, "d-1", rec.DeliveryID)
	assert.Equal(t, []byte(body), rec.Body)
	assert.True(t, receivedAt.Equal(rec.ReceivedAt), rec.ReceivedAt)
	assert.Equal(t, http.Header{
		"Content-Type":        {"application/json"},
		"X-Github-Delivery":   {"d-1"},
		"X-Github-Event":      {"push"},
		"X-Hub-Signature-256": {"sha256=00"},
	}, rec.Header)
	raw := string(app.streams[githubStream][0])
	assert.NotContains(t, raw, "secret", "credentials are never recorded")
}

func TestStatusAndStream(t *testing.T) {
	h, app, _ := newTestHandler(t)
	assert.Equal(t, http.StatusOK, post(h, "/inbox/slack", "token=x").Code)
	assert.Len(t, app.records(t, "/inbox/slack/records"), 1)
	assert.Equal(t, http.StatusAccepted, post(h, "/hooks/generic", "{}", "X-Sig", "ab", "X-Id", "1").Code)
	recs := app.records(t, "/elsewhere")
	require.Len(t, recs, 1)
	assert.Equal(t, http.Header{"X-Sig": {"ab"}, "X-Id": {"1"}}, recs[0].Header)
}

func TestUnknownProvider(t *testing.T) {
	h, app, _ := newTestHandler(t)
	// A path below a provider's segment is that provider's
	// (TestRoutingMetadata).
	for _, path := range []string{"/inbox/gitlab", "/inbox/", "/inbox/gitlab/x", "/"} {
		w := post(h, path, "{}")
		assert.Equal(t, http.StatusNotFound, w.Code, path)
		code, _ := errorOf(t, w)
		assert.Equal(t, "PROVIDER_NOT_FOUND", code)
	}
	assert.Empty(t, app.streams)
}

func TestMethodNotAllowed(t *testing.T) {
	h, app, _ := newTestHandler(t)
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodHead, http.MethodDelete} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, "/inbox/github", strings.NewReader("{}")))
		assert.Equal(t, http.StatusMethodNotAllowed, w.Code, method)
		assert.Equal(t, http.MethodPost, w.Header().Get("Allow"))
		if method != http.MethodHead {
			code, _ := errorOf(t, w)
			assert.Equal(t, "INVALID_REQUEST", code)
		}
	}
	assert.Empty(t, app.streams)
}

func TestOversized(t *testing.T) {
	h, app, _ := newTestHandler(t, WithMaxBodyBytes(10))
	assert.Equal(t, http.StatusAccepted, post(h, "/inbox/github", strings.Repeat("x", 10)).Code)

	w := post(h, "/inbox/github", strings.Repeat("x", 11))
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	code, _ := errorOf(t, w)
	assert.Equal(t, "INVALID_REQUEST", code)

	// Without a Content-Length, the limit holds while reading.
	r := httptest.NewRequest(http.MethodPost, "/inbox/github", io.MultiReader(strings.NewReader(strings.Repeat("x", 11))))
	r.ContentLength = -1
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)

	assert.Len(t, app.records(t, githubStream), 1)
}

func TestDefaultBodyLimit(t *testing.T) {
	h, _, _ := newTestHandler(t)
	assert.Equal(t, http.StatusAccepted, post(h, "/inbox/github", strings.Repeat("x", int(DefaultMaxBodyBytes))).Code)
	assert.Equal(t, http.StatusRequestEntityTooLarge, post(h, "/inbox/github", strings.Repeat("x", int(DefaultMaxBodyBytes)+1)).Code)
}

// TestAppendFailure checks that a delivery that could not be appended is
// refused with 503, not remembered as seen, and appended when its sender
// retries.
func TestAppendFailure(t *testing.T) {
	var logs strings.Builder
	h, app, _ := newTestHandler(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	app.fail(errors.New("disk on fire at /var/lib/streams"))
	w := post(h, "/inbox/github", "{}", "X-GitHub-Delivery", "d-1")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "5", w.Header().Get("Retry-After"))
	code, message := errorOf(t, w)
	assert.Equal(t, "SERVICE_UNAVAILABLE", code)
	assert.NotContains(t, message, "disk", "internal error text stays in the log")
	assert.Empty(t, app.records(t, githubStream))
	assert.Contains(t, logs.String(), "disk on fire")

	app.fail(nil)
	assert.Equal(t, http.StatusAccepted, post(h, "/inbox/github", "{}", "X-GitHub-Delivery", "d-1").Code)
	assert.Len(t, app.records(t, githubStream), 1)
}

// TestDuplicates checks that a delivery id is appended once per provider,
// wherever each scheme finds it, and that its duplicates get the same
// answer.
func TestDuplicates(t *testing.T) {
	h, app, _ := newTestHandler(t)
	for _, tc := range []struct {
		provider, stream string
		body             string
		kv               []string
		status           int
	}{
		{"github", githubStream, "{}", []string{"X-GitHub-Delivery", "same"}, http.StatusAccepted},
		{"stripe", "/inbox/stripe/records", `{"id": "same", "type": "x"}`, nil, http.StatusAccepted},
		{"standard", "/inbox/standard/records", "{}", []string{"Webhook-Id", "same"}, http.StatusAccepted},
		{"standard", "/inbox/standard/records", "{}", []string{"Svix-Id", "same"}, http.StatusAccepted},
		{"slack", "/inbox/slack/records", `{"event_id": "same"}`, nil, http.StatusOK},
		{"generic", "/elsewhere", "{}", []string{"X-Id", "same"}, http.StatusAccepted},
	} {
		for range 2 {
			assert.Equal(t, tc.status, post(h, "/inbox/"+tc.provider, tc.body, tc.kv...).Code, tc.provider)
		}
		recs := app.records(t, tc.stream)
		require.Len(t, recs, 1, tc.provider)
		assert.Equal(t, "same", recs[0].DeliveryID)
	}
}

// TestConcurrentDeliveries checks, under the race detector, that
// deliveries received at once are each appended, and their duplicates
// not once one has been.
func TestConcurrentDeliveries(t *testing.T) {
	h, app, _ := newTestHandler(t)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			post(h, "/inbox/github", "{}", "X-GitHub-Delivery", fmt.Sprint(i))
		})
	}
	wg.Wait()
	for i := range 50 {
		wg.Go(func() {
			assert.Equal(t, http.StatusAccepted, post(h, "/inbox/github", "{}", "X-GitHub-Delivery", fmt.Sprint(i)).Code)
		})
	}
	wg.Wait()
	assert.Len(t, app.records(t, githubStream), 50)
}

// TestNoDeliveryID checks that deliveries without an id are all appended.
func TestNoDeliveryID(t *testing.T) {
	h, app, _ := newTestHandler(t)
	for range 2 {
		post(h, "/inbox/github", "{}")
		post(h, "/inbox/stripe", "not JSON")
		post(h, "/inbox/slack", "command=%2Fweather")
	}
	assert.Len(t, app.records(t, githubStream), 2)
	assert.Len(t, app.records(t, "/inbox/stripe/records"), 2)
	assert.Len(t, app.records(t, "/inbox/slack/records"), 2)
}

func TestDedupWindow(t *testing.T) {
	h, app, clk := newTestHandler(t, WithDedup(time.Hour, 10))
	send := func() { post(h, "/inbox/github", "{}", "X-GitHub-Delivery", "d-1") }
	send()
	clk.Add(time.Hour - time.Nanosecond)
	send()
	assert.Len(t, app.records(t, githubStream), 1, "within the window")
	clk.Add(time.Nanosecond)
	send()
	assert.Len(t, app.records(t, githubStream), 2, "once the window has passed")
	send()
	assert.Len(t, app.records(t, githubStream), 2, "the window starts again")
}

func TestDedupOff(t *testing.T) {
	h, app, _ := newTestHandler(t, WithDedup(0, 0))
	post(h, "/inbox/github", "{}", "X-GitHub-Delivery", "d-1")
	post(h, "/inbox/github", "{}", "X-GitHub-Delivery", "d-1")
	assert.Len(t, app.records(t, githubStream), 2)
}

// TestDedupCapacity checks that the oldest ids are forgotten beyond the
// capacity, and that memory stays bounded however many ids come.
func TestDedupCapacity(t *testing.T) {
	h, app, clk := newTestHandler(t, WithDedup(time.Hour, 3))
	send := func(id string) { post(h, "/inbox/github", "{}", "X-GitHub-Delivery", id) }
	for _, id := range []string{"1", "2", "3", "4"} {
		send(id)
		clk.Add(time.Second)
	}
	send("4")
	send("2")
	assert.Len(t, app.records(t, githubStream), 4, "2, 3 and 4 are remembered")
	send("1")
	assert.Len(t, app.records(t, githubStream), 5, "1 was forgotten")

	d := newDedup(time.Hour, 100)
	for i := range 10_000 {
		d.add("p", fmt.Sprint(i), receivedAt)
		require.LessOrEqual(t, len(d.ids), 100)
		require.LessOrEqual(t, len(d.ring), 100)
	}
	assert.True(t, d.has("p", "9999", receivedAt))
	assert.True(t, d.has("p", "9900", receivedAt))
	assert.False(t, d.has("p", "9899", receivedAt))
	assert.False(t, d.has("q", "9999", receivedAt), "ids are per provider")
}

func TestNewRefuses(t *testing.T) {
	app := &memAppender{}
	gh := GitHub{Secret: "s"}
	_, err := New(nil, []Provider{{Name: "github", Scheme: gh}})
	assert.Error(t, err, "no appender")
	for _, tc := range []struct {
		name      string
		providers []Provider
	}{
		{"empty name", []Provider{{Scheme: gh}}},
		{"name with a slash", []Provider{{Name: "a/b", Scheme: gh}}},
		{"dot-dot name", []Provider{{Name: "..", Scheme: gh}}},
		{"no scheme", []Provider{{Name: "github"}}},
		{"twice", []Provider{{Name: "github", Scheme: gh}, {Name: "github", Scheme: gh}}},
		{"3xx status", []Provider{{Name: "github", Scheme: gh, Status: http.StatusFound}}},
		{"credential header", []Provider{{Name: "x", Scheme: HMAC{Header: "authorization"}}}},
		{"cookie as id", []Provider{{Name: "x", Scheme: HMAC{Header: "X-Sig", DeliveryIDHeader: "Cookie"}}}},
		{"no header", []Provider{{Name: "x", Scheme: HMAC{}}}},
		{"standard secret not base64", []Provider{{Name: "s", Scheme: StandardWebhooks{Secret: "whsec_not base64!"}}}},
		{"standard secret empty after whsec_", []Provider{{Name: "s", Scheme: StandardWebhooks{Secret: "whsec_"}}}},
	} {
		_, err := New(app, tc.providers)
		assert.Error(t, err, tc.name)
	}
	// An unset secret is allowed: it verifies nothing (ErrUnusableSecret).
	for _, secret := range []string{"", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		_, err := NewProcessor(app, []Provider{{Name: "s", Scheme: StandardWebhooks{Secret: secret}}})
		assert.NoError(t, err, secret)
	}
	_, err = NewProcessor(app, []Provider{{Name: "s", Scheme: StandardWebhooks{Secret: "whsec_%%"}}})
	assert.ErrorContains(t, err, `provider "s": its secret is not base64 after whsec_`)
	for _, opt := range []Option{WithMaxBodyBytes(0), WithDedup(-time.Second, 1), WithDedup(time.Second, -1)} {
		_, err := New(app, []Provider{{Name: "github", Scheme: gh}}, opt)
		assert.Error(t, err)
	}
}
