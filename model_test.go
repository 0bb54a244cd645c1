package webhooks_test

// The model test runs the real engine (mock clock, memstore, fake source, a
// real HTTP receiver) through long random sequences of appends, webhook
// outcomes, callbacks, clock advances and deletes, and after every step
// compares it with a small reference model of the spec's consumer state
// machine written here from the spec: every consumer in the Store, every
// webhook POST and every callback answer. It also checks the spec's safety
// invariants S1–S8 and liveness properties L1–L3 on what it observes; each
// failure message starts with the name of the check.
//
// Half the sequences also have an event-push subscription. The model has
// its consumers' batches too: each POST must carry exactly the bytes the
// model expects, in stream order, every attempt of a batch the same ones
// under the same delivery id; a batch that fails its last attempt stops
// its consumer in FAILED, and the drain resumes it.
//
// Half the sequences split the engine in two: two engines share the
// memstore, the source, the clock and the receiver, and each API call,
// stream event and callback goes through one of them at random, while both
// schedulers act on the deadlines. Only the subscription feed is waited
// for: after a subscription changes, the driver waits until both engines
// have reloaded, as it waits for the scheduler before moving the clock.
//
// Replay a failing sequence with:
//
//	go test -race -run TestModel -model.seed=N
//
// and soak with, for example, -model.runs=100000 -model.budget=30m.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/receiver"
)

var (
	modelSeed   = flag.Uint64("model.seed", 0, "run only the model-test sequence with this seed")
	modelRuns   = flag.Int("model.runs", 0, "model-test sequences to run at most (default: TestModel 2000, 200 with -short; TestModelDS 30, 10 with -short)")
	modelBudget = flag.Duration("model.budget", 0, "start no model-test sequence after this long (default 40s, 10s with -short)")
)

// modelWorkers is how many sequences run at once. Each spends much of its
// time in the mock clock's scheduling sleeps, so a few overlap well on two
// cores.
const modelWorkers = 4

func TestModel(t *testing.T) {
	runModelSequences(t, "TestModel", 2000, 200, modelRun, modelCoverage)
}

// runModelSequences runs sequences of run, from seeds counted up from the
// clock, at most runs of them (shortRuns with -short, or -model.runs)
// within the budget, stopping at the first failure; -model.seed runs only
// that seed. It logs what cov counted.
func runModelSequences(t *testing.T, name string, runs, shortRuns int, run func(t *testing.T, seed uint64), cov *modelCounts) {
	if *modelSeed != 0 {
		t.Run(fmt.Sprintf("seed=%d", *modelSeed), func(t *testing.T) { run(t, *modelSeed) })
		return
	}
	budget := *modelBudget
	if *modelRuns != 0 {
		runs = *modelRuns
	} else if testing.Short() {
		runs = shortRuns
	}
	if budget == 0 {
		budget = 40 * time.Second
		if testing.Short() {
			budget = 10 * time.Second
		}
	}
	start := time.Now()
	base := uint64(start.UnixNano())
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range modelWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() && time.Since(start) < budget {
				i := next.Add(1) - 1
				if i >= int64(runs) {
					return
				}
				seed := base + uint64(i)
				if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { run(t, seed) }) {
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		t.Logf("replay the failed sequence with: go test -race -run '%s$' -model.seed=N (N from the failed subtest's name)", name)
	}
	t.Logf("%d sequences from seed %d in %v exercised:\n%s",
		min(next.Load(), int64(runs)), base, time.Since(start).Round(time.Millisecond), cov.report())
}

// modelCounts counts what the sequences exercised; TestModel logs it, so
// that -v shows whether the random steps reach every case.
type modelCounts struct {
	mu sync.Mutex
	n  map[string]int
}

var modelCoverage = &modelCounts{n: map[string]int{}}

func modelCount(what string) { modelCoverage.add(what) }

func (c *modelCounts) add(what string) {
	c.mu.Lock()
	c.n[what]++
	c.mu.Unlock()
}

