package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/receiver"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// crashChildEnv makes the test binary run the stream server instead of the
// tests, so the crash test kills the real program.
const crashChildEnv = "STREAMSERVER_CRASH_CHILD"

var (
	crashKills = flag.Int("crash.kills", 12, "how many times TestCrashRecovery kills the server")
	crashSeed  = flag.Uint64("crash.seed", 0, "seed of TestCrashRecovery's kill schedule; 0 picks one")
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

const (
	crashWaking   = 2 * time.Second
	crashLiveness = 3 * time.Second
	crashStreams  = 6
)

// crashSubs are the test's subscriptions: every stream has a consumer of
// "all", and /crash/s1 one of "one" too.
var crashSubs = map[string]string{"all": "/crash/*", "one": "/crash/s1", "none": "/elsewhere/**"}

// TestCrashRecovery runs the example server as a child process on a data
// directory, with consumers cycling through wake, claim, ack and done, and
// kills it with SIGKILL again and again: at random moments, while a webhook
// is being delivered, and between an ack reaching the server and its
// response. After every kill it reads the engine's database and checks that
// nothing was lost; at the end every consumer must catch up.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a server process many times")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	w := newCrashWorld(t)
	w.start()
	for id, pattern := range crashSubs {
		w.subscribe(id, pattern)
	}
	for i := 1; i <= crashStreams; i++ {
		w.createStream(fmt.Sprintf("/crash/s%d", i))
	}
	stopWriter := w.writeContinuously()

	for kill := range *crashKills {
		switch moment := kill % 3; moment {
		case 0:
			time.Sleep(time.Duration(50+rng.IntN(500)) * time.Millisecond)
		case 1:
			w.killOn(&w.onWebhook, "mid-delivery")
		case 2:
			w.killOn(&w.onAckSent, "between an ack and its response")
		}
		w.kill()
		w.checkDurableState()
		w.start()
	}

	// Deadlines that pass while the server is down fire at start-up.
	w.stall.Store(true)
	w.waitAllLive()
	w.appendToAll()
	w.kill()
	w.checkDurableState()
	live, deadline := w.liveAtKill()
	time.Sleep(time.Until(deadline) + 100*time.Millisecond)
	before := map[string]int64{}
	for id, e := range w.epochs() {
		if live[id] {
			before[id] = e
		}
	}
	require.NotEmpty(t, before, "no consumer was LIVE at the kill")
	w.stall.Store(false)
	w.start()
	w.waitRewoken(before, time.Now())

	stopWriter()
	w.waitCaughtUp()
	w.checkNoTokenRefused()
}

// crashWorld is the server processes, their data directory or database,
// the webhook receiver acting as every consumer, and what the test has
// observed.
type crashWorld struct {
	// args are further flags every server starts with.
	args []string
	t    *testing.T
	// dir is the server's data directory, for the SQLite store; with dsn
	// set instead, every server keeps its state in that PostgreSQL
	// database.
	dir   string
	dsn   string
	procs []*serverProc
	// waking and liveness are the servers' timeouts.
	waking, liveness time.Duration
	// callbacksTo, if not negative, is the one server consumers call back
	// on; otherwise each callback goes to a random running server.
	callbacksTo atomic.Int32
	recv        *httptest.Server
	client      *http.Client
	// callbacks carries the consumers' callbacks.
	callbacks *http.Transport
	logs      *syncBuffer
	stall     atomic.Bool
	workers   sync.WaitGroup

	// onWebhook and onAckSent, when set, are closed by the next webhook to
	// arrive or the next ack to be sent, which then waits for the kill.
	onWebhook atomic.Pointer[chan struct{}]
	onAckSent atomic.Pointer[chan struct{}]

	mu       sync.Mutex
	secrets  map[string]string                // subscription → secret
	appended map[string]string                // stream → tail after its last successful append
	acked    map[string]map[string]string     // consumer → stream → offset acked with a 200
	notified map[string]receiver.Notification // consumer → latest notification
	wakes    map[string]map[int64]string      // consumer → epoch → wake id
	stored   map[string]*webhooks.Consumer    // consumer → state read after the last kill
	refused  []string                         // callbacks refused with TOKEN_INVALID
	posts    map[string]map[int64]int         // consumer → epoch → webhook POSTs received
	modes    map[string]receiverMode          // subscription → how its webhooks are answered
}

