package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/receiver"
)

// waitFor bounds every wait for one webhook; a wake takes milliseconds.
const waitFor = 10 * time.Second

// bench is what every figure on one Store shares: the configuration, the
// Store's name and kind, and one HTTP client for producers and consumers
// alike.
type bench struct {
	cfg   config
	store string
	kind  storeKind
	hc    *http.Client
}

func newBench(cfg config, store string, kind storeKind) *bench {
	// Keep a connection per concurrent caller, as a tuned client would; the
	// default of two idle connections per host would measure dialing.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = 4096
	return &bench{cfg: cfg, store: store, kind: kind, hc: &http.Client{Transport: t}}
}

func (b *bench) close() { b.hc.CloseIdleConnections() }

// capped is n, or the durable cap if the Store is durable and n exceeds it.
// A durable Store creates a few thousand consumers or subscriptions a
// second, so the default sizes would take minutes.
func (b *bench) capped(n int) int {
	if b.kind.durable && b.cfg.durableCap > 0 {
		return min(n, b.cfg.durableCap)
	}
	return n
}

// fanoutSizes are the fan-out figure's subscription counts, capped and
// without the repeats that capping makes.
func (b *bench) fanoutSizes() []int {
	var sizes []int
	for _, s := range b.cfg.fanout {
		if s = b.capped(s); !slices.Contains(sizes, s) {
			sizes = append(sizes, s)
		}
	}
	return sizes
}

// env is one figure's world: a fresh Store, the example server over it and
// a webhook receiver.
type env struct {
	b          *bench
	srv        *exampleserver.Running
	store      webhooks.Store
	closeStore func() error
	dir        string
	recv       *hookServer
}

// onWake handles one verified notification that arrived at at. It returns
// true to finish the wake synchronously with {"done":true}.
type onWake func(n *receiver.Notification, at time.Time) (done bool)

// onPush handles one verified event-push batch that arrived at at. It
// returns true to hang: the POST is answered only when the engine gives up
// on it.
type onPush func(p *receiver.EventsPayload, at time.Time) (hang bool)

// start opens a fresh Store, starts the example server on it and a receiver
// that hands every notification to wake.
func (b *bench) start(ctx context.Context, wake onWake) (_ *env, err error) {
	return b.startPush(ctx, wake, nil)
}

// startPush is start with a receiver that also hands every event-push
// batch to push.
func (b *bench) startPush(ctx context.Context, wake onWake, push onPush) (_ *env, err error) {
	e := &env{b: b}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	if e.dir, err = os.MkdirTemp("", "streamhooks-bench-"); err != nil {
		return e, err
	}
	store, closeStore, err := b.kind.open(ctx, b.cfg, e.dir)
	if err != nil {
		return e, fmt.Errorf("opening store: %w", err)
	}
	e.store, e.closeStore = store, closeStore
	if e.recv, err = newHookServer(wake, push); err != nil {
		return e, err
	}
	e.srv, err = exampleserver.Start(ctx, exampleserver.Config{
		Addr:   "127.0.0.1:0",
		Dev:    true,
		Logger: quietLogger(),
		Store:  e.store,
	})
	return e, err
}

// close stops the server, the receiver and the Store, and removes the
// Store's directory.
func (e *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// Idle keep-alive connections first: a server's Shutdown counts a
	// connection that never carried a request as busy for five seconds.
	e.b.hc.CloseIdleConnections()
	var err error
	if e.recv != nil {
		// Its connections first: the engine's Stop waits for the POSTs in
		// flight, and one the receiver hangs on ends only with them.
		err = e.recv.srv.Close()
	}
	if e.srv != nil {
		err = errors.Join(err, e.srv.Close(ctx))
	}
	if e.recv != nil {
		err = errors.Join(err, e.recv.close(ctx))
	}
	if e.closeStore != nil {
		err = errors.Join(err, e.closeStore())
	}
	if e.dir != "" {
		err = errors.Join(err, os.RemoveAll(e.dir))
	}
	return err
}

// hookServer is an in-process webhook endpoint on loopback. Subscription id's
// webhook is url/hook/id, or url/push/id for event push; the server
// verifies each POST with that subscription's secret before handing it on.
type hookServer struct {
	srv       *http.Server
	url       string
	wake      onWake
	push      onPush
	verifiers sync.Map // subscription ID → *receiver.Verifier
	served    chan error
	// refused counts notifications that failed verification.
	refused atomic.Int64
}

