package inbox_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/inbox"
	"github.com/streamhooks/webhooks/memstore"
)

const (
	githubSecret = "It's a Secret to Everybody"
	records      = "/inbox/github/records"
	deadLetters  = "/inbox/github/dead"
	waitFor      = 5 * time.Second
)

// host is a stream server in memory, with the engine and the inbox
// mounted as a host mounts them: the Handler appends to its streams, and
// the engine delivers the records to a Processor.
type host struct {
	t         testing.TB
	mu        sync.Mutex
	streams   map[string][][]byte
	engine    *webhooks.Engine
	inbox     *inbox.Handler
	processor *inbox.Processor
	dead      chan inbox.DeadLetter // each dead letter appended
	onDead    func(raw []byte)      // if set, called with each dead letter as it is appended
}

// newHost starts a host whose processor's subscription gives a batch
// maxAttempts, retried at once, with batches of up to batchSize records.
func newHost(t testing.TB, maxAttempts, batchSize int) *host {
	t.Helper()
	h := &host{t: t, streams: map[string][][]byte{records: nil, deadLetters: nil}, dead: make(chan inbox.DeadLetter, 100)}
	providers := []inbox.Provider{{Name: "github", Scheme: inbox.GitHub{Secret: githubSecret}}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	// Every delivery is appended, duplicates too: the processor's dedup is
	// under test, not the Handler's.
	h.inbox, err = inbox.New(h, providers, inbox.WithDedup(0, 0), inbox.WithLogger(quiet))
	require.NoError(t, err)
	h.processor, err = inbox.NewProcessor(h, providers, inbox.WithLogger(quiet))
	require.NoError(t, err)
	h.engine, err = webhooks.New(memstore.New(), h,
		webhooks.WithCallbackBaseURL("http://127.0.0.1/"),
		webhooks.WithLogger(quiet),
		webhooks.WithBackoff(func(int) time.Duration { return time.Millisecond }),
		webhooks.WithBatchHandler("inbox", h.processor.HandleBatch))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, h.engine.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, h.engine.Stop(ctx))
	})
	_, err = h.engine.CreateSubscription(ctx, &webhooks.Subscription{
		ID: "inbox", Pattern: "/inbox/*/records", Delivery: webhooks.DeliveryHandler, Handler: "inbox",
		Events: &webhooks.EventsOptions{MaxBatchEvents: batchSize, MaxBatchBytes: 1 << 20},
		Retry:  &webhooks.RetryPolicy{MaxAttempts: maxAttempts},
	}, "")
	require.NoError(t, err)
	return h
}

func offset(n int) string { return fmt.Sprintf("%020d", n) }

func (h *host) Stream(_ context.Context, path string) (webhooks.StreamInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	events, ok := h.streams[path]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return webhooks.StreamInfo{Path: path, Tail: offset(len(events))}, nil
}

func (h *host) MatchStreams(_ context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []webhooks.StreamInfo
	for path, events := range h.streams {
		if p.Match(path) {
			out = append(out, webhooks.StreamInfo{Path: path, Tail: offset(len(events))})
		}
	}
	return out, nil
}

func (h *host) ReadEvents(_ context.Context, path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	events, ok := h.streams[path]
	if !ok {
		return webhooks.EventBatch{}, webhooks.ErrStreamNotFound
	}
	pos, end := 0, len(events)
	if from != webhooks.OffsetNone {
		var err error
		if pos, err = strconv.Atoi(from); err != nil || pos > len(events) {
			return webhooks.EventBatch{}, fmt.Errorf("no offset %q in %s", from, path)
		}
	}
	if limit.Until != "" {
		until, _ := strconv.Atoi(limit.Until)
		end = min(end, until)
	}
	if limit.MaxEvents > 0 {
		end = min(end, pos+limit.MaxEvents)
	}
	return webhooks.EventBatch{JSON: true, Events: events[pos:end], Next: offset(end), UpToDate: end == len(events)}, nil
}

// Append appends to an existing stream and tells the engine.
func (h *host) Append(ctx context.Context, stream string, record []byte) error {
	h.mu.Lock()
	if _, ok := h.streams[stream]; !ok {
		h.mu.Unlock()
		return webhooks.ErrStreamNotFound
	}
	h.streams[stream] = append(h.streams[stream], append([]byte(nil), record...))
	h.mu.Unlock()
	if stream == deadLetters {
		var d inbox.DeadLetter
		if err := json.Unmarshal(record, &d); err != nil {
			return err
		}
		h.dead <- d
		if h.onDead != nil {
			h.onDead(record)
		}
	}
	return h.engine.StreamAppended(ctx, stream)
}

// deliver posts a GitHub delivery to the inbox, signed with secret.
func (h *host) deliver(id, body, secret string) {
	h.t.Helper()
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	req := httptest.NewRequest(http.MethodPost, "/inbox/github", strings.NewReader(body))
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	w := httptest.NewRecorder()
	h.inbox.ServeHTTP(w, req)
	require.Equal(h.t, http.StatusAccepted, w.Code)
}