// receiverMode is how the receiver answers a subscription's webhooks.
type receiverMode int

const (
	consumeAll  receiverMode = iota // 200, then claim, ack every stream's tail and say done
	hang                            // never answer: the consumer stays WAKING
	claimAndAck                     // 200, then claim and ack the tails, and fall silent: LIVE
	fail                            // 500: retries are due
)

// serverProc is one example-server process; cmd is nil while it is down.
type serverProc struct {
	addr   string
	base   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// newCrashWorld is one server on a data directory, with SQLite.
func newCrashWorld(t *testing.T) *crashWorld {
	return newWorld(t, 1, "")
}

// newWorld is n servers on one PostgreSQL database named by dsn, or, with
// no dsn, one server on a data directory.
func newWorld(t *testing.T, n int, dsn string) *crashWorld {
	w := &crashWorld{
		t:         t,
		dsn:       dsn,
		waking:    crashWaking,
		liveness:  crashLiveness,
		modes:     map[string]receiverMode{},
		client:    &http.Client{Timeout: 5 * time.Second},
		callbacks: &http.Transport{},
		logs:      &syncBuffer{},
		secrets:   map[string]string{},
		appended:  map[string]string{},
		acked:     map[string]map[string]string{},
		notified:  map[string]receiver.Notification{},
		stored:    map[string]*webhooks.Consumer{},
		wakes:     map[string]map[int64]string{},
		posts:     map[string]map[int64]int{},
	}
	if dsn == "" {
		w.dir = t.TempDir()
	}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		w.procs = append(w.procs, &serverProc{addr: addr, base: "http://" + addr})
	}
	w.callbacksTo.Store(-1)
	w.recv = httptest.NewServer(http.HandlerFunc(w.webhook))
	t.Cleanup(func() {
		w.kill()
		w.workers.Wait()
		w.recv.Close()
		w.client.CloseIdleConnections()
		w.callbacks.CloseIdleConnections()
		if t.Failed() {
			t.Logf("server logs (tail):\n%s", w.logs.tail(6000))
		}
	})
	return w
}

// start runs every server that is down and waits until each answers.
func (w *crashWorld) start() {
	w.t.Helper()
	for i, p := range w.procs {
		if p.cmd == nil {
			w.startProc(i)
		}
	}
}

// startProc runs server i on the world's data directory or database and
// waits until it answers.
func (w *crashWorld) startProc(i int) {
	w.t.Helper()
	p := w.procs[i]
	args := []string{"-addr", p.addr, "-dev",
		"-waking-timeout", w.waking.String(), "-liveness-timeout", w.liveness.String()}
	if w.dsn != "" {
		args = append(args, "-postgres", w.dsn)
	} else {
		args = append(args, "-data", w.dir)
	}
	args = append(args, w.args...)
	cmd := exec.Command(os.Args[0], args...)
	// The child runs with the subscription API open (-dev): a token in the
	// test's own environment would close it.
	// Nor may a database from the environment replace the one chosen here.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, apiTokenEnv+"=") || strings.HasPrefix(kv, postgresEnv+"=")
	})
	cmd.Env = append(env, crashChildEnv+"=1")
	cmd.Stdout, cmd.Stderr = w.logs, w.logs
	require.NoError(w.t, cmd.Start())
	exited := make(chan struct{})
	w.mu.Lock()
	p.cmd, p.exited = cmd, exited
	w.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	require.Eventually(w.t, func() bool {
		resp, err := w.client.Get(p.base + "/crash/*?subscriptions")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "server %d did not come up", i)
}

// kill ends every running server with SIGKILL.
func (w *crashWorld) kill() {
	w.t.Helper()
	for i, p := range w.procs {
		if p.cmd != nil {
			w.killProc(i)
		}
	}
}