func (c *modelCounts) report() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for what, n := range c.n {
		lines = append(lines, fmt.Sprintf("%8d  %s", n, what))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// The universe of a sequence: three subscriptions, primary streams under
// /a (one of them deep enough for "**" only) and secondary streams under
// /b that no pattern matches. s3 pushes events (modelEventsOptions); the
// others wake.
var (
	modelPatterns = map[string]string{"s1": "/a/*", "s2": "/a/**", "s3": "/a/*"}
	modelPaths    = []string{"/a/1", "/a/2", "/a/x/y", "/b/1", "/b/2"}
)

// modelEventsSub is the subscription that pushes events, in batches of at
// most modelBatchBytes bytes of the model's byte streams, sent at once,
// with modelMaxAttempts attempts each.
const (
	modelEventsSub   = "s3"
	modelBatchBytes  = 3
	modelMaxAttempts = 3
)

var modelEventsOptions = fmt.Sprintf(`"delivery":"events","batch":{"max_bytes":%d,"max_wait_ms":0},"retry":{"max_attempts":%d}`,
	modelBatchBytes, modelMaxAttempts)

// modelConfig is a sequence's engine configuration: the spec's timeouts,
// sometimes a request timeout shorter than the WAKING timeout (so that hung
// POSTs fail by timing out), a failure GC reachable within a sequence, and
// sometimes tokens that expire within one.
type modelConfig struct {
	waking, liveness, request time.Duration
	gcAfter, tokenTTL         time.Duration
}

func newModelConfig(rng *rand.Rand) modelConfig {
	cfg := modelConfig{
		waking:   webhooks.DefaultWakingTimeout,
		liveness: webhooks.DefaultLivenessTimeout,
		request:  webhooks.DefaultRequestTimeout,
		gcAfter:  time.Duration(40+rng.IntN(80)) * time.Second,
		tokenTTL: webhooks.DefaultTokenTTL,
	}
	if rng.IntN(2) == 0 {
		cfg.request = 4 * time.Second
	}
	if rng.IntN(2) == 0 {
		cfg.tokenTTL = 2 * time.Minute
	}
	return cfg
}

// modelBackoff is the spec's retry schedule with a jitter fixed per retry,
// so that the model can predict every retry time.
func modelBackoff(retry int) time.Duration {
	jitter := time.Duration(retry*137%1000) * time.Millisecond
	if retry > 10 {
		return 60*time.Second + 5*jitter
	}
	return min(time.Duration(1<<retry)*100*time.Millisecond, 30*time.Second) + jitter
}

// ---------------------------------------------------------------------------
// The reference model.

// modelConsumer is the model of one consumer instance.
type modelConsumer struct {
	id, sub, primary string
	inc              int // incarnation: a consumer ID can be removed and spawned again
	state            webhooks.ConsumerState
	epoch            int64
	wakeID           string // "" from a wake until the engine's new wake_id is seen
	streams          []webhooks.StreamOffset
	wakeTails        map[string]int // stream tails when the wake began
	triggeredBy      []string
	attempt          int
	inFlight         bool
	failures         int
	failingSince     time.Time
	deadline         time.Time
	// events is set for a consumer of the events subscription; until is
	// its batch's bound, the stream's length when the batch began.
	events bool
	until  int
}

// batch is the ReadLimit the engine stores for an events consumer's batch.
func (c *modelConsumer) batch() webhooks.ReadLimit {
	if c.state == webhooks.StateIdle || c.until == 0 {
		return webhooks.ReadLimit{}
	}
	return webhooks.ReadLimit{MaxEvents: webhooks.DefaultMaxBatchEvents, MaxBytes: modelBatchBytes, Until: offset(c.until)}
}

func (c *modelConsumer) clone() *modelConsumer {
	out := *c
	out.streams = slices.Clone(c.streams)
	out.triggeredBy = slices.Clone(c.triggeredBy)
	out.wakeTails = maps.Clone(c.wakeTails)
	return &out
}

type modelOutcome int

const (
	modelOK   modelOutcome = iota // 2xx
	modelDone                     // 2xx with {"done":true}
	modelFail                     // non-2xx, dropped connection or request timeout
)

// modelRequest is one webhook POST the engine has sent and not yet had
// answered.
type modelRequest struct {
	id          string
	inc         int
	epoch       int64
	attempt     int
	streams     []webhooks.StreamOffset
	triggeredBy []string
	timeoutAt   time.Time
	arrival     *modelArrival // set once the receiver has it
	// from and end bound the bytes a batch carries, and until is the
	// batch's bound; for an events consumer only.
	from, end, until int
}

type modelSub struct {
	pattern, secret string
	events          bool
	paused          bool
}

type model struct {
	cfg       modelConfig
	now       time.Time
	streams   map[string]int // path → length; offsets are offset(length)
	subs      map[string]modelSub
	consumers map[string]*modelConsumer
	incs      map[string]int
	requests  []*modelRequest // open POSTs
	sends     []*modelRequest // POSTs started in this step, not yet received
}

// modelPos is the position an offset stands for; -1 for "-1".
func modelPos(off string) int {
	if off == webhooks.OffsetNone {
		return -1
	}
	_, n, _ := strings.Cut(off, "_")
	v, err := strconv.Atoi(n)
	if err != nil {
		return -2
	}
	return v
}

// pendingPaths lists the subscribed streams with pending work.
func (m *model) pendingPaths(c *modelConsumer) []string {
	var out []string
	for _, s := range c.streams {
		if n, ok := m.streams[s.Path]; ok && modelPending(c.events, c.epoch, c.primary, s, n) {
			out = append(out, s.Path)
		}
	}
	return out
}

// modelPending reports whether stream s, n bytes long, is pending work of
// a consumer (spec, Pending Work): its tail is past the acked offset. "-1"
// is below every tail, the zero offset of an empty stream included, but a
// wake consumer has no work in an empty stream, only the wake at its
// creation: that of its primary stream before its first wake.
func modelPending(events bool, epoch int64, primary string, s webhooks.StreamOffset, n int) bool {
	if n == 0 && s.Offset == webhooks.OffsetNone && !events {
		return epoch == 0 && s.Path == primary
	}
	return n > modelPos(s.Offset)
}

// wake is IDLE → WAKING (or LIVE → WAKING on done with pending work):
// epoch++, a new wake_id, and a POST due at once.
func (m *model) wake(c *modelConsumer) {
	c.triggeredBy = m.pendingPaths(c)
	c.state = webhooks.StateWaking
	c.epoch++
	c.wakeID = ""
	c.wakeTails = map[string]int{}
	for _, s := range c.streams {
		if n, ok := m.streams[s.Path]; ok {
			c.wakeTails[s.Path] = n
		}
	}
	c.attempt = 0
	c.inFlight = false
	c.deadline = m.now
}

func (m *model) wakeIfPending(c *modelConsumer) {
	if c.state != webhooks.StateIdle || len(m.pendingPaths(c)) == 0 || m.subs[c.sub].paused {
		return
	}
	if c.events {
		m.startBatch(c)
		return
	}
	m.wake(c)
}

// startBatch is IDLE → WAKING for an events consumer: epoch++, a new
// delivery id, the batch bounded by the stream's length now, and a POST
// due at once.
func (m *model) startBatch(c *modelConsumer) {
	c.state = webhooks.StateWaking
	c.epoch++
	c.wakeID = ""
	c.until = m.streams[c.primary]
	c.attempt = 0
	c.inFlight = false
	c.deadline = m.now
}

// batchBytes are the bytes c's batch carries: from its cursor, at most
// modelBatchBytes, up to its bound.
func (c *modelConsumer) batchBytes() (from, end int) {
	from = max(modelPos(c.streams[0].Offset), 0)
	return from, min(from+modelBatchBytes, c.until)
}

// batchAcked is a 2xx for c's batch: the cursor moves past it, and the
// next batch starts if there is more.
func (m *model) batchAcked(c *modelConsumer) {
	_, end := c.batchBytes()
	c.streams[0].Offset = offset(end)
	c.state = webhooks.StateIdle
	c.inFlight = false
	c.attempt = 0
	c.until = 0
	c.failures = 0
	c.failingSince = time.Time{}
	c.deadline = time.Time{}
	m.wakeIfPending(c)
}

// finish ends a cycle: IDLE, or a new wake if work is pending (L1, L3).
func (m *model) finish(c *modelConsumer) {
	c.state = webhooks.StateIdle
	c.inFlight = false
	c.deadline = time.Time{}
	m.wakeIfPending(c)
}

// goLive is WAKING → LIVE; it ends the failure run.
func (m *model) goLive(c *modelConsumer) {
	c.state = webhooks.StateLive
	c.inFlight = false
	c.failures = 0
	c.failingSince = time.Time{}
	c.deadline = m.now.Add(m.cfg.liveness)
}

func (m *model) touch(c *modelConsumer) {
	if c.state == webhooks.StateLive {
		c.deadline = m.now.Add(m.cfg.liveness)
	}
}

// deadLetter stops c in FAILED with its cursor, until it is revived.
func (m *model) deadLetter(c *modelConsumer) {
	c.state = webhooks.StateFailed
	c.inFlight = false
	c.deadline = time.Time{}
}

// gcDue is the failure GC, which only wake consumers have by default: it
// makes them dead letters.
func (m *model) gcDue(c *modelConsumer) bool {
	return !c.events && !c.failingSince.IsZero() && !m.now.Before(c.failingSince.Add(m.cfg.gcAfter))
}

// capGC keeps a WAKING deadline from passing the failure GC time.
func (m *model) capGC(c *modelConsumer, t time.Time) time.Time {
	if gc := c.failingSince.Add(m.cfg.gcAfter); !c.events && !c.failingSince.IsZero() && gc.Before(t) {
		return gc
	}
	return t
}

// fail records a failed attempt and schedules the retry, or makes the
// consumer a dead letter once failures have lasted gcAfter.
func (m *model) fail(c *modelConsumer) {
	c.inFlight = false
	c.failures++
	if c.failingSince.IsZero() {
		c.failingSince = m.now
	}
	if m.gcDue(c) {
		modelCount("wake consumer dead-lettered by the failure GC")
		m.deadLetter(c)
		return
	}
	if c.events && c.attempt >= modelMaxAttempts {
		modelCount("events consumer FAILED after its last attempt")
		c.state = webhooks.StateFailed
		c.deadline = time.Time{}
		return
	}
	c.deadline = m.capGC(c, m.now.Add(modelBackoff(c.failures)))
}

func (m *model) startAttempt(c *modelConsumer) {
	c.attempt++
	c.inFlight = true
	if c.events {
		m.startBatchAttempt(c)
		return
	}
	c.deadline = m.capGC(c, m.now.Add(m.cfg.waking))
	m.send(c).triggeredBy = slices.Clone(c.triggeredBy)
}

// send opens a POST of c's attempt, which times out after the request
// timeout.
func (m *model) send(c *modelConsumer) *modelRequest {
	req := &modelRequest{
		id:        c.id,
		inc:       c.inc,
		epoch:     c.epoch,
		attempt:   c.attempt,
		streams:   slices.Clone(c.streams),
		timeoutAt: m.now.Add(m.cfg.request),
	}
	m.requests = append(m.requests, req)
	m.sends = append(m.sends, req)
	return req
}

// startBatchAttempt sends an attempt of c's batch; a batch with no bytes,
// of an empty stream read from its start, makes no POST and is acked at
// once. The attempt times out a second after its POST's timeout.
func (m *model) startBatchAttempt(c *modelConsumer) {
	c.deadline = m.now.Add(m.cfg.request + time.Second)
	from, end := c.batchBytes()
	if from == end {
		modelCount("events batch with nothing to send")
		m.batchAcked(c)
		return
	}
	req := m.send(c)
	req.from, req.end, req.until = from, end, c.until
}

// runDue acts on every deadline that has come, until none has. It goes in
// ID order, so that a replayed sequence opens its POSTs in the same order.
func (m *model) runDue() {
	for {
		var due []*modelConsumer
		for _, id := range slices.Sorted(maps.Keys(m.consumers)) {
			if c := m.consumers[id]; !c.deadline.IsZero() && !c.deadline.After(m.now) {
				due = append(due, c)
			}
		}
		if len(due) == 0 {
			return
		}
		for _, c := range due {
			switch c.state {
			case webhooks.StateWaking:
				switch {
				case m.gcDue(c):
					modelCount("consumer dead-lettered by the failure GC at its deadline")
					m.deadLetter(c)
				case c.inFlight:
					m.fail(c) // the WAKING timeout
				case m.subs[c.sub].paused:
					modelCount("retry held by a paused subscription")
					c.deadline = time.Time{}
				default:
					m.startAttempt(c)
				}
			case webhooks.StateLive:
				modelCount("liveness timeout")
				m.finish(c) // the liveness timeout
			default:
				c.deadline = time.Time{}
			}
		}
	}
}

// advanceTo moves the model's clock to t: POSTs time out, then deadlines.
func (m *model) advanceTo(t time.Time) {
	m.now = t
	for _, req := range slices.Clone(m.requests) {
		if !req.timeoutAt.After(t) {
			modelCount("POST timed out")
			m.answer(req, modelFail)
		}
	}
	m.runDue()
}

// nextEvent is the earliest time after now at which the engine may change
// a consumer.
func (m *model) nextEvent() (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(m.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, c := range m.consumers {
		consider(c.deadline)
	}
	for _, req := range m.requests {
		// A POST of an ended attempt times out without effect: the
		// clock may pass over it.
		if c := m.consumers[req.id]; c != nil && c.inc == req.inc && c.epoch == req.epoch && c.inFlight && c.attempt == req.attempt {
			consider(req.timeoutAt)
		}
	}
	return next, !next.IsZero()
}

// answer applies the outcome of an open POST. Outcomes of a cycle that has
// ended change nothing; a 2xx from any attempt of the current cycle counts,
// a failure only from the attempt in flight.
func (m *model) answer(req *modelRequest, o modelOutcome) {
	m.requests = slices.DeleteFunc(m.requests, func(r *modelRequest) bool { return r == req })
	c := m.consumers[req.id]
	if c == nil || c.inc != req.inc || c.epoch != req.epoch {
		return
	}
	if c.events {
		switch {
		case c.state != webhooks.StateWaking:
		case o != modelFail:
			m.batchAcked(c)
		case c.inFlight && c.attempt == req.attempt:
			m.fail(c)
		}
		return
	}
	switch o {
	case modelDone:
		if c.state == webhooks.StateIdle {
			return
		}
		c.failures = 0
		c.failingSince = time.Time{}
		// Auto-ack up to the tails when the wake began: the consumer
		// cannot have seen later events.
		for i, s := range c.streams {
			if n, ok := c.wakeTails[s.Path]; ok && n > modelPos(s.Offset) {
				c.streams[i].Offset = offset(n)
			}
		}
		m.finish(c)
	case modelOK:
		if c.state == webhooks.StateWaking {
			m.goLive(c)
		}
	case modelFail:
		if c.state == webhooks.StateWaking && c.inFlight && c.attempt == req.attempt {
			m.fail(c)
		}
	}
}

func (m *model) spawn(sub, path, off string) {
	id := webhooks.ConsumerID(sub, path)
	m.incs[id]++
	if m.incs[id] > 1 {
		modelCount("consumer ID spawned again after removal")
	}
	m.consumers[id] = &modelConsumer{
		id:      id,
		sub:     sub,
		primary: path,
		inc:     m.incs[id],
		state:   webhooks.StateIdle,
		streams: []webhooks.StreamOffset{{Path: path, Offset: off}},
		events:  m.subs[sub].events,
	}
}

// streamChanged is a create or an append: spawn missing consumers for
// matching subscriptions, then wake the IDLE subscribers with pending work.
func (m *model) streamChanged(path string) {
	var ids []string
	for id, c := range m.consumers {
		if slices.ContainsFunc(c.streams, func(s webhooks.StreamOffset) bool { return s.Path == path }) {
			ids = append(ids, id)
		}
	}
	for sub, s := range m.subs {
		if id := webhooks.ConsumerID(sub, path); modelMatch(s.pattern, path) && m.consumers[id] == nil {
			m.spawn(sub, path, webhooks.OffsetNone)
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		m.wakeIfPending(m.consumers[id])
	}
}

func (m *model) deleteStream(path string) {
	delete(m.streams, path)
	for id, c := range m.consumers {
		if c.primary == path {
			delete(m.consumers, id)
			continue
		}
		c.streams = slices.DeleteFunc(c.streams, func(s webhooks.StreamOffset) bool { return s.Path == path })
		if len(c.streams) == 0 {
			delete(m.consumers, id)
		}
	}
}

// createSub adopts the existing matching streams at their tails, IDLE.
func (m *model) createSub(id, pattern, secret string) {
	m.subs[id] = modelSub{pattern: pattern, secret: secret, events: id == modelEventsSub}
	for path, n := range m.streams {
		if modelMatch(pattern, path) && m.consumers[webhooks.ConsumerID(id, path)] == nil {
			m.spawn(id, path, offset(n))
		}
	}
}

func (m *model) deleteSub(id string) {
	delete(m.subs, id)
	for cid, c := range m.consumers {
		if c.sub == id {
			delete(m.consumers, cid)
		}
	}
}

// modelCall is one callback request as the driver sends it.
type modelCall struct {
	id         string
	token      string
	tokenOK    bool // signed by the engine for this consumer
	tokenEpoch int64
	tokenInc   int // incarnation of the consumer the token was issued to
	tokenExp   time.Time
	body       string
	req        *receiver.CallbackRequest // nil if the body is invalid
}

// modelAnswer is what the model expects a callback to return.
type modelAnswer struct {
	status  int
	code    receiver.ErrorCode // "" on success
	streams []webhooks.StreamOffset
	fresh   bool // a newly issued token, not the one sent
}

// callback applies a callback atomically and returns the expected answer.
// The checks run in the engine's order; the spec gives none.
func (m *model) callback(call modelCall) modelAnswer {
	if !call.tokenOK {
		return modelAnswer{status: http.StatusUnauthorized, code: receiver.CodeTokenInvalid}
	}
	if call.req == nil {
		return modelAnswer{status: http.StatusBadRequest, code: receiver.CodeInvalidRequest}
	}
	c := m.consumers[call.id]
	if c == nil || c.state == webhooks.StateFailed {
		return modelAnswer{status: http.StatusGone, code: receiver.CodeConsumerGone}
	}
	if call.tokenEpoch != c.epoch || *call.req.Epoch != c.epoch || call.tokenInc != c.inc {
		return modelAnswer{status: http.StatusConflict, code: receiver.CodeStaleEpoch}
	}
	if !m.now.Before(call.tokenExp) {
		return modelAnswer{status: http.StatusUnauthorized, code: receiver.CodeTokenExpired, fresh: true}
	}
	if call.req.WakeID != "" && call.req.WakeID != c.wakeID {
		return modelAnswer{status: http.StatusConflict, code: receiver.CodeAlreadyClaimed}
	}
	next := c.clone()
	if next.state == webhooks.StateWaking {
		m.goLive(next) // any callback of the current epoch claims the wake
	}
	for _, p := range call.req.Subscribe {
		if !slices.ContainsFunc(next.streams, func(s webhooks.StreamOffset) bool { return s.Path == p }) {
			off := webhooks.OffsetNone
			if n, ok := m.streams[p]; ok {
				off = offset(n)
			}
			next.streams = append(next.streams, webhooks.StreamOffset{Path: p, Offset: off})
			// A synchronous done acks only what the wake covered: a
			// stream subscribed since, maybe one deleted and created
			// again at p, starts at its tail.
			delete(next.wakeTails, p)
		}
	}
	for _, a := range call.req.Acks {
		i := slices.IndexFunc(next.streams, func(s webhooks.StreamOffset) bool { return s.Path == a.Path })
		if i < 0 {
			continue // an ack of a stream the consumer does not hold moves nothing
		}
		if a.Offset == webhooks.OffsetNone {
			continue
		}
		n, ok := m.streams[a.Path]
		if !ok || len(a.Offset) != len(offset(n)) || modelPos(a.Offset) > n {
			return modelAnswer{status: http.StatusConflict, code: receiver.CodeInvalidOffset}
		}
		if modelPos(a.Offset) > modelPos(next.streams[i].Offset) {
			next.streams[i].Offset = a.Offset
		}
	}
	next.streams = slices.DeleteFunc(next.streams, func(s webhooks.StreamOffset) bool {
		return slices.Contains(call.req.Unsubscribe, s.Path)
	})
	fresh := call.tokenExp.Sub(m.now) <= m.cfg.tokenTTL/4
	if len(next.streams) == 0 {
		delete(m.consumers, c.id)
		return modelAnswer{status: http.StatusOK, streams: []webhooks.StreamOffset{}, fresh: fresh}
	}
	if call.req.Done && next.state == webhooks.StateLive {
		m.finish(next)
	}
	m.touch(next)
	m.consumers[c.id] = next
	return modelAnswer{status: http.StatusOK, streams: slices.Clone(next.streams), fresh: fresh}
}

// modelMatch matches a path against a glob pattern: "*" is one segment,
// "**" any number of them.
func modelMatch(pattern, path string) bool {
	var match func(p, s []string) bool
	match = func(p, s []string) bool {
		switch {
		case len(p) == 0:
			return len(s) == 0
		case p[0] == "**":
			return match(p[1:], s) || (len(s) > 0 && match(p, s[1:]))
		case len(s) == 0:
			return false
		default:
			return (p[0] == "*" || p[0] == s[0]) && match(p[1:], s[1:])
		}
	}
	return match(strings.Split(pattern, "/")[1:], strings.Split(path, "/")[1:])
}

// modelClock is the harness's mock clock, recording every time the engine
// asks how long it is until: its scheduler arms its one timer that way, so
// these are the only times, besides the model's own events, at which the
// engine may act. Clock advances stop at each, so that a timer never fires
// inside an advance and the engine always acts at exactly the time it meant.
type modelClock struct {
	*mockclock.Clock
	mu    sync.Mutex
	until []time.Time
}

func (c *modelClock) Until(t time.Time) time.Duration {
	c.mu.Lock()
	c.until = append(c.until, t)
	c.mu.Unlock()
	return c.Mock.Until(t)
}

// armed returns the recorded times after now, forgetting the others.
func (c *modelClock) armed(now time.Time) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.until = slices.DeleteFunc(c.until, func(t time.Time) bool { return !t.After(now) })
	return slices.Clone(c.until)
}

// ---------------------------------------------------------------------------
// The receiver.

// modelArrival is a webhook POST held by the receiver until the driver
// answers it.
type modelArrival struct {
	n          receiver.Notification
	batch      receiver.EventsPayload // the body of an event-push POST
	body       []byte
	sig        string
	deliveryID string // the Webhook-Id header
	reply      chan modelReply
}

type modelReply struct {
	status int
	body   string
	drop   bool // close the connection without an answer
}

type modelReceiver struct {
	srv      *httptest.Server
	url      string
	arrivals chan *modelArrival
	quit     chan struct{}
}

// newModelReceiver starts a receiver at a path of its own: other test
// processes may dial a loopback port this one has reused.
func newModelReceiver(t *testing.T, seed uint64) *modelReceiver {
	r := &modelReceiver{arrivals: make(chan *modelArrival, 64), quit: make(chan struct{})}
	path := "/hook/" + strconv.FormatUint(seed, 36)
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != path {
			http.NotFound(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		a := &modelArrival{body: body, sig: req.Header.Get(receiver.SignatureHeader),
			deliveryID: req.Header.Get(receiver.IDHeader), reply: make(chan modelReply, 1)}
		// A bad body shows as a mismatch.
		_ = json.Unmarshal(body, &a.n)
		_ = json.Unmarshal(body, &a.batch)
		select {
		case r.arrivals <- a:
		case <-req.Context().Done():
			return
		case <-r.quit:
			return
		}
		select {
		case rep := <-a.reply:
			if rep.drop {
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.Close()
				}
				return
			}
			if rep.status == http.StatusFound {
				w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
			}
			w.WriteHeader(rep.status)
			_, _ = io.WriteString(w, rep.body)
		case <-req.Context().Done():
		case <-r.quit:
		}
	}))
	// No idle connections: fewer goroutines for quiesce to read through.
	r.srv.Config.SetKeepAlivesEnabled(false)
	r.srv.Start()
	r.url = r.srv.URL + path
	t.Cleanup(func() {
		close(r.quit)
		r.srv.Close()
	})
	return r
}

