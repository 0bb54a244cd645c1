package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/benbjohnson/clock"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/receiver"
)

// exampleSource is a host's streams as the engine sees them: here, a map
// from path to the number of events, which doubles as the offset.
type exampleSource struct {
	mu      sync.Mutex
	streams map[string]int
}

func (s *exampleSource) info(path string, n int) webhooks.StreamInfo {
	return webhooks.StreamInfo{Path: path, Tail: fmt.Sprintf("%020d", n)}
}

func (s *exampleSource) Stream(_ context.Context, path string) (webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.streams[path]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return s.info(path, n), nil
}

func (s *exampleSource) MatchStreams(_ context.Context, p *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []webhooks.StreamInfo
	for path, n := range s.streams {
		if p.Match(path) {
			out = append(out, s.info(path, n))
		}
	}
	return out, nil
}

// append adds n events to the stream at path, creating it if need be.
func (s *exampleSource) append(path string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[path] += n
}

// exampleRequest sends one request to handler and returns the response.
func exampleRequest(handler http.Handler, method, target, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec
}

// An engine over an in-memory store, mounted in front of the host's own
// stream handler: requests with a subscription query go to the
// subscription API, callbacks to the callback API, and everything else to
// the host.
func ExampleNew() {
	ctx := context.Background()
	source := &exampleSource{streams: map[string]int{"/orders/41": 3}}
	// A fixed clock, so that the times shown below do not change.
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	e, err := webhooks.New(memstore.New(), source,
		webhooks.WithCallbackBaseURL("https://streams.example.com"), webhooks.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}

	streams := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "stream %s", r.URL.Path)
	})
	mux := http.NewServeMux()
	mux.Handle("/", e.Handler(streams))

	// New read nothing; until Start has loaded the subscriptions and the
	// token key from the store, the APIs answer 503.
	rec := exampleRequest(mux, http.MethodGet, "/**?subscriptions", "")
	fmt.Println("before start:", rec.Code)

	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Stop(ctx) }()

	// Create a subscription: the path is the glob pattern.
	rec = exampleRequest(mux, http.MethodPut, "/orders/*?subscription=orders",
		`{"webhook":"https://hooks.example.com/orders","description":"order events"}`)
	var created struct {
		ID      string `json:"subscription_id"`
		Pattern string `json:"pattern"`
		Secret  string `json:"webhook_secret"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &created)
	fmt.Println("create:", rec.Code, created.ID, created.Pattern, strings.HasPrefix(created.Secret, "whsec_"))

	// Creating it again with the same configuration is idempotent.
	rec = exampleRequest(mux, http.MethodPut, "/orders/*?subscription=orders",
		`{"webhook":"https://hooks.example.com/orders","description":"order events"}`)
	fmt.Println("again:", rec.Code)

	// The existing stream /orders/41 got an idle consumer; it is woken
	// only by new events.
	rec = exampleRequest(mux, http.MethodGet, "/**?subscriptions", "")
	fmt.Print("list: ", rec.Code, " ", rec.Body.String())

	// Other requests reach the host's handler.
	rec = exampleRequest(mux, http.MethodGet, "/orders/41", "")
	fmt.Println("host:", rec.Code, rec.Body.String())

	rec = exampleRequest(mux, http.MethodDelete, "/orders/*?subscription=orders", "")
	fmt.Println("delete:", rec.Code)
	// Output:
	// before start: 503
	// create: 201 orders /orders/* true
	// again: 200
	// list: 200 {"subscriptions":[{"subscription_id":"orders","pattern":"/orders/*","webhook":"https://hooks.example.com/orders","description":"order events","delivery":"wake","status":"active","created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z","signature":"streamhooks","retry":{"max_attempts":0,"max_age_ms":259200000,"client_errors":"retry","on_exhausted":"stop"},"max_deliveries_per_minute":0,"consecutive_failures":0,"failing_since":null,"last_success_at":null,"last_failure_at":null}]}
	// host: 200 stream /orders/41
	// delete: 204
}

// The host calls StreamAppended after each durable append. A consumer with
// pending work is woken by a signed POST to its subscription's webhook; here
// the webhook answers {"done":true}, which finishes the wake at once.
func ExampleEngine_StreamAppended() {
	ctx := context.Background()

	// The consumer's webhook endpoint.
	var secret string
	notifications := make(chan receiver.Notification, 2)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := receiver.NewVerifier(receiver.WithSecret(secret))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		n, err := v.ParseNotification(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		notifications <- *n
		_ = json.NewEncoder(w).Encode(receiver.DoneResponse{Done: true})
	}))
	defer hook.Close()

	source := &exampleSource{streams: map[string]int{}}
	e, err := webhooks.New(memstore.New(), source,
		webhooks.WithCallbackBaseURL("http://streams.example.com"),
		// The webhook is on loopback, which only development allows.
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

	rec := exampleRequest(e.SubscriptionHandler(), http.MethodPut, "/agents/*?subscription=agents",
		fmt.Sprintf(`{"webhook":%q}`, hook.URL))
	var created struct {
		Secret string `json:"webhook_secret"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &created)
	secret = created.Secret
	fmt.Println("subscribed:", rec.Code)

	// The host creates a stream and tells the engine. A stream created after
	// the subscription wakes its consumer at once, even while empty; the
	// {"done":true} answer acks it up to its tail.
	source.append("/agents/task-1", 0)
	if err := e.StreamCreated(ctx, "/agents/task-1"); err != nil {
		fmt.Println(err)
		return
	}
	show := func() {
		select {
		case n := <-notifications:
			fmt.Println("epoch", n.Epoch, "of", n.ConsumerID, "from offset", n.Streams[0].Offset,
				"triggered by", n.TriggeredBy)
		case <-time.After(10 * time.Second):
			fmt.Println("no notification")
		}
	}
	show()

	// The host appends and tells the engine: the consumer wakes again.
	source.append("/agents/task-1", 5)
	if err := e.StreamAppended(ctx, "/agents/task-1"); err != nil {
		fmt.Println(err)
		return
	}
	show()
	// Output:
	// subscribed: 201
	// epoch 1 of agents:%2Fagents%2Ftask-1 from offset -1 triggered by [/agents/task-1]
	// epoch 2 of agents:%2Fagents%2Ftask-1 from offset 00000000000000000000 triggered by [/agents/task-1]
}