// killProc ends server i with SIGKILL and waits until it is gone.
func (w *crashWorld) killProc(i int) {
	w.t.Helper()
	w.stopProc(i, syscall.SIGKILL)
}

// stopProc sends server i sig and waits until it has exited.
func (w *crashWorld) stopProc(i int, sig os.Signal) {
	w.t.Helper()
	p := w.procs[i]
	require.NoError(w.t, p.cmd.Process.Signal(sig))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		w.t.Fatalf("server %d did not exit on %v", i, sig)
	}
	w.mu.Lock()
	p.cmd = nil
	w.mu.Unlock()
	// Connections to the dead process would fail on first use.
	w.client.CloseIdleConnections()
}

// base returns the URL of a random running server, as a load balancer
// would pick one, or of server 0 if none runs.
func (w *crashWorld) base() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var up []*serverProc
	for _, p := range w.procs {
		if p.cmd != nil {
			up = append(up, p)
		}
	}
	if len(up) == 0 {
		return w.procs[0].base
	}
	return up[rand.IntN(len(up))].base
}

// anyServer is an http.RoundTripper that sends each request to a random
// running server, so that a consumer's callbacks spread over all of them.
type anyServer struct {
	w         *crashWorld
	transport *http.Transport
}

func (a anyServer) RoundTrip(r *http.Request) (*http.Response, error) {
	base := a.w.base()
	if i := a.w.callbacksTo.Load(); i >= 0 {
		base = a.w.procs[i].base
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = u.Host, u.Host
	return a.transport.RoundTrip(r)
}

// killOn arms hook, then waits for it to fire before the caller kills.
func (w *crashWorld) killOn(hook *atomic.Pointer[chan struct{}], moment string) {
	w.t.Helper()
	ch := make(chan struct{})
	hook.Store(&ch)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		hook.Store(nil)
		w.t.Logf("nothing happened %s within 10s; killing anyway", moment)
	}
}

// fire closes hook's channel, if armed, and reports whether it did.
func fire(hook *atomic.Pointer[chan struct{}]) bool {
	ch := hook.Swap(nil)
	if ch == nil {
		return false
	}
	close(*ch)
	return true
}

func (w *crashWorld) subscribe(id, pattern string) {
	w.t.Helper()
	w.subscribeOn(w.base(), id, pattern)
}

// subscribeOn creates a subscription through the server at base.
func (w *crashWorld) subscribeOn(base, id, pattern string) {
	w.t.Helper()
	w.createSubscription(base, id, pattern, fmt.Sprintf(`{"webhook":%q}`, w.recv.URL+"/hook"))
}

// createSubscription creates subscription id on pattern with the request
// body through the server at base, and records and returns its secret.
func (w *crashWorld) createSubscription(base, id, pattern, body string) string {
	w.t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+pattern+"?subscription="+id, strings.NewReader(body))
	require.NoError(w.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	require.NoError(w.t, err)
	defer resp.Body.Close()
	require.Equal(w.t, http.StatusCreated, resp.StatusCode)
	var created struct {
		Secret string `json:"webhook_secret"`
	}
	require.NoError(w.t, json.NewDecoder(resp.Body).Decode(&created))
	w.mu.Lock()
	w.secrets[id] = created.Secret
	w.mu.Unlock()
	return created.Secret
}

func (w *crashWorld) createStream(path string) {
	w.t.Helper()
	w.createStreamOn(w.base(), path)
}

// createStreamOn creates an empty JSON stream through the server at base.
func (w *crashWorld) createStreamOn(base, path string) {
	w.t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+path, nil)
	require.NoError(w.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	require.NoError(w.t, err)
	resp.Body.Close()
	require.Equal(w.t, http.StatusCreated, resp.StatusCode)
}

// appendEvent appends one event to path and records the new tail. Appends
// made while the server is down fail and are not recorded.
func (w *crashWorld) appendEvent(path string, n int) error {
	return w.appendEventOn(w.base(), path, n)
}