// ---------------------------------------------------------------------------
// The driver.

type modelToken struct {
	raw   string
	epoch int64
	exp   time.Time
	inc   int // incarnation of the consumer when issued
}

// modelHist is what was last observed of a consumer, for the invariants
// that compare observations over time.
type modelHist struct {
	inc    int
	epoch  int64
	state  webhooks.ConsumerState
	wakeID string
	acked  map[string]int
}

type modelRig struct {
	clock *modelClock
	t     *testing.T
	rng   *rand.Rand
	h     *harness
	recv  *modelReceiver
	m     *model
	ids   []string // every consumer ID the universe allows

	// engines are the engine, or the two of a split sequence, with their
	// handlers; h.engine and h.handler are the one the next step goes
	// through.
	engines  []*webhooks.Engine
	handlers []http.Handler

	wallet    map[string][]modelToken
	hist      map[string]*modelHist
	notified  map[string]modelHist // last notification per consumer: S1, S2
	wakeIDs   map[string]bool      // every wake_id seen: S2
	pastWakes map[string][]string
	trace     []string
	context   string // the property the current step exercises
	draining  bool
	drained   map[string]bool // consumers notified during the drain
}

func modelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg := newModelConfig(rng)
	split := rng.IntN(2) == 0
	recv := newModelReceiver(t, seed) // before the harness: the engine stops first
	clk := &modelClock{Clock: newMockClock()}
	opts := []webhooks.Option{
		webhooks.WithTimeouts(cfg.waking, cfg.liveness, cfg.request),
		webhooks.WithBackoff(modelBackoff),
		webhooks.WithFailureGCAfter(cfg.gcAfter),
		webhooks.WithCircuitBreaker(0, 0), // not modelled: TestCircuitBreaker…
		webhooks.WithTokenTTL(cfg.tokenTTL),
		webhooks.WithLogger(slog.New(slog.DiscardHandler)),
		webhooks.WithClock(clk),
	}
	h := newHarness(t, opts...)
	h.clock = clk.Clock
	h.recv.srv.Close() // the harness's receiver; this test has its own
	engines, handlers := []*webhooks.Engine{h.engine}, []http.Handler{h.handler}
	if split {
		modelCount("sequences split over two engines")
		other := &harness{t: t, clock: h.clock, store: h.store, source: h.source, recv: h.recv, progressed: h.signals()}
		other.startEngine(opts...)
		engines, handlers = append(engines, other.engine), append(handlers, other.handler)
	}
	r := &modelRig{
		clock: clk,
		t:     t,
		rng:   rng,
		h:     h,
		recv:  recv,
		m: &model{
			cfg:       cfg,
			now:       h.clock.Now(),
			streams:   map[string]int{},
			subs:      map[string]modelSub{},
			consumers: map[string]*modelConsumer{},
			incs:      map[string]int{},
		},
		engines:   engines,
		handlers:  handlers,
		wallet:    map[string][]modelToken{},
		hist:      map[string]*modelHist{},
		notified:  map[string]modelHist{},
		wakeIDs:   map[string]bool{},
		pastWakes: map[string][]string{},
	}
	for sub := range modelPatterns {
		for _, p := range modelPaths {
			r.ids = append(r.ids, webhooks.ConsumerID(sub, p))
		}
	}
	slices.Sort(r.ids)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("config %+v\nreplay: go test -race -run TestModel -model.seed=%d\nlast steps:\n%s",
				cfg, seed, strings.Join(r.trace, "\n"))
		}
	})
	r.quiesce()

	// Sometimes a stream exists before the subscriptions: adopted at its
	// tail, it wakes only on new events.
	if rng.IntN(2) == 0 {
		r.createStream("/a/1", rng.IntN(6))
	}
	r.createSub("s1")
	if rng.IntN(2) == 0 {
		r.createSub("s2")
	}
	if rng.IntN(2) == 0 {
		r.createSub(modelEventsSub)
	}
	for range 30 + rng.IntN(50) {
		r.step()
	}
	r.drain()
}

