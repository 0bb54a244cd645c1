package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// eventSource is a StreamSource of JSON streams that can read their
// events (webhooks.EventReader), as event push needs. An offset is the
// count of events before it, in 20 digits.
type eventSource struct {
	mu      sync.Mutex
	streams map[string][]string
}

func eventOffset(n int) string { return fmt.Sprintf("%020d", n) }

func (s *eventSource) Stream(_ context.Context, path string) (webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	events, ok := s.streams[path]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return webhooks.StreamInfo{Path: path, Tail: eventOffset(len(events))}, nil
}

func (s *eventSource) MatchStreams(_ context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []webhooks.StreamInfo
	for path, events := range s.streams {
		if p.Match(path) {
			out = append(out, webhooks.StreamInfo{Path: path, Tail: eventOffset(len(events))})
		}
	}
	return out, nil
}

func (s *eventSource) ReadEvents(_ context.Context, path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	events, ok := s.streams[path]
	if !ok {
		return webhooks.EventBatch{}, webhooks.ErrStreamNotFound
	}
	start, end := 0, len(events)
	if from != webhooks.OffsetNone {
		start, _ = strconv.Atoi(from)
	}
	if limit.Until != "" {
		end, _ = strconv.Atoi(limit.Until)
	}
	if limit.MaxEvents > 0 {
		end = min(end, start+limit.MaxEvents)
	}
	b := webhooks.EventBatch{JSON: true, Next: eventOffset(end), UpToDate: end == len(events)}
	for _, e := range events[start:end] {
		b.Events = append(b.Events, []byte(e))
	}
	return b, nil
}

// An events subscription POSTs the events themselves. The receiver checks
// the signature on the raw body, handles each delivery id once (a
// receiver.Dedup), and answers 2xx, which moves the subscription's cursor
// on that stream.
func Example_eventPush() {
	ctx := context.Background()
	var secret string
	batches := make(chan receiver.EventsPayload, 4)
	dedup := receiver.NewDedup(time.Hour, 10000, nil)
	hook := httptest.NewServer(dedup.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := receiver.NewVerifier(receiver.WithSecret(secret))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		p, err := v.ParseEvents(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		batches <- *p
		w.WriteHeader(http.StatusNoContent)
	})))
	defer hook.Close()

	source := &eventSource{streams: map[string][]string{}}
	e, err := webhooks.New(memstore.New(), source,
		webhooks.WithCallbackBaseURL("http://streams.example.com"),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Stop(ctx) }()

	rec := exampleRequest(e.SubscriptionHandler(), http.MethodPut, "/orders/*?subscription=orders",
		fmt.Sprintf(`{"webhook":%q,"delivery":"events","batch":{"max_size":2,"max_wait_ms":0}}`, hook.URL))
	var created struct {
		Secret string `json:"webhook_secret"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &created)
	secret = created.Secret
	fmt.Println("subscribed:", rec.Code)

	source.mu.Lock()
	source.streams["/orders/eu"] = []string{`{"id":1}`, `{"id":2}`, `{"id":3}`}
	source.mu.Unlock()
	if err := e.StreamCreated(ctx, "/orders/eu"); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		select {
		case p := <-batches:
			fmt.Printf("%s: %d events from %s to %s\n", p.Stream, len(p.Events), p.FirstOffset, p.Offset)
		case <-time.After(10 * time.Second):
			fmt.Println("no batch")
		}
	}
	// Output:
	// subscribed: 201
	// /orders/eu: 2 events from -1 to 00000000000000000002
	// /orders/eu: 1 events from 00000000000000000002 to 00000000000000000003
}