// appendEventOn appends through the server at base.
func (w *crashWorld) appendEventOn(base, path string, n int) error {
	resp, err := w.client.Post(base+path, "application/json", strings.NewReader(fmt.Sprintf(`[{"n":%d}]`, n)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("append to %s: %s", path, resp.Status)
	}
	w.mu.Lock()
	// Appends through several servers may answer out of order.
	if tail := resp.Header.Get("Stream-Next-Offset"); tail > w.appended[path] {
		w.appended[path] = tail
	}
	w.mu.Unlock()
	return nil
}

// writeContinuously appends to random streams until the returned function
// is called, or the test ends.
func (w *crashWorld) writeContinuously() (stop func()) {
	done := make(chan struct{})
	w.workers.Add(1)
	go func() {
		defer w.workers.Done()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-time.After(15 * time.Millisecond):
			}
			_ = w.appendEvent(fmt.Sprintf("/crash/s%d", 1+n%crashStreams), n)
		}
	}()
	stop = sync.OnceFunc(func() { close(done) })
	w.t.Cleanup(stop) // runs before newCrashWorld's cleanup waits for workers
	return stop
}

func (w *crashWorld) appendToAll() {
	w.t.Helper()
	for i := 1; i <= crashStreams; i++ {
		require.NoError(w.t, w.appendEvent(fmt.Sprintf("/crash/s%d", i), -i))
	}
}

// webhook is every consumer's endpoint. It checks the notification and
// answers 200 at once, then claims, acks and finishes in the background,
// the way a serverless consumer does.
func (w *crashWorld) webhook(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var peek receiver.Notification
	if err := json.Unmarshal(body, &peek); err != nil {
		w.t.Errorf("webhook body: %v", err)
		return
	}
	w.mu.Lock()
	secret := w.secrets[strings.SplitN(peek.ConsumerID, ":", 2)[0]]
	w.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	v, err := receiver.NewVerifier(receiver.WithSecret(secret))
	var n *receiver.Notification
	if err == nil {
		n, err = v.ParseNotification(r)
	}
	if err != nil {
		w.t.Errorf("webhook for %s does not verify: %v", peek.ConsumerID, err)
		return
	}
	w.recordWake(n)
	w.mu.Lock()
	mode := w.modes[strings.SplitN(n.ConsumerID, ":", 2)[0]]
	w.mu.Unlock()
	if fire(&w.onWebhook) || mode == hang {
		// Killed before the response is written: a delivery in flight.
		<-r.Context().Done()
		return
	}
	if mode == fail {
		rw.WriteHeader(http.StatusInternalServerError)
		return
	}
	rw.WriteHeader(http.StatusOK)
	if w.stall.Load() {
		return
	}
	w.workers.Add(1)
	go func() {
		defer w.workers.Done()
		w.consume(n, mode == consumeAll)
	}()
}

// recordWake checks S1 on what the consumer sees: epochs never go back, and
// an epoch always comes with the same wake id.
func (w *crashWorld) recordWake(n *receiver.Notification) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wakes[n.ConsumerID] == nil {
		w.wakes[n.ConsumerID] = map[int64]string{}
	}
	if id, ok := w.wakes[n.ConsumerID][n.Epoch]; ok && id != n.WakeID {
		w.t.Errorf("S1: %s epoch %d came with wake ids %s and %s", n.ConsumerID, n.Epoch, id, n.WakeID)
	}
	w.wakes[n.ConsumerID][n.Epoch] = n.WakeID
	if w.posts[n.ConsumerID] == nil {
		w.posts[n.ConsumerID] = map[int64]int{}
	}
	w.posts[n.ConsumerID][n.Epoch]++
	if last, ok := w.notified[n.ConsumerID]; ok && n.Epoch < last.Epoch {
		w.t.Errorf("S1: %s woken at epoch %d after epoch %d", n.ConsumerID, n.Epoch, last.Epoch)
	}
	w.notified[n.ConsumerID] = *n
}