func (r *modelRig) note(format string, args ...any) {
	line := fmt.Sprintf("%9s  ", r.m.now.Sub(testStart).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	r.trace = append(r.trace, line)
	if len(r.trace) > 60 {
		r.trace = r.trace[1:]
	}
}

// through picks the engine the next API call, stream event or callback
// goes through: in a split sequence, one of the two at random.
func (r *modelRig) through() {
	if len(r.engines) == 1 {
		return
	}
	i := r.pick(len(r.engines))
	r.h.engine, r.h.handler = r.engines[i], r.handlers[i]
	r.note("  through engine %c", 'A'+i)
}

// learn waits, in a split sequence, until both engines have reloaded the
// subscriptions after a change through one of them. Until then a stream
// created through the other would get no consumer of a new subscription
// (the window SubscriptionFeed describes), which the model does not model.
func (r *modelRig) learn() {
	if len(r.engines) == 1 {
		return
	}
	want := slices.Sorted(maps.Keys(r.m.subs))
	ok := r.h.waitProgress(func() bool {
		for _, e := range r.engines {
			if !slices.Equal(webhooks.KnownSubscriptions(e), want) {
				return false
			}
			for _, id := range want {
				paused := webhooks.LoadedSubscription(e, id).Status == webhooks.StatusPaused
				if paused != r.m.subs[id].paused {
					return false
				}
			}
		}
		return true
	})
	if !ok {
		r.failf(r.context, "the engines did not both reload the subscriptions %v", want)
	}
}

// failf fails the sequence; check names the property that broke.
func (r *modelRig) failf(check, format string, args ...any) {
	r.t.Helper()
	if r.context != "" && r.context != check {
		check += " [step: " + r.context + "]"
	}
	r.t.Fatalf("%s: %s", check, fmt.Sprintf(format, args...))
}

func (r *modelRig) pick(n int) int { return r.rng.IntN(n) }

func (r *modelRig) pickWeighted(weights ...int) int { return modelPickWeighted(r.rng, weights...) }

// modelPickWeighted returns i with probability weights[i] / sum(weights).
func modelPickWeighted(rng *rand.Rand, weights ...int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n -= w; n < 0 {
			return i
		}
	}
	panic("unreachable")
}

// step runs one random action; each returns false if it does not apply.
func (r *modelRig) step() {
	actions := []func() bool{r.appendStep, r.createStreamStep, r.deleteStreamStep, r.subscriptionStep, r.replyStep, r.callbackStep, r.advanceStep, r.statusStep, r.rewindStep}
	for !actions[r.pickWeighted(22, 4, 3, 2, 20, 34, 15, 2, 2)]() {
	}
}