// A Go consumer verifies the wake-up, reads its streams over the ordinary
// stream protocol, acks the offsets its reads ended at and says it is done.
// The first call claims the wake; the client keeps the token fresh.
func ExampleEngine_CallbackHandler() {
	ctx := context.Background()
	source := &exampleSource{streams: map[string]int{}}

	// The host: the engine's handlers on a real loopback server, because the
	// consumer calls back over HTTP.
	mux := http.NewServeMux()
	host := httptest.NewServer(mux)
	defer host.Close()
	e, err := webhooks.New(memstore.New(), source,
		webhooks.WithCallbackBaseURL(host.URL),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}))
	if err != nil {
		fmt.Println(err)
		return
	}
	mux.Handle("/", e.Handler(http.NotFoundHandler()))
	if err := e.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = e.Stop(ctx) }()

	// The consumer.
	var secret string
	finished := make(chan string, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := receiver.NewVerifier(receiver.WithSecret(secret))
		if err != nil {
			http.Error(w, "no secret", http.StatusInternalServerError)
			return
		}
		n, err := v.ParseNotification(r)
		if err != nil {
			http.Error(w, "bad notification", http.StatusUnauthorized)
			return
		}
		cc := receiver.NewCallbackClient(n, nil)
		// A real consumer reads n.Streams from their offsets here and acks
		// the Stream-Next-Offset each read returned.
		tail, _ := source.Stream(r.Context(), n.PrimaryStream)
		acked, err := cc.Ack(r.Context(), receiver.StreamOffset{Path: n.PrimaryStream, Offset: tail.Tail})
		if err != nil {
			finished <- err.Error()
			return
		}
		if _, err := cc.Done(r.Context()); err != nil {
			finished <- err.Error()
			return
		}
		finished <- fmt.Sprintf("epoch %d acked %v, done", n.Epoch, acked.Streams)
	}))
	defer hook.Close()

	rec := exampleRequest(e.SubscriptionHandler(), http.MethodPut, "/agents/*?subscription=agents",
		fmt.Sprintf(`{"webhook":%q}`, hook.URL))
	var created struct {
		Secret string `json:"webhook_secret"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &created)
	secret = created.Secret

	source.append("/agents/task-1", 3)
	if err := e.StreamCreated(ctx, "/agents/task-1"); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case msg := <-finished:
		fmt.Println(msg)
	case <-time.After(10 * time.Second):
		fmt.Println("not woken")
	}
	// Output:
	// epoch 1 acked [{/agents/task-1 00000000000000000003}], done
}