// consume claims the wake, acks every stream up to its tail and, if done,
// says done. Calls that fail because the server is down are retried for a
// while; refusals end the cycle, which the engine then expires and wakes
// again.
func (w *crashWorld) consume(n *receiver.Notification, done bool) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: anyServer{w, w.callbacks}}
	cc := receiver.NewCallbackClient(n, hc)
	var acks []webhooks.StreamOffset
	for _, s := range n.Streams {
		tail, err := w.tail(s.Path)
		if err != nil {
			return
		}
		acks = append(acks, webhooks.StreamOffset{Path: s.Path, Offset: tail})
	}
	reqs := []receiver.CallbackRequest{{Acks: acks}}
	if done {
		reqs = append(reqs, receiver.CallbackRequest{Done: true})
	}
	for _, req := range reqs {
		if !w.call(n, cc, req) {
			return
		}
	}
}

// call sends one callback, retrying while the server is unreachable.
func (w *crashWorld) call(n *receiver.Notification, cc *receiver.CallbackClient, req receiver.CallbackRequest) bool {
	ctx := context.Background()
	if len(req.Acks) > 0 {
		// Once an ack is on the wire the test may kill the server before
		// it answers.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { fire(&w.onAckSent) },
		})
	}
	for range 50 {
		_, err := cc.Send(ctx, req)
		var ce *receiver.CallbackError
		switch {
		case err == nil:
			w.recordAcks(n.ConsumerID, req.Acks)
			return true
		case errors.As(err, &ce):
			if ce.Code == receiver.CodeTokenInvalid {
				w.mu.Lock()
				w.refused = append(w.refused, fmt.Sprintf("%s epoch %d: %s", n.ConsumerID, n.Epoch, ce.Message))
				w.mu.Unlock()
			}
			return false
		}
		time.Sleep(100 * time.Millisecond) // the server is restarting
	}
	return false
}

func (w *crashWorld) recordAcks(id string, acks []webhooks.StreamOffset) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acked[id] == nil {
		w.acked[id] = map[string]string{}
	}
	for _, a := range acks {
		if a.Offset > w.acked[id][a.Path] {
			w.acked[id][a.Path] = a.Offset
		}
	}
}

// tail reads a stream's tail offset with HEAD.
func (w *crashWorld) tail(path string) (string, error) {
	return w.tailOn(w.base(), path)
}

// tailOn reads a stream's tail offset through the server at base.
func (w *crashWorld) tailOn(base, path string) (string, error) {
	resp, err := w.client.Head(base + path)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HEAD %s: %s", path, resp.Status)
	}
	return resp.Header.Get("Stream-Next-Offset"), nil
}

// checkDurableState reads the engine's database while the server is down
// and checks it against everything the server acknowledged: no
// subscription is lost, no acked offset moved back (S4), epochs never fall
// (S1).
func (w *crashWorld) checkDurableState() {
	w.t.Helper()
	store, closeStore := w.openStore()
	defer closeStore()
	ctx := context.Background()

	subs, err := store.ListSubscriptions(ctx)
	require.NoError(w.t, err)
	var ids []string
	for _, s := range subs {
		ids = append(ids, s.ID)
	}
	require.ElementsMatch(w.t, []string{"all", "one", "none"}, ids, "a subscription was lost")

	w.mu.Lock()
	defer w.mu.Unlock()
	for i := 1; i <= crashStreams; i++ {
		path := fmt.Sprintf("/crash/s%d", i)
		for _, sub := range []string{"all", "one"} {
			if sub == "one" && path != "/crash/s1" {
				continue
			}
			id := webhooks.ConsumerID(sub, path)
			c, err := store.GetConsumer(ctx, id)
			if errors.Is(err, webhooks.ErrConsumerNotFound) && w.acked[id] == nil && w.notified[id].Epoch == 0 {
				continue // spawned on the first append, which may not have happened yet
			}
			require.NoError(w.t, err, "consumer %s", id)
			for _, s := range c.Streams {
				require.GreaterOrEqual(w.t, s.Offset, w.acked[id][s.Path], "S4: %s's ack of %s moved back", id, s.Path)
				if prev := w.stored[id]; prev != nil {
					for _, p := range prev.Streams {
						if p.Path == s.Path {
							require.GreaterOrEqual(w.t, s.Offset, p.Offset, "S4: %s's ack of %s moved back across a restart", id, s.Path)
						}
					}
				}
			}
			require.GreaterOrEqual(w.t, c.Epoch, w.notified[id].Epoch, "S1: %s's epoch fell below one it was woken with", id)
			if prev := w.stored[id]; prev != nil {
				require.GreaterOrEqual(w.t, c.Epoch, prev.Epoch, "S1: %s's epoch fell across a restart", id)
			}
			w.stored[id] = c
		}
	}
}