func (r *modelRig) existingStreams() []string {
	var out []string
	for _, p := range modelPaths {
		if _, ok := r.m.streams[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

func (r *modelRig) appendStep() bool {
	paths := r.existingStreams()
	if len(paths) == 0 {
		return false
	}
	p, n := paths[r.pick(len(paths))], 1+r.pick(5)
	r.note("append %d to %s", n, p)
	r.m.streams[p] += n
	r.m.streamChanged(p)
	r.h.source.grow(p, n)
	r.through()
	require.NoError(r.t, r.h.engine.StreamAppended(context.Background(), p))
	r.settle("L1 pending work wakes an IDLE consumer")
	return true
}

func (r *modelRig) createStreamStep() bool {
	var free []string
	for _, p := range modelPaths {
		if _, ok := r.m.streams[p]; !ok {
			free = append(free, p)
		}
	}
	if len(free) == 0 {
		return false
	}
	r.createStream(free[r.pick(len(free))], r.pick(4))
	return true
}

func (r *modelRig) createStream(p string, n int) {
	r.note("create %s with %d", p, n)
	r.m.streams[p] = n
	r.m.streamChanged(p)
	r.h.source.set(p, n)
	r.through()
	require.NoError(r.t, r.h.engine.StreamCreated(context.Background(), p))
	r.settle("stream created")
}

func (r *modelRig) deleteStreamStep() bool {
	paths := r.existingStreams()
	if len(paths) == 0 {
		return false
	}
	p := paths[r.pick(len(paths))]
	r.note("delete stream %s", p)
	r.m.deleteStream(p)
	r.h.source.remove(p)
	r.through()
	require.NoError(r.t, r.h.engine.StreamDeleted(context.Background(), p))
	r.settle("S7 stream deleted")
	if r.pick(2) == 0 {
		r.createStream(p, r.pick(4)) // a new stream at the same path
	}
	return true
}

// subscriptionStep deletes a subscription, or creates a missing one.
func (r *modelRig) subscriptionStep() bool {
	id := []string{"s1", "s2", modelEventsSub}[r.pick(3)]
	if _, ok := r.m.subs[id]; !ok {
		r.createSub(id)
		return true
	}
	r.note("delete subscription %s", id)
	r.m.deleteSub(id)
	r.through()
	rec := r.h.do(http.MethodDelete, modelPatterns[id]+"?subscription="+id, "")
	require.Equal(r.t, http.StatusNoContent, rec.Code, rec.Body.String())
	r.settle("S7 subscription deleted")
	r.learn()
	return true
}

func (r *modelRig) createSub(id string) {
	r.note("create subscription %s on %s", id, modelPatterns[id])
	r.through()
	body := fmt.Sprintf(`{"webhook":%q}`, r.recv.url)
	if id == modelEventsSub {
		body = fmt.Sprintf(`{"webhook":%q,%s}`, r.recv.url, modelEventsOptions)
	}
	rec := r.h.do(http.MethodPut, modelPatterns[id]+"?subscription="+id, body)
	require.Equal(r.t, http.StatusCreated, rec.Code, rec.Body.String())
	var out struct {
		Secret string `json:"webhook_secret"`
	}
	require.NoError(r.t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.NotEmpty(r.t, out.Secret)
	r.m.createSub(id, modelPatterns[id], out.Secret)
	r.settle("existing streams are adopted IDLE at their tails")
	r.learn()
}

// modelReplies are the answers a webhook gives, with their weights.
var modelReplies = []struct {
	name    string
	reply   modelReply
	outcome modelOutcome
	weight  int
}{
	{"200", modelReply{status: 200}, modelOK, 12},
	{"202 {done:false}", modelReply{status: 202, body: `{"done":false}`}, modelOK, 6},
	{"204", modelReply{status: 204}, modelOK, 4},
	{"200 not JSON", modelReply{status: 200, body: "thanks"}, modelOK, 3},
	{"200 {done:true}", modelReply{status: 200, body: `{"done":true}`}, modelDone, 25},
	{"500", modelReply{status: 500}, modelFail, 15},
	{"503", modelReply{status: 503}, modelFail, 5},
	{"404", modelReply{status: 404}, modelFail, 3},
	{"302", modelReply{status: http.StatusFound}, modelFail, 3},
	{"dropped connection", modelReply{drop: true}, modelFail, 4},
}

// replyStep answers an open POST; leaving POSTs open is how they hang.
func (r *modelRig) replyStep() bool {
	if len(r.m.requests) == 0 {
		return false
	}
	req := r.m.requests[r.pick(len(r.m.requests))]
	weights := make([]int, len(modelReplies))
	for i, rep := range modelReplies {
		weights[i] = rep.weight
	}
	rep := modelReplies[r.pickWeighted(weights...)]
	r.reply(req, rep.name, rep.reply, rep.outcome)
	return true
}

func (r *modelRig) reply(req *modelRequest, name string, rep modelReply, o modelOutcome) {
	modelCount("POST answered " + name)
	r.note("answer POST %s e%d a%d: %s", req.id, req.epoch, req.attempt, name)
	c := r.m.consumers[req.id]
	current := c != nil && c.inc == req.inc && c.epoch == req.epoch
	switch {
	case current && o == modelDone && c.state == webhooks.StateLive:
		modelCount("synchronous done after a callback claimed the wake")
	case current && o != modelFail && c.state == webhooks.StateWaking && req.attempt < c.attempt:
		modelCount("2xx from an earlier attempt of the cycle")
	}
	r.m.answer(req, o)
	req.arrival.reply <- rep
	switch {
	case !current:
		r.settle("a POST of an ended cycle changes nothing")
	case o == modelDone:
		r.settle("synchronous done auto-acks and returns to IDLE")
	case o == modelOK:
		r.settle("webhook 2xx moves WAKING to LIVE")
	default:
		r.settle("failed POST is retried on the backoff schedule")
	}
}

func (r *modelRig) advanceStep() bool {
	var d time.Duration
	next, ok := r.m.nextEvent()
	switch x := r.pick(100); {
	case x < 30:
		d = time.Duration(1+r.pick(2000)) * time.Millisecond
	case x < 50:
		d = time.Duration(5+r.pick(10)) * time.Second
	case x < 65:
		d = time.Duration(30+r.pick(30)) * time.Second
	case x < 67:
		d = time.Duration(1+r.pick(3)) * time.Minute
	case x < 70:
		exp, ok := r.latestTokenExpiry()
		if !ok {
			return false
		}
		d = exp.Sub(r.m.now) // the moment the newest token of a consumer expires
	case x < 90:
		if !ok {
			return false
		}
		d = next.Sub(r.m.now) // exactly to the next deadline
	default:
		if !ok || next.Sub(r.m.now) <= time.Millisecond {
			return false
		}
		d = next.Sub(r.m.now) - time.Millisecond // just short of it
	}
	r.note("advance %v", d)
	r.advance(d)
	return true
}

// latestTokenExpiry is when the newest token of some consumer expires, if
// that is at most three minutes away.
func (r *modelRig) latestTokenExpiry() (time.Time, bool) {
	for _, id := range r.ids {
		if toks := r.wallet[id]; len(toks) > 0 && r.m.consumers[id] != nil {
			exp := toks[len(toks)-1].exp
			if exp.After(r.m.now) && exp.Sub(r.m.now) <= 3*time.Minute {
				return exp, true
			}
		}
	}
	return time.Time{}, false
}

// advance moves the clock by d, stopping at every time the engine may act
// so that it acts at exactly that time and is settled before time moves on.
func (r *modelRig) advance(d time.Duration) {
	target := r.m.now.Add(d)
	for r.m.now.Before(target) {
		next := target
		if ev, ok := r.m.nextEvent(); ok && ev.Before(next) {
			next = ev
		}
		for _, t := range r.clock.armed(r.m.now) {
			if t.Before(next) {
				next = t
			}
		}
		r.quiesce()
		r.h.clock.Add(next.Sub(r.m.now))
		r.m.advanceTo(next)
		r.settle("timeouts: WAKING retry, backoff, liveness, request timeout, failure GC")
	}
}

// drain ends a sequence: no more appends, every POST answered with a
// synchronous done, the clock advanced as needed. Every consumer with
// pending work must be notified (L1) and all must end IDLE.
func (r *modelRig) drain() {
	r.note("drain")
	for _, id := range slices.Sorted(maps.Keys(r.m.subs)) {
		if r.m.subs[id].paused {
			r.resumeSub(id)
		}
	}
	r.draining = true
	r.drained = map[string]bool{}
	var waiting []string
	for _, id := range slices.Sorted(maps.Keys(r.m.consumers)) {
		c := r.m.consumers[id]
		open := slices.ContainsFunc(r.m.requests, func(req *modelRequest) bool {
			return req.id == id && req.inc == c.inc && req.epoch == c.epoch
		})
		if len(r.m.pendingPaths(c)) > 0 && !open {
			waiting = append(waiting, id)
		}
	}
	for round := 0; ; round++ {
		if round > 1000 {
			r.failf("L1 pending work causes a wake", "the drain did not end")
		}
		if len(r.m.requests) > 0 {
			r.reply(r.m.requests[0], "drain: 200 {done:true}", modelReply{status: 200, body: `{"done":true}`}, modelDone)
			continue
		}
		r.resumeFailed()
		if len(r.m.requests) > 0 {
			continue
		}
		if !r.m.busy() {
			break
		}
		next, ok := r.m.nextEvent()
		if !ok {
			r.failf("L1 pending work causes a wake", "consumers are not IDLE but nothing is scheduled")
		}
		r.advance(next.Sub(r.m.now))
	}
	for _, id := range waiting {
		if r.m.consumers[id] != nil && !r.drained[id] {
			r.failf("L1 pending work causes a wake", "consumer %s had pending work and was never notified", id)
		}
	}
}

// busy reports whether any consumer is not IDLE or has pending work; a
// FAILED one waits for a resume.
func (m *model) busy() bool {
	for _, c := range m.consumers {
		if c.state != webhooks.StateFailed && (c.state != webhooks.StateIdle || len(m.pendingPaths(c)) > 0) {
			return true
		}
	}
	return false
}

// resumeFailed revives every dead letter through the engine: an events
// consumer sends its batch again under the same delivery id, and a wake
// consumer wakes from its cursor if it has pending work.
func (r *modelRig) resumeFailed() {
	for _, id := range slices.Sorted(maps.Keys(r.m.consumers)) {
		c := r.m.consumers[id]
		if c.state != webhooks.StateFailed {
			continue
		}
		r.note("revive %s", id)
		c.attempt, c.failures, c.failingSince = 0, 0, time.Time{}
		if c.events && c.until > 0 {
			modelCount("FAILED events consumer revived")
			c.state = webhooks.StateWaking
			r.m.startAttempt(c)
		} else {
			modelCount("FAILED wake consumer revived")
			r.m.finish(c)
			r.m.runDue()
		}
		r.through()
		require.NoError(r.t, r.h.engine.ResumeConsumer(context.Background(), id))
		r.settle("a dead letter revives at its cursor")
	}
}

// ---------------------------------------------------------------------------
// Operator steps: pause, resume and rewind.

// statusStep pauses an active subscription, or resumes a paused one, with
// a PATCH.
func (r *modelRig) statusStep() bool {
	ids := slices.Sorted(maps.Keys(r.m.subs))
	if len(ids) == 0 {
		return false
	}
	id := ids[r.pick(len(ids))]
	if r.m.subs[id].paused {
		r.resumeSub(id)
		return true
	}
	r.note("pause %s", id)
	sub := r.m.subs[id]
	sub.paused = true
	r.m.subs[id] = sub
	r.through()
	rec := r.h.do(http.MethodPatch, modelPatterns[id]+"?subscription="+id, `{"status":"paused"}`)
	require.Equal(r.t, http.StatusOK, rec.Code, rec.Body.String())
	r.settle("a paused subscription starts no delivery")
	r.learn()
	return true
}

// resumeSub resumes paused subscription id: a retry that waited is sent,
// and each IDLE consumer with pending work starts, in ID order.
func (r *modelRig) resumeSub(id string) {
	r.note("resume %s", id)
	sub := r.m.subs[id]
	sub.paused = false
	r.m.subs[id] = sub
	for _, cid := range slices.Sorted(maps.Keys(r.m.consumers)) {
		c := r.m.consumers[cid]
		switch {
		case c.sub != id:
		case c.state == webhooks.StateWaking && !c.inFlight && c.deadline.IsZero() && r.m.gcDue(c):
			modelCount("held retry too old on resume: dead letter")
			r.m.deadLetter(c)
		case c.state == webhooks.StateWaking && !c.inFlight && c.deadline.IsZero():
			modelCount("held retry sent on resume")
			r.m.startAttempt(c)
		case c.state == webhooks.StateIdle:
			r.m.wakeIfPending(c)
		}
	}
	r.m.runDue()
	r.through()
	rec := r.h.do(http.MethodPatch, modelPatterns[id]+"?subscription="+id, `{"status":"active"}`)
	require.Equal(r.t, http.StatusOK, rec.Code, rec.Body.String())
	r.settle("a resumed subscription delivers its pending work")
	r.learn()
}

// rewindStep sets a consumer's cursor to a random offset of its primary
// stream, up to its tail: the delivery in progress ends, fenced by a new
// epoch, and what follows the offset is delivered again.
func (r *modelRig) rewindStep() bool {
	ids := slices.Sorted(maps.Keys(r.m.consumers))
	if len(ids) == 0 {
		return false
	}
	c := r.m.consumers[ids[r.pick(len(ids))]]
	i := slices.IndexFunc(c.streams, func(s webhooks.StreamOffset) bool { return s.Path == c.primary })
	if i < 0 {
		return false
	}
	pos := r.pick(r.m.streams[c.primary]+2) - 1
	off := webhooks.OffsetNone
	if pos >= 0 {
		off = offset(pos)
	}
	r.note("rewind %s to %s", c.id, off)
	modelCount("rewind " + string(c.state))
	c.streams[i].Offset = off
	if h := r.hist[c.id]; h != nil && h.inc == c.inc {
		// S4 holds for acks; an operator's rewind moves the cursor back.
		h.acked[c.primary] = modelPos(off)
	}
	c.attempt, c.failures, c.failingSince, c.until = 0, 0, time.Time{}, 0
	if c.state != webhooks.StateFailed {
		r.m.finish(c)
		r.m.runDue()
	}
	r.through()
	body := fmt.Sprintf(`{"offset":%q,"consumer":%q}`, off, c.id)
	rec := r.h.do(http.MethodPost, modelPatterns[c.sub]+"?subscription="+c.sub+"&rewind", body)
	require.Equal(r.t, http.StatusOK, rec.Code, rec.Body.String())
	r.settle("a rewound consumer delivers from its new cursor")
	return true
}

// ---------------------------------------------------------------------------
// Callbacks.

func (r *modelRig) callbackStep() bool {
	var ids, live []string
	for _, id := range r.ids {
		if len(r.wallet[id]) > 0 {
			ids = append(ids, id)
			if r.m.consumers[id] != nil {
				live = append(live, id)
			}
		}
	}
	if len(ids) == 0 {
		return false
	}
	switch {
	case len(live) > 0 && r.pick(100) < 85:
		ids = live
	case len(live) == 0 && r.pick(100) < 70:
		return false // mostly, zombies call back while someone is alive
	}
	id := ids[r.pick(len(ids))]
	toks := r.wallet[id]
	tok := toks[len(toks)-1]
	if r.pick(100) < 15 {
		tok = toks[r.pick(len(toks))]
	}
	call := modelCall{id: id, token: tok.raw, tokenOK: true, tokenEpoch: tok.epoch, tokenInc: tok.inc, tokenExp: tok.exp}
	what := "token e" + strconv.FormatInt(tok.epoch, 10)
	switch x := r.pick(100); {
	case x < 3:
		call.token, call.tokenOK, what = "not-a-token", false, "garbage token"
	case x < 5:
		parts := strings.Split(tok.raw, ".")
		sig := []byte(parts[2])
		sig[0] = map[bool]byte{true: 'B', false: 'A'}[sig[0] == 'A']
		call.token, call.tokenOK, what = parts[0]+"."+parts[1]+"."+string(sig), false, "tampered token"
	case x < 7:
		for _, other := range r.ids {
			if other != id && len(r.wallet[other]) > 0 {
				call.token, call.tokenOK, what = r.wallet[other][0].raw, false, "token of "+other
				break
			}
		}
	}
	what += ", " + r.callbackBody(&call)
	r.note("callback %s: %s", id, what)

	before, _ := r.h.store.GetConsumer(context.Background(), id)
	want := r.m.callback(call)
	r.through()
	got := r.h.rawCallback(id, call.token, call.body)
	r.context = modelCallbackProperty(call, want)
	modelCount(fmt.Sprintf("callback answered %d %s", want.status, want.code))
	if c := r.m.consumers[id]; c != nil && c.inc != tok.inc && tok.epoch == c.epoch && call.tokenOK {
		modelCount("callback with a token of an earlier incarnation at the current epoch")
	}
	if got.status != want.status || (want.code != "" && (got.body.Error == nil || got.body.Error.Code != want.code)) {
		r.failf(r.context, "callback %s (%s): got %d %s, model expects %d %s", id, what, got.status, got.raw, want.status, want.code)
	}
	if want.code != "" {
		// Atomicity, and S6: a rejected callback changes nothing.
		after, _ := r.h.store.GetConsumer(context.Background(), id)
		if !modelSameConsumer(before, after) {
			r.failf(r.context, "a rejected callback (%s) changed consumer %s:\nbefore %+v\nafter  %+v", want.code, id, before, after)
		}
	}
	switch {
	case want.code == receiver.CodeTokenExpired:
		r.takeToken(id, got.body.Token, true, call.tokenEpoch, "the TOKEN_EXPIRED answer")
	case want.code == "":
		if !want.fresh && got.body.Token != call.token {
			r.failf("S5 token present", "callback answer token %q is not the one sent, which is far from expiry", got.body.Token)
		}
		// A renewed token keeps the epoch it renews, even if the callback
		// started a new cycle: it fences the worker that sent it.
		r.takeToken(id, got.body.Token, want.fresh, call.tokenEpoch, "a callback answer")
		if want.fresh {
			modelCount("callback answer renewed the token")
		}
		if before != nil {
			for _, b := range before.Streams {
				for _, g := range got.body.Streams {
					if g.Path == b.Path && modelPos(g.Offset) < modelPos(b.Offset) {
						r.failf("S4 offset monotonicity", "callback moved the acked offset of %s on %s back from %s to %s", id, b.Path, b.Offset, g.Offset)
					}
				}
			}
		}
		if !modelSameStreams(got.body.Streams, want.streams) {
			r.failf(r.context, "callback answer streams %v, model expects %v", got.body.Streams, want.streams)
		}
	}
	if want.code == "" && call.req.Done {
		if c := r.m.consumers[id]; c != nil && c.state == webhooks.StateWaking && c.epoch > call.tokenEpoch {
			modelCount("L3 done with pending work re-woke")
		} else {
			modelCount("L2 done without pending work")
		}
	}
	r.settle(r.context)
	return true
}

// callbackBody fills in a random body for call and describes it.
func (r *modelRig) callbackBody(call *modelCall) string {
	c := r.m.consumers[call.id]
	epoch := call.tokenEpoch
	var what []string
	switch x := r.pick(100); {
	case x < 5:
		epoch--
		what = append(what, "body epoch-1")
	case x < 8:
		epoch++
		what = append(what, "body epoch+1")
	}
	req := &receiver.CallbackRequest{Epoch: &epoch}
	if c != nil {
		switch x := r.pick(100); {
		case x < 35:
			req.WakeID = c.wakeID
			what = append(what, "claim")
		case x < 40:
			req.WakeID = "w_" + strings.Repeat("0f", 16)
			what = append(what, "fabricated wake_id")
		case x < 45 && len(r.pastWakes[call.id]) > 1:
			past := r.pastWakes[call.id]
			req.WakeID = past[r.pick(len(past)-1)]
			what = append(what, "old wake_id")
		}
		if r.pick(100) < 45 {
			for range 1 + r.pick(2) {
				req.Acks = append(req.Acks, r.randomAck(c))
			}
		}
		if r.pick(100) < 15 {
			req.Subscribe = []string{r.unsubscribed(c)}
		}
		switch x := r.pick(100); {
		case x < 3:
			for _, s := range c.streams {
				req.Unsubscribe = append(req.Unsubscribe, s.Path)
			}
		case x < 12:
			req.Unsubscribe = []string{c.streams[r.pick(len(c.streams))].Path}
		}
		if r.pick(100) < 25 {
			req.Done = true
			if r.pick(100) < 60 {
				for _, s := range c.streams {
					if n, ok := r.m.streams[s.Path]; ok {
						req.Acks = append(req.Acks, webhooks.StreamOffset{Path: s.Path, Offset: offset(n)})
					}
				}
			}
		}
	}
	data, err := json.Marshal(req)
	require.NoError(r.t, err)
	call.body, call.req = string(data), req
	switch x := r.pick(100); {
	case x < 2:
		call.body, call.req = `{"epoch":`, nil
		what = append(what, "malformed JSON")
	case x < 4:
		call.body, call.req = strings.Replace(call.body, `"epoch":`, `"bogus":true,"epoch":`, 1), nil
		what = append(what, "unknown field")
	case x < 6:
		call.body, call.req = `{"wake_id":"w_1"}`, nil
		what = append(what, "no epoch")
	case x < 7:
		call.body, call.req = fmt.Sprintf(`{"epoch":%d,"unsubscribe":["no-slash"]}`, epoch), nil
		what = append(what, "bad path")
	}
	return strings.Join(append(what, call.body), " ")
}

// unsubscribed is a path c does not subscribe to, if there is one.
func (r *modelRig) unsubscribed(c *modelConsumer) string {
	var out []string
	for _, p := range modelPaths {
		if !slices.ContainsFunc(c.streams, func(s webhooks.StreamOffset) bool { return s.Path == p }) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return modelPaths[r.pick(len(modelPaths))]
	}
	return out[r.pick(len(out))]
}

// randomAck is mostly a valid ack, sometimes backwards, beyond the tail,
// malformed, or of a stream the consumer does not have.
func (r *modelRig) randomAck(c *modelConsumer) webhooks.StreamOffset {
	p := c.streams[r.pick(len(c.streams))].Path
	if r.pick(100) < 5 {
		p = modelPaths[r.pick(len(modelPaths))]
	}
	n := r.m.streams[p]
	switch x := r.pick(100); {
	case x < 5:
		return webhooks.StreamOffset{Path: p, Offset: webhooks.OffsetNone}
	case x < 8:
		return webhooks.StreamOffset{Path: p, Offset: "bogus"}
	case x < 15:
		return webhooks.StreamOffset{Path: p, Offset: offset(n + 1 + r.pick(3))}
	default:
		return webhooks.StreamOffset{Path: p, Offset: offset(r.pick(n + 1))}
	}
}

// modelCallbackProperty names the property a callback exercises.
func modelCallbackProperty(call modelCall, want modelAnswer) string {
	switch want.code {
	case receiver.CodeStaleEpoch:
		return "S6 stale epoch rejection"
	case receiver.CodeConsumerGone:
		return "S7 gone after delete"
	case receiver.CodeAlreadyClaimed:
		return "S3 non-matching wake_id is ALREADY_CLAIMED"
	case receiver.CodeTokenExpired, receiver.CodeTokenInvalid:
		return "callback token check"
	case receiver.CodeInvalidOffset:
		return "invalid ack rejected atomically"
	case receiver.CodeInvalidRequest:
		return "invalid callback body rejected"
	}
	parts := []string{"callback applied"}
	if call.req.WakeID != "" {
		parts = append(parts, "S3 idempotent claim")
	}
	if len(call.req.Acks) > 0 {
		parts = append(parts, "S4 acks")
	}
	if len(call.req.Subscribe)+len(call.req.Unsubscribe) > 0 {
		parts = append(parts, "dynamic subscribe/unsubscribe")
	}
	if call.req.Done {
		parts = append(parts, "L2/L3 done goes IDLE, or re-wakes if work is pending")
	}
	return strings.Join(parts, ", ")
}

// takeToken checks a token the engine handed out, for epoch, and adds it
// to the wallet. A token that is not fresh must be the one the caller sent.
func (r *modelRig) takeToken(id, raw string, fresh bool, epoch int64, from string) {
	claims, ok := modelDecodeToken(raw)
	if !ok {
		r.failf("S5 token present", "%s carries no valid token: %q", from, raw)
	}
	if !fresh {
		return
	}
	wantExp := r.m.now.Add(r.m.cfg.tokenTTL).Truncate(time.Second)
	if claims.Sub != id || claims.Epoch != epoch || !time.Unix(claims.Exp, 0).Equal(wantExp) {
		r.failf("token claims", "%s: token for %s epoch %d expiring %v; model expects %s epoch %d expiring %v",
			from, claims.Sub, claims.Epoch, time.Unix(claims.Exp, 0).UTC(), id, epoch, wantExp)
	}
	inc := 0
	if c := r.m.consumers[id]; c != nil {
		inc = c.inc
	}
	r.wallet[id] = append(r.wallet[id], modelToken{raw: raw, epoch: epoch, exp: wantExp, inc: inc})
}

type modelClaims struct {
	Sub   string `json:"sub"`
	Epoch int64  `json:"epoch"`
	Exp   int64  `json:"exp"`
}

func modelDecodeToken(raw string) (modelClaims, bool) {
	var claims modelClaims
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return claims, false
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	return claims, err == nil && json.Unmarshal(data, &claims) == nil
}

// ---------------------------------------------------------------------------
// Settling and comparing.

// settle waits until the engine has done what the last step caused, then
// compares it with the model. Deliveries are asynchronous, so it waits,
// boundedly, for the POSTs the model expects to reach the receiver and for
// the Store to reach the state the model expects; only then does it check.
func (r *modelRig) settle(property string) {
	r.t.Helper()
	r.context = property
	r.m.runDue() // a wake is due at once
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for len(r.m.sends) > 0 {
		select {
		case a := <-r.recv.arrivals:
			r.arrive(a)
			continue
		default:
		}
		// An idle engine with fewer deliveries than expected sends no more.
		if r.stuck(ctx, len(r.m.requests)-len(r.m.sends)) && len(r.recv.arrivals) == 0 {
			r.check(r.snapshot()) // a broken invariant names the problem best
			r.failf(property, "expected webhook POST to %s (epoch %d, attempt %d) was never sent", r.m.sends[0].id, r.m.sends[0].epoch, r.m.sends[0].attempt)
		}
		r.pause(ctx)
	}
	got := r.snapshot()
	for {
		d := r.diff(got)
		if d == "" {
			break
		}
		if r.stuck(ctx, len(r.m.requests)) {
			got = r.snapshot() // taken once the engine is idle
			if d = r.diff(got); d == "" {
				break
			}
			r.check(got)
			r.failf(property, "%s", d)
		}
		r.pause(ctx)
		got = r.snapshot()
	}
	select {
	case a := <-r.recv.arrivals:
		r.arrive(a)
	default:
	}
	r.check(got)
}

// stuck reports, while a wait goes on, whether waiting longer is useless:
// the bound has passed, or the engines are idle with open delivery
// attempts.
func (r *modelRig) stuck(ctx context.Context, open int) bool {
	if ctx.Err() != nil {
		return true
	}
	quiet, _ := r.quiet(open)
	return quiet
}

// pause waits for the engines to make progress, or a POST to arrive,
// within the wait's bound.
func (r *modelRig) pause(ctx context.Context) {
	select {
	case <-r.h.signals():
	case a := <-r.recv.arrivals:
		r.arrive(a)
	case <-ctx.Done():
	}
}

// quiesce waits until the engines are idle, before the clock moves: each
// scheduler parked with its timer armed from the current time and nothing
// kicking it, and exactly one delivery attempt running per POST the model
// holds open, so that every answered POST has been applied. Were the clock
// moved while a scheduler works, it could arm its timer from a time that
// has passed and act late.
func (r *modelRig) quiesce() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		quiet, why := r.quiet(len(r.m.requests))
		if quiet {
			return
		}
		if ctx.Err() != nil {
			r.failf(r.context, "the engine did not settle: %s", why)
		}
		r.pause(ctx)
	}
}

// quiet reports whether every engine's scheduler is parked and exactly open
// delivery attempts run, or says why not.
func (r *modelRig) quiet(open int) (bool, string) {
	running := int64(0)
	for i, e := range r.engines {
		if !webhooks.SchedulerParked(e) {
			return false, fmt.Sprintf("the scheduler of engine %c is busy", 'A'+i)
		}
		running += webhooks.DeliveriesRunning(e)
	}
	if running != int64(open) {
		return false, fmt.Sprintf("%d delivery attempts run, the model holds %d POSTs open", running, open)
	}
	return true, ""
}

// arrive checks a POST that reached the receiver against the model.
func (r *modelRig) arrive(a *modelArrival) {
	id := a.n.ConsumerID
	if id == "" && a.batch.DeliveryID != "" {
		id = webhooks.ConsumerID(a.batch.SubscriptionID, a.batch.Stream)
	}
	i := slices.IndexFunc(r.m.sends, func(req *modelRequest) bool { return req.id == id })
	if i < 0 {
		r.failf("unexpected webhook", "the engine sent a POST the model does not expect: %s", a.body)
	}
	req := r.m.sends[i]
	r.m.sends = slices.Delete(r.m.sends, i, i+1)
	req.arrival = a
	c := r.m.consumers[id]
	if c == nil {
		r.failf("unexpected webhook", "POST to %s, which the model has removed", id)
	}
	sub := r.m.subs[c.sub]
	if c.events {
		r.arriveBatch(a, req, c, sub)
		return
	}
	r.note("  POST %s e%d a%d streams %s", id, a.n.Epoch, req.attempt, modelStreamsString(a.n.Streams))
	modelCount(map[bool]string{true: "POST first attempt", false: "POST retry"}[req.attempt == 1])
	if r.draining {
		r.drained[id] = true
	}

	// S8: the signature is the HMAC of "<t>.<body>" under the secret.
	ts := strconv.FormatInt(r.m.now.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(sub.secret))
	mac.Write([]byte(ts + "."))
	mac.Write(a.body)
	if want := "t=" + ts + ",sha256=" + hex.EncodeToString(mac.Sum(nil)); a.sig != want {
		r.failf("S8 signature presence", "POST to %s has signature %q, want %q", id, a.sig, want)
	}

	// S1, S2: epochs rise from cycle to cycle; a cycle has one wake_id.
	if c.wakeID == "" {
		r.adoptWakeID(c, a.n.WakeID)
	}
	if last, ok := r.notified[id]; ok && last.inc == c.inc {
		switch {
		case a.n.Epoch < last.epoch:
			r.failf("S1 epoch monotonicity", "POST to %s has epoch %d after epoch %d", id, a.n.Epoch, last.epoch)
		case a.n.Epoch == last.epoch && a.n.WakeID != last.wakeID:
			r.failf("S2 wake ID uniqueness", "a retry to %s at epoch %d changed wake_id %s to %s", id, a.n.Epoch, last.wakeID, a.n.WakeID)
		}
	}
	r.notified[id] = modelHist{inc: c.inc, epoch: a.n.Epoch, wakeID: a.n.WakeID}

	if a.n.Epoch != req.epoch || a.n.WakeID != c.wakeID {
		r.failf("S1 epoch monotonicity", "POST to %s has epoch %d wake_id %s; model expects epoch %d wake_id %s", id, a.n.Epoch, a.n.WakeID, req.epoch, c.wakeID)
	}
	if !modelSameStreams(a.n.Streams, req.streams) {
		r.failf("notification streams", "POST to %s lists streams %v; model expects %v", id, a.n.Streams, req.streams)
	}
	if !modelSameSet(a.n.TriggeredBy, req.triggeredBy) {
		r.failf("notification triggered_by", "POST to %s triggered by %v; model expects %v", id, a.n.TriggeredBy, req.triggeredBy)
	}
	if a.n.PrimaryStream != c.primary || a.n.Callback != callbackBase+"/callback/"+id {
		r.failf("notification fields", "POST to %s: primary %q callback %q", id, a.n.PrimaryStream, a.n.Callback)
	}
	r.takeToken(id, a.n.Token, true, req.epoch, "the notification")
}

// arriveBatch checks an event-push POST against the model: the batch of
// bytes the model expects, under the delivery id of the batch, the same
// for every attempt and never used before.
func (r *modelRig) arriveBatch(a *modelArrival, req *modelRequest, c *modelConsumer, sub modelSub) {
	b := a.batch
	r.note("  POST %s e%d a%d bytes %d..%d", c.id, req.epoch, req.attempt, req.from, req.end)
	modelCount(map[bool]string{true: "events batch first attempt", false: "events batch retry"}[req.attempt == 1])
	if r.draining {
		r.drained[c.id] = true
	}
	ts := strconv.FormatInt(r.m.now.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(sub.secret))
	mac.Write([]byte(ts + "."))
	mac.Write(a.body)
	if want := "t=" + ts + ",sha256=" + hex.EncodeToString(mac.Sum(nil)); a.sig != want {
		r.failf("S8 signature presence", "batch to %s has signature %q, want %q", c.id, a.sig, want)
	}
	if c.wakeID == "" && req.epoch == c.epoch {
		r.adoptWakeID(c, b.DeliveryID)
	}
	if last, ok := r.notified[c.id]; ok && last.inc == c.inc && last.epoch == req.epoch && last.wakeID != b.DeliveryID {
		r.failf("same batch, same delivery id", "a retry to %s changed delivery id %s to %s", c.id, last.wakeID, b.DeliveryID)
	}
	r.notified[c.id] = modelHist{inc: c.inc, epoch: req.epoch, wakeID: b.DeliveryID}
	if a.deliveryID != b.DeliveryID || (req.epoch == c.epoch && b.DeliveryID != c.wakeID) {
		r.failf("same batch, same delivery id", "batch to %s: header %q, body %q, model %q", c.id, a.deliveryID, b.DeliveryID, c.wakeID)
	}
	from := offset(req.from)
	if req.streams[0].Offset == webhooks.OffsetNone {
		from = webhooks.OffsetNone
	}
	want := receiver.EventsPayload{
		SubscriptionID: c.sub,
		Stream:         c.primary,
		DeliveryID:     b.DeliveryID,
		Events:         []json.RawMessage{json.RawMessage(strconv.Quote(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", req.end-req.from)))))},
		FirstOffset:    from,
		Offset:         offset(req.end),
		UpToDate:       req.end == req.until,
	}
	if got, exp := fmt.Sprintf("%+v", b), fmt.Sprintf("%+v", want); got != exp {
		r.failf("batches in order, each once", "batch to %s is %s; model expects %s", c.id, a.body, exp)
	}
}

// adoptWakeID learns the wake_id the engine chose for a new cycle, which
// must never have been used before (S2).
func (r *modelRig) adoptWakeID(c *modelConsumer, wakeID string) {
	if wakeID == "" || r.wakeIDs[wakeID] {
		r.failf("S2 wake ID uniqueness", "consumer %s epoch %d has wake_id %q, which is empty or was used before", c.id, c.epoch, wakeID)
	}
	r.wakeIDs[wakeID] = true
	c.wakeID = wakeID
	r.pastWakes[c.id] = append(r.pastWakes[c.id], wakeID)
}

// snapshot reads every consumer the universe allows from the Store.
func (r *modelRig) snapshot() map[string]*webhooks.Consumer {
	out := make(map[string]*webhooks.Consumer, len(r.ids))
	for _, id := range r.ids {
		c, err := r.h.store.GetConsumer(context.Background(), id)
		if !errors.Is(err, webhooks.ErrConsumerNotFound) {
			require.NoError(r.t, err)
			out[id] = c
		}
	}
	return out
}

// diff describes the first consumer whose stored state differs from the
// model, naming what differs, or returns "".
func (r *modelRig) diff(got map[string]*webhooks.Consumer) string {
	for _, id := range r.ids {
		g, w := got[id], r.m.consumers[id]
		if what := modelDiffers(g, w); what != "" {
			return fmt.Sprintf("consumer %s differs from the model in %s\nengine: %s\nmodel:  %s", id, what, r.engineView(g), r.modelView(w))
		}
	}
	return ""
}

// modelDiffers names what differs between a stored consumer and the model.
func modelDiffers(g *webhooks.Consumer, w *modelConsumer) string {
	if g == nil || w == nil {
		if g == nil && w == nil {
			return ""
		}
		return "presence"
	}
	var out []string
	for _, d := range []struct {
		differs bool
		what    string
	}{
		{g.SubscriptionID != w.sub || g.PrimaryStream != w.primary, "identity"},
		{g.State != w.state, "state"},
		{g.Epoch != w.epoch, "epoch"},
		{!modelSameStreams(g.Streams, w.streams), "streams and acked offsets"},
		{!g.Deadline.Equal(w.deadline), "deadline (retry, WAKING or liveness timeout)"},
		{g.Attempt != w.attempt || g.InFlight != w.inFlight, "delivery attempt"},
		{g.Failures != w.failures || !g.FailingSince.Equal(w.failingSince), "failure run (failure GC)"},
		{w.events && g.Batch != w.batch(), "events batch"},
	} {
		if d.differs {
			out = append(out, d.what)
		}
	}
	return strings.Join(out, ", ")
}

// check runs, on a snapshot that matches the model, the checks that do not
// come down to the model: the invariants and wake_id identity.
func (r *modelRig) check(got map[string]*webhooks.Consumer) {
	r.t.Helper()
	if !r.h.clock.Now().Equal(r.m.now) {
		r.failf("model clock", "mock clock at %v, model at %v", r.h.clock.Now(), r.m.now)
	}
	for _, id := range r.ids {
		g, w := got[id], r.m.consumers[id]
		if g == nil {
			delete(r.hist, id)
			continue
		}
		inc := 0
		if w != nil {
			inc = w.inc
		}
		if w != nil && w.epoch == g.Epoch {
			if w.epoch > 0 && w.wakeID == "" {
				r.adoptWakeID(w, g.WakeID)
			}
			if g.WakeID != w.wakeID {
				r.failf("S2 wake ID uniqueness", "consumer %s epoch %d has wake_id %s; the model saw %s", id, g.Epoch, g.WakeID, w.wakeID)
			}
		}
		r.checkInvariants(g, inc)
	}
}

var modelStateRank = map[webhooks.ConsumerState]int{webhooks.StateWaking: 0, webhooks.StateLive: 1, webhooks.StateIdle: 2}

// checkInvariants checks what must hold of any consumer the engine stores,
// whatever the model says, against what was last observed of it.
func (r *modelRig) checkInvariants(c *webhooks.Consumer, inc int) {
	now := r.m.now
	pending := false
	for _, s := range c.Streams {
		n, ok := r.m.streams[s.Path]
		if ok && modelPos(s.Offset) > n {
			r.failf("acks never pass the tail", "consumer %s acked %s at %s beyond its tail %d", c.ID, s.Path, s.Offset, n)
		}
		pending = pending || (ok && modelPending(r.m.subs[c.SubscriptionID].events, c.Epoch, c.PrimaryStream, s, n))
	}
	switch c.State {
	case webhooks.StateIdle:
		if pending && !r.m.subs[c.SubscriptionID].paused {
			r.failf("L1 pending work causes a wake", "consumer %s is IDLE with pending work: nothing will wake it", c.ID)
		}
		if !c.Deadline.IsZero() {
			r.failf("IDLE schedules nothing", "IDLE consumer %s has deadline %v", c.ID, c.Deadline)
		}
	case webhooks.StateWaking, webhooks.StateLive:
		held := c.State == webhooks.StateWaking && !c.InFlight && c.Deadline.IsZero() && r.m.subs[c.SubscriptionID].paused
		if !held && !c.Deadline.After(now) {
			r.failf("L1 pending work causes a wake", "%s consumer %s has deadline %v at %v: it is stuck", c.State, c.ID, c.Deadline, now)
		}
	case webhooks.StateFailed:
		if !c.Deadline.IsZero() || c.LastError == "" {
			r.failf("FAILED waits for a resume", "FAILED consumer %s has deadline %v, last error %q", c.ID, c.Deadline, c.LastError)
		}
	}
	acked := map[string]int{}
	for _, s := range c.Streams {
		acked[s.Path] = modelPos(s.Offset)
	}
	prev := r.hist[c.ID]
	r.hist[c.ID] = &modelHist{inc: inc, epoch: c.Epoch, state: c.State, wakeID: c.WakeID, acked: acked}
	if prev == nil || prev.inc != inc {
		return
	}
	switch {
	case c.Epoch < prev.epoch:
		r.failf("S1 epoch monotonicity", "consumer %s went from epoch %d to %d", c.ID, prev.epoch, c.Epoch)
	case c.Epoch == prev.epoch && c.WakeID != prev.wakeID:
		r.failf("S2 wake ID uniqueness", "consumer %s changed wake_id within epoch %d", c.ID, c.Epoch)
	case c.SubscriptionID != modelEventsSub && c.Epoch == prev.epoch && modelStateRank[c.State] < modelStateRank[prev.state]:
		r.failf("one claim per epoch", "consumer %s went from %s back to %s within epoch %d", c.ID, prev.state, c.State, c.Epoch)
	}
	for p, off := range acked {
		if old, ok := prev.acked[p]; ok && off < old {
			r.failf("S4 offset monotonicity", "consumer %s: acked offset of %s went from %d back to %d", c.ID, p, old, off)
		}
	}
}

// The views render a consumer the same way from the engine and from the
// model, times relative to now, streams sorted.

func (r *modelRig) engineView(c *webhooks.Consumer) string {
	if c == nil {
		return "absent"
	}
	return r.view(c.SubscriptionID, c.PrimaryStream, c.State, c.Epoch, c.Streams, c.Deadline, c.Attempt, c.InFlight, c.Failures, c.FailingSince)
}

func (r *modelRig) modelView(c *modelConsumer) string {
	if c == nil {
		return "absent"
	}
	return r.view(c.sub, c.primary, c.state, c.epoch, c.streams, c.deadline, c.attempt, c.inFlight, c.failures, c.failingSince)
}

func (r *modelRig) view(sub, primary string, state webhooks.ConsumerState, epoch int64, streams []webhooks.StreamOffset,
	deadline time.Time, attempt int, inFlight bool, failures int, failingSince time.Time) string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(r.m.now).String()
	}
	return fmt.Sprintf("%s %s %s epoch=%d streams=%s deadline=%s attempt=%d inflight=%t failures=%d since=%s",
		sub, primary, state, epoch, modelStreamsString(streams), rel(deadline), attempt, inFlight, failures, rel(failingSince))
}

func modelStreamsString(streams []webhooks.StreamOffset) string {
	var parts []string
	for _, s := range streams {
		parts = append(parts, fmt.Sprintf("%s@%d", s.Path, modelPos(s.Offset)))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// modelSameStreams compares stream lists as sets: the spec gives no order.
func modelSameStreams(a, b []webhooks.StreamOffset) bool {
	return len(a) == len(b) && modelStreamsString(a) == modelStreamsString(b)
}

func modelSameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func modelSameConsumer(a, b *webhooks.Consumer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return fmt.Sprintf("%+v", *a) == fmt.Sprintf("%+v", *b)
}

// A synchronous done acks each stream to its tail when the wake began. A
// stream deleted during the wake and created again at the same path is
// another stream: were it acked to the old stream's tail, its events up to
// there would never be delivered.
func TestSyncDoneSkipsAStreamRecreatedDuringTheWake(t *testing.T) {
	const tools = "/tools/x"
	for _, unsubscribeFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsubscribe first %t", unsubscribeFirst), func(t *testing.T) {
			h := newHarness(t)
			h.subscribe("s1", "/agents/*")
			h.create(tools, 5)
			h.create(agentA, 0)
			h.appendTo(agentA, 10)
			d := h.nextDelivery()
			h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateLive })
			r := h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(1), Subscribe: []string{tools}, Acks: streamOffsets(agentA, offset(10)), Done: true})
			require.Equal(t, http.StatusOK, r.status, r.raw)

			// The second wake records tools at 10; its POST answers
			// done only after the consumer claimed the wake by callback.
			hold := make(chan struct{})
			h.recv.queue(reply{status: http.StatusOK, body: `{"done":true}`, hold: hold})
			h.appendTo(tools, 5)
			d = h.nextDelivery()
			r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(2), WakeID: d.n.WakeID})
			require.Equal(t, http.StatusOK, r.status, r.raw)
			if unsubscribeFirst {
				r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(2), Unsubscribe: []string{tools}})
				require.Equal(t, http.StatusOK, r.status, r.raw)
			}
			h.source.remove(tools)
			require.NoError(t, h.engine.StreamDeleted(context.Background(), tools))
			h.create(tools, 2)
			r = h.callback(agentAID, d.n.Token, receiver.CallbackRequest{Epoch: epoch(2), Subscribe: []string{tools}})
			require.Equal(t, http.StatusOK, r.status, r.raw)
			close(hold)

			c := h.waitConsumer(agentAID, func(c *webhooks.Consumer) bool { return c.State == webhooks.StateIdle })
			require.Equal(t, streamOffsets(agentA, offset(10), tools, offset(2)), c.Streams)
			h.appendTo(tools, 3)
			d = h.nextDelivery()
			require.Equal(t, int64(3), d.n.Epoch, "the new stream's events wake the consumer")
			require.Equal(t, []string{tools}, d.n.TriggeredBy)
		})
	}
}