// nextDead waits for the next dead letter.
func (h *host) nextDead() inbox.DeadLetter {
	h.t.Helper()
	select {
	case d := <-h.dead:
		return d
	case <-time.After(waitFor):
		h.t.Fatal("no dead letter")
		return inbox.DeadLetter{}
	}
}

// processed hands the test each record the handler processes, by delivery
// id, and fails while fail says so.
func processed(fail func(id string) error) (inbox.RecordHandler, chan string) {
	ids := make(chan string, 100)
	return func(_ context.Context, rec *inbox.Record) error {
		if err := fail(rec.DeliveryID); err != nil {
			return err
		}
		ids <- rec.DeliveryID
		return nil
	}, ids
}

// next waits for the next id on ids.
func next(t testing.TB, ids chan string) string {
	t.Helper()
	select {
	case id := <-ids:
		return id
	case <-time.After(waitFor):
		t.Fatal("nothing processed")
		return ""
	}
}

// While the processor fails, records wait in their stream; once it
// recovers each is processed, in order, once, and one delivered twice is
// processed once.
func TestProcessorFailingLosesNothing(t *testing.T) {
	h := newHost(t, 0, 10)
	var mu sync.Mutex
	failures := 3
	handler, ids := processed(func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return errors.New("downstream unavailable")
		}
		return nil
	})
	h.processor.Handle("github", "push", handler)
	h.deliver("d1", `{"n":1}`, githubSecret)
	h.deliver("d2", `{"n":2}`, githubSecret)
	h.deliver("d1", `{"n":1}`, githubSecret) // the sender's retry
	h.deliver("d3", `{"n":3}`, githubSecret)

	require.Equal(t, []string{"d1", "d2", "d3"}, []string{next(t, ids), next(t, ids), next(t, ids)})
	h.deliver("d4", `{"n":4}`, githubSecret)
	require.Equal(t, "d4", next(t, ids), "nothing else came before it")
}

// A record whose signature fails goes to the dead letters with the
// reason, and is never processed; the stream goes on.
func TestProcessorBadSignatureIsADeadLetter(t *testing.T) {
	h := newHost(t, 5, 10)
	handler, ids := processed(func(string) error { return nil })
	h.processor.Handle("github", "", handler)
	h.deliver("forged", `{"n":1}`, "not the secret")
	h.deliver("d2", `{"n":2}`, githubSecret)

	d := h.nextDead()
	require.Equal(t, "forged", d.DeliveryID)
	require.Equal(t, `{"n":1}`, string(d.Body), "the record as received")
	require.Contains(t, d.Reason, inbox.ErrSignatureMismatch.Error())
	require.Empty(t, d.Errors)
	require.Equal(t, "d2", next(t, ids), "the forged record was never processed")
}

// A record that fails every attempt of its batch goes to the dead letters
// with its errors, and the stream goes on; replayed from there, it is
// processed again.
func TestProcessorDeadLetterAndReplay(t *testing.T) {
	h := newHost(t, 3, 1)
	var mu sync.Mutex
	broken := true
	handler, ids := processed(func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		if id == "d1" && broken {
			return errors.New("cannot parse the payload")
		}
		return nil
	})
	h.processor.Handle("github", "push", handler)
	h.deliver("d1", `{"n":1}`, githubSecret)
	h.deliver("d2", `{"n":2}`, githubSecret)

	d := h.nextDead()
	require.Equal(t, "d1", d.DeliveryID)
	require.Equal(t, "failed 3 attempts: cannot parse the payload", d.Reason)
	require.Equal(t, []string{"cannot parse the payload", "cannot parse the payload", "cannot parse the payload"}, d.Errors)
	require.False(t, d.DeadAt.IsZero())
	require.Equal(t, "d2", next(t, ids), "the stream goes on")

	mu.Lock()
	broken = false
	mu.Unlock()
	h.mu.Lock()
	dead := h.streams[deadLetters][0]
	h.mu.Unlock()
	require.NoError(t, h.processor.Replay(context.Background(), dead))
	require.Equal(t, "d1", next(t, ids), "processed again")
	require.Error(t, h.processor.Replay(context.Background(), []byte(`{"provider":"gitlab"}`)))

	// The operator's route does the same with the dead letter as its body.
	replay := h.processor.ReplayHandler()
	rec := httptest.NewRecorder()
	replay.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inbox/github/dead?replay", bytes.NewReader(dead)))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "d1", next(t, ids), "processed again through the route")
	for body, status := range map[string]int{
		`{"n":1}`: http.StatusBadRequest,
		`{"provider":"gitlab","reason":"x","body":"e30="}`: http.StatusNotFound,
	} {
		rec := httptest.NewRecorder()
		replay.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
		require.Equal(t, status, rec.Code, body)
		require.Contains(t, rec.Body.String(), `"ok":false`)
	}
	rec = httptest.NewRecorder()
	replay.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// A replay made the moment the dead letter is appended, before the