// openStore opens the servers' engine store, and a function that closes
// it.
func (w *crashWorld) openStore() (webhooks.Store, func()) {
	w.t.Helper()
	ctx := context.Background()
	if w.dsn == "" {
		store, err := sqlitestore.Open(filepath.Join(w.dir, "engine.db"))
		require.NoError(w.t, err)
		return store, func() { _ = store.Close() }
	}
	pool, err := pgxpool.New(ctx, w.dsn)
	require.NoError(w.t, err)
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		pool.Close()
		require.NoError(w.t, err)
	}
	return store, pool.Close
}

// liveAtKill returns the consumers that were LIVE when the server was last
// killed, and the latest of their deadlines.
func (w *crashWorld) liveAtKill() (map[string]bool, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	live := map[string]bool{}
	var latest time.Time
	for id, c := range w.stored {
		if c.State != webhooks.StateLive {
			continue
		}
		live[id] = true
		if c.Deadline.After(latest) {
			latest = c.Deadline
		}
	}
	return live, latest
}

// epochs returns the latest epoch each consumer was woken with.
func (w *crashWorld) epochs() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int64{}
	for id, n := range w.notified {
		out[id] = n.Epoch
	}
	return out
}

// waitAllLive waits until every consumer has answered a wake while the
// receiver stalls, so all are LIVE and none will call back.
func (w *crashWorld) waitAllLive() {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		w.mu.Lock()
		n := len(w.notified)
		w.mu.Unlock()
		return n == crashStreams+1
	}, 30*time.Second, 10*time.Millisecond)
	// Wakes already answered before the stall may still be cycling; let
	// every consumer be woken once more while stalled.
	before := w.epochs()
	require.NoError(w.t, w.appendEventsAndWait(before))
}

func (w *crashWorld) appendEventsAndWait(before map[string]int64) error {
	w.appendToAll()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		now := w.epochs()
		all := true
		for id, e := range before {
			if now[id] <= e {
				all = false
			}
		}
		if all {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("not every consumer was woken while stalled: before %v, now %v", before, w.epochs())
}

// waitRewoken checks that every consumer, LIVE with an expired deadline
// when the server came back, is woken again within one liveness timeout of
// the server answering at restarted. An engine that let the overdue
// deadlines wait would take a liveness timeout at least; the bound leaves
// a busy machine all the rest.
func (w *crashWorld) waitRewoken(before map[string]int64, restarted time.Time) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		now := w.epochs()
		for id, e := range before {
			if now[id] <= e {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "not every consumer was woken after the restart")
	took := time.Since(restarted)
	require.Less(w.t, took, crashLiveness,
		"overdue deadlines took %v to fire after the restart; they must fire at start-up", took)
}

// waitCaughtUp waits until every consumer has acked every event (L1).
func (w *crashWorld) waitCaughtUp() {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for path, tail := range w.appended {
			for sub := range crashSubs {
				if sub == "none" || (sub == "one" && path != "/crash/s1") {
					continue
				}
				if w.acked[webhooks.ConsumerID(sub, path)][path] < tail {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "L1: a consumer never caught up with its streams")
}

// checkNoTokenRefused checks that tokens issued before a restart kept
// verifying after it.
func (w *crashWorld) checkNoTokenRefused() {
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(w.t, w.refused, "tokens issued before a restart were refused after it")
}

// syncBuffer collects the child's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// count counts the occurrences of s in the output so far.
func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Count(b.buf.Bytes(), []byte(s))
}