func newHookServer(wake onWake, push onPush) (*hookServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &hookServer{url: "http://" + ln.Addr().String(), wake: wake, push: push, served: make(chan error, 1)}
	rc.srv = &http.Server{Handler: rc, ReadHeaderTimeout: waitFor}
	go func() { rc.served <- rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	if id, ok := strings.CutPrefix(r.URL.Path, "/push/"); ok {
		rc.receivePush(w, r, id, at)
		return
	}
	v, err := rc.verifier(strings.TrimPrefix(r.URL.Path, "/hook/"))
	var n *receiver.Notification
	if err == nil {
		n, err = v.ParseNotification(r)
	}
	if err != nil {
		rc.refused.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rc.wake(n, at) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":true}`)
	}
}

// receivePush verifies and decodes a batch of subscription id, as a
// receiver must, and hands it on.
func (rc *hookServer) receivePush(w http.ResponseWriter, r *http.Request, id string, at time.Time) {
	v, err := rc.verifier(id)
	var p *receiver.EventsPayload
	if err == nil {
		p, err = v.ParseEvents(r)
	}
	if err != nil {
		rc.refused.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rc.push(p, at) {
		<-r.Context().Done()
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// verifier returns the Verifier of subscription id.
func (rc *hookServer) verifier(id string) (*receiver.Verifier, error) {
	if v, ok := rc.verifiers.Load(id); ok {
		return v.(*receiver.Verifier), nil
	}
	return nil, fmt.Errorf("no subscription %q", id)
}

func (rc *hookServer) close(ctx context.Context) error {
	err := rc.srv.Shutdown(ctx)
	if serr := <-rc.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if n := rc.refused.Load(); n > 0 {
		err = errors.Join(err, fmt.Errorf("receiver refused %d notifications", n))
	}
	return err
}

// do sends one request to the server and checks the status.
func (e *env) do(ctx context.Context, method, path, contentType string, body []byte, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	return resp, nil
}

// subscribe creates subscription id on pattern, with its webhook on the
// receiver.
func (e *env) subscribe(ctx context.Context, id, pattern string) error {
	// Unlimited: the figures measure the engine, not a rate limit.
	return e.create(ctx, id, pattern, fmt.Sprintf(`{"webhook":%q,"max_deliveries_per_minute":0}`, e.recv.url+"/hook/"+id))
}

// create creates subscription id on pattern with the request body, and
// gives the receiver its secret.
func (e *env) create(ctx context.Context, id, pattern, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, e.srv.URL+pattern+"?subscription="+id, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.b.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Secret string `json:"webhook_secret"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("creating subscription %s: %s %v", id, resp.Status, err)
	}
	v, err := receiver.NewVerifier(receiver.WithSecret(out.Secret))
	if err != nil {
		return err
	}
	e.recv.verifiers.Store(id, v)
	return nil
}

// subscribePush creates event-push subscription id on pattern, with its
// webhook on the receiver and the options in fields, JSON object members.
func (e *env) subscribePush(ctx context.Context, id, pattern, fields string) error {
	return e.create(ctx, id, pattern, fmt.Sprintf(`{"webhook":%q,"delivery":"events","max_deliveries_per_minute":0,%s}`, e.recv.url+"/push/"+id, fields))
}

// createStream creates an empty byte stream.
func (e *env) createStream(ctx context.Context, path string) error {
	_, err := e.do(ctx, http.MethodPut, path, "application/octet-stream", nil, http.StatusCreated)
	return err
}

// payload is what every append writes.
var payload = []byte("0123456789abcdef")

// appendTo appends payload to a stream and returns the new tail.
func (e *env) appendTo(ctx context.Context, path string) (string, error) {
	resp, err := e.do(ctx, http.MethodPost, path, "application/octet-stream", payload, http.StatusNoContent)
	if err != nil {
		return "", err
	}
	return resp.Header.Get("Stream-Next-Offset"), nil
}

// createStreams creates n empty streams named by name(i), with the
// configured number of concurrent requests.
func (e *env) createStreams(ctx context.Context, n int, name func(i int) string) error {
	return parallel(ctx, n, e.b.cfg.workers, func(i int) error { return e.createStream(ctx, name(i)) })
}

// consumers counts the consumers in the Store.
func (e *env) consumers(ctx context.Context) (int, error) {
	counts, err := e.store.CountConsumers(ctx)
	total := 0
	for _, n := range counts {
		total += n
	}
	return total, err
}

// parallel calls fn for 0..n-1 from the given number of goroutines and
// returns the first error; after one, the remaining calls are skipped.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