// processor has noted the original as dealt with, is processed all the
// same: the replayed record is a new record, which the note of the
// original does not cover.
func TestProcessorReplayRacesTheDeadLetter(t *testing.T) {
	h := newHost(t, 5, 1)
	replayed := make(chan error, 1)
	var once sync.Once
	h.onDead = func(raw []byte) {
		once.Do(func() { replayed <- h.processor.Replay(context.Background(), raw) })
	}
	h.deliver("forged", `{"n":1}`, "not the secret")
	first := h.nextDead()
	require.NoError(t, <-replayed)
	second := h.nextDead()
	require.Equal(t, first.DeliveryID, second.DeliveryID, "verified again, and dead again")
	require.Equal(t, first.Body, second.Body)
	require.NotEmpty(t, second.Replay, "the replayed record says it is a replay")
	require.Empty(t, first.Replay)
}

// appendRaw appends event to stream as a client with write access to the
// stream could, bypassing the Handler.
func (h *host) appendRaw(stream, event string) {
	h.t.Helper()
	require.NoError(h.t, h.Append(context.Background(), stream, []byte(event)))
}

// A record the processor cannot handle, whatever its shape, is a dead
// letter with the reason and the event as stored, and the records after
// it are processed: one bad record never blocks the others.
func TestProcessorBadRecordsAreDeadLetters(t *testing.T) {
	h := newHost(t, 3, 10)
	handler, ids := processed(func(string) error { return nil })
	h.processor.Handle("github", "", handler)
	h.deliver("d1", `{"n":1}`, githubSecret)
	bad := map[string]string{
		`[1]`:                                   "not a record",
		`"text"`:                                "not a record",
		`{"provider":"github","body":"!!"}`:     "not a record",
		`{"provider":"gitlab","body":"e30="}`:   `provider "gitlab"`,
		`{"body":"e30="}`:                       `provider ""`,
		`{"provider":"github","header":"nope"}`: "not a record",
	}
	for event := range bad {
		h.appendRaw(records, event)
	}
	h.deliver("d2", `{"n":2}`, githubSecret)

	for range bad {
		d := h.nextDead()
		want, ok := bad[string(d.Raw)]
		require.True(t, ok, "the event as stored: %s", d.Raw)
		require.Contains(t, d.Reason, want)
		require.Equal(t, "github", d.Provider, "the stream's provider")
		delete(bad, string(d.Raw))
	}
	require.Equal(t, []string{"d1", "d2"}, []string{next(t, ids), next(t, ids)}, "the stream goes on")

	// Such a dead letter holds no record to replay.
	h.mu.Lock()
	dead := h.streams[deadLetters][0]
	h.mu.Unlock()
	require.Error(t, h.processor.Replay(context.Background(), dead))
	rec := httptest.NewRecorder()
	h.processor.ReplayHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(dead)))
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
}

// A record no handler takes is acknowledged unprocessed; a handler's
// panic is an error, retried.
func TestProcessorUnhandledAndPanics(t *testing.T) {
	h := newHost(t, 0, 10)
	var mu sync.Mutex
	panicked := false
	handler, ids := processed(func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if !panicked {
			panicked = true
			panic("nil map")
		}
		return nil
	})
	h.processor.Handle("github", "issues", handler)
	h.deliver("push-1", `{"n":1}`, githubSecret) // X-GitHub-Event: push

	req := httptest.NewRequest(http.MethodPost, "/inbox/github", strings.NewReader(`{}`))
	mac := hmac.New(sha256.New, []byte(githubSecret))
	mac.Write([]byte(`{}`))
	req.Header.Set("X-GitHub-Delivery", "issue-1")
	req.Header.Set("X-GitHub-Event", "issues")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	h.inbox.ServeHTTP(httptest.NewRecorder(), req)
	require.Equal(t, "issue-1", next(t, ids), "the push went by unprocessed; the issue after a panic")
}

// BenchmarkReceiptWhileProcessingHangs measures receipt while every
// record's processing hangs: the handler never returns, the engine
// abandons it at each timeout, and receipt is unaffected. It reports the
// 99th percentile of a delivery's receipt.
func BenchmarkReceiptWhileProcessingHangs(b *testing.B) {
	h := newHost(b, 0, 10)
	hang := make(chan struct{})
	defer close(hang)
	h.processor.Handle("github", "", func(ctx context.Context, _ *inbox.Record) error {
		<-hang
		return nil
	})
	body := `{"action":"opened","payload":"` + strings.Repeat("x", 2000) + `"}`
	mac := hmac.New(sha256.New, []byte(githubSecret))
	mac.Write([]byte(body))
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	var took []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req := httptest.NewRequest(http.MethodPost, "/inbox/github", strings.NewReader(body))
		req.Header.Set("X-GitHub-Delivery", strconv.Itoa(i))
		req.Header.Set("X-Hub-Signature-256", sig)
		w := httptest.NewRecorder()
		start := time.Now()
		h.inbox.ServeHTTP(w, req)
		took = append(took, time.Since(start))
		if w.Code != http.StatusAccepted {
			b.Fatalf("status %d", w.Code)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}
