package webhooks_test

// TestModelDS is the model test of the reserved __ds subscriptions
// (upstream protocol, sections 6 and 7), beside TestModel's of seed 001.
// It runs the real engine (mock clock, memstore, fake source that appends
// wake events, a real HTTP receiver) through random sequences over a
// webhook and a pull-wake subscription: PUTs with a pattern and/or
// explicit streams, explicit links added and removed, subscriptions
// deleted and created again, stream creates, appends and deletes, webhook
// answers ({"done":true}, 2xx, failures, hangs past the request timeout),
// callbacks, acks, heartbeats and releases with current and stale
// generations, wake ids and tokens, claims by racing workers, and clock
// advances across leases and retry backoffs. After every step it compares
// the Store's DSCursor and DSLinks, every webhook POST and every wake
// event with a reference model written here from the protocol, and checks
// the invariants D1–D7 on what it observes; each failure message starts
// with the name of the check. The retry jitter is random: the model knows
// its window and learns the time the engine chose.
//
// Replay a failing sequence with:
//
//	go test -race -run 'TestModelDS$' -model.seed=N

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

var modelDSCoverage = &modelCounts{n: map[string]int{}}

func TestModelDS(t *testing.T) {
	runModelSequences(t, "TestModelDS", 30, 10, modelDSRun, modelDSCoverage)
}

// The universe of a sequence: a webhook subscription and a pull-wake one
// whose wake stream is w/pool, over streams under e/ (one deep enough for
// "**" only) and m/1, which only explicit links reach.
const (
	dsmHook     = "hook"
	dsmPull     = "pull"
	dsmWakePath = "w/pool"
)

var (
	dsmPaths       = []string{"e/1", "e/2", "e/x/y", "m/1", dsmWakePath}
	dsmPatterns    = map[string][]string{dsmHook: {"e/*", "e/**", ""}, dsmPull: {"**", "e/*", ""}}
	dsmExplicit    = map[string][]string{dsmHook: {"m/1", "e/1"}, dsmPull: {"m/1", "e/2"}}
	dsmLeases      = []time.Duration{time.Second, 3 * time.Second, 10 * time.Second}
	dsmWorkers     = []string{"worker-1", "worker-2", "worker-3"}
	dsmSignatureRe = regexp.MustCompile(`^t=\d+,kid=ds_[^,]+,ed25519=[A-Za-z0-9_-]+$`)
)

// dsmBackoff is the retry wait of section 7.1 before jitter: 1 s doubling
// to 60 s; the engine's is within 20 % of it.
func dsmBackoff(attempt int) time.Duration {
	return min(time.Second<<min(attempt-1, 10), time.Minute)
}

// dsmOffset is the wire offset of model position n; -1 is OffsetNone.
func dsmOffset(n int) string {
	if n < 0 {
		return webhooks.OffsetNone
	}
	return offset(n)
}

// ---------------------------------------------------------------------------
// The reference model.

type dsmLink struct {
	glob, explicit bool
	acked, tail    int
}

func (l *dsmLink) linkType() string {
	if l.explicit {
		return "explicit"
	}
	return "glob"
}

// dsmConfig is a subscription's configuration, as PUT gives it.
type dsmConfig struct {
	pattern string
	streams []string
	lease   time.Duration
}

type dsmSub struct {
	id    string
	typ   webhooks.DSType
	cfg   dsmConfig
	inc   int // incarnation: deletion and re-creation start a new one
	links map[string]*dsmLink

	gen      int64
	inflight bool
	wakeID   string // "" until learned
	holder   string
	lease    time.Time
	due      time.Time
	attempt  int
	status   webhooks.DSStatus
	// retry, while set, is the window of the due time of a retry just
	// scheduled, which the model learns from the Store.
	retryLo, retryHi time.Time
}

func (s *dsmSub) pending() bool {
	for _, l := range s.links {
		if l.tail > l.acked {
			return true
		}
	}
	return false
}

// pendingLinks are the pending links, by path, as a wake lists them.
func (s *dsmSub) pendingLinks() []dsmSnap {
	var out []dsmSnap
	for _, p := range slices.Sorted(maps.Keys(s.links)) {
		if l := s.links[p]; l.tail > l.acked {
			out = append(out, dsmSnap{path: p, typ: l.linkType(), acked: l.acked, tail: l.tail})
		}
	}
	return out
}

// matches is the engine's rule: the pattern, never the own wake stream.
func (s *dsmSub) matches(path string) bool {
	return s.cfg.pattern != "" && (s.typ != webhooks.DSPullWake || path != dsmWakePath) &&
		modelMatch("/"+s.cfg.pattern, "/"+path)
}

// dsmSnap is a link as a wake shows it.
type dsmSnap struct {
	path, typ   string
	acked, tail int
}

// dsmPost is a webhook POST the model expects, or holds open.
type dsmPost struct {
	sub     string
	inc     int
	gen     int64
	attempt int
	streams []dsmSnap
	sentAt  time.Time
	wakeID  string // learned on arrival
	token   string
	arrival *modelArrival
}

// dsmEvent is a wake event the model expects on the wake stream.
type dsmEvent struct {
	sub    string
	gen    int64
	stream string
	ts     int64
}

type dsModel struct {
	now        time.Time
	reqTimeout time.Duration
	streams    map[string]int
	subs       map[string]*dsmSub
	gens       map[string]int64 // the generation a re-created subscription continues
	incs       map[string]int
	sends      []*dsmPost // expected, not arrived yet
	open       []*dsmPost // arrived, not answered
	events     []dsmEvent // expected, not seen yet
	// expiredWith records the generation of a subscription whose lease
	// expired with pending work: D3 wants a later one.
	expiredWith map[string]int64
}

// endWake is EndWake: the wake ends; pending work is due at once.
func (m *dsModel) endWake(s *dsmSub) {
	s.inflight, s.wakeID, s.holder, s.lease = false, "", "", time.Time{}
	s.attempt, s.status = 0, webhooks.DSActive
	s.due = time.Time{}
	if s.pending() {
		s.due = m.now
	}
}

// link links path to s at position at, or adds a type to its link.
func (m *dsModel) link(s *dsmSub, path string, explicit bool, at int) {
	l := s.links[path]
	if l == nil {
		l = &dsmLink{acked: at, tail: at}
		s.links[path] = l
	}
	if explicit {
		l.explicit = true
	} else {
		l.glob = true
	}
}

// tailOf is where a new link of path starts: the stream's tail, or
// OffsetNone if it does not exist.
func (m *dsModel) tailOf(path string) int {
	if n, ok := m.streams[path]; ok {
		return n
	}
	return -1
}

// streamChanged is the engine's streamChanged: matching subscriptions link
// path before its append counts; then the tail is noted.
func (m *dsModel) streamChanged(path string) {
	for _, id := range slices.Sorted(maps.Keys(m.subs)) {
		if s := m.subs[id]; s.matches(path) {
			m.link(s, path, false, -1)
		}
	}
	n := m.streams[path]
	if n == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(m.subs)) {
		s := m.subs[id]
		l := s.links[path]
		if l == nil {
			continue
		}
		l.tail = max(l.tail, n)
		if !s.inflight && s.holder == "" && s.due.IsZero() && s.pending() {
			s.due = m.now
		}
	}
}

// runDue is the scheduler at m.now: each due subscription's step.
func (m *dsModel) runDue() {
	for {
		var due []*dsmSub
		for _, s := range m.subs {
			if !s.due.IsZero() && !s.due.After(m.now) && s.retryLo.IsZero() {
				due = append(due, s)
			}
		}
		if len(due) == 0 {
			return
		}
		slices.SortFunc(due, func(a, b *dsmSub) int {
			if c := a.due.Compare(b.due); c != 0 {
				return c
			}
			return strings.Compare(a.id, b.id)
		})
		m.step(due[0])
	}
}

func (m *dsModel) step(s *dsmSub) {
	if s.inflight && !s.lease.IsZero() && !s.lease.After(m.now) {
		if s.pending() {
			m.expiredWith[s.id] = s.gen
		}
		m.endWake(s) // section 7.3: the holder and token are cleared
	}
	if !s.inflight {
		if !s.pending() {
			s.due = time.Time{}
			return
		}
		s.gen++
		s.inflight, s.wakeID, s.attempt = true, "", 0
	}
	s.attempt++
	s.lease, s.due = time.Time{}, time.Time{}
	if s.typ == webhooks.DSWebhook {
		s.lease = m.now.Add(m.reqTimeout + s.cfg.lease)
		s.due = m.now.Add(2 * m.reqTimeout)
		m.sends = append(m.sends, &dsmPost{sub: s.id, inc: s.inc, gen: s.gen, attempt: s.attempt, streams: s.pendingLinks(), sentAt: m.now})
		return
	}
	// A pull-wake wake appends its event at once.
	if _, ok := m.streams[dsmWakePath]; !ok {
		m.fail(s)
		return
	}
	ev := dsmEvent{sub: s.id, gen: s.gen, ts: m.now.UnixMilli()}
	if p := s.pendingLinks(); len(p) > 0 {
		ev.stream = p[0].path
	}
	m.events = append(m.events, ev)
	m.streams[dsmWakePath]++
	m.streamChanged(dsmWakePath)
	s.status = webhooks.DSActive
	if s.holder == "" {
		s.due = time.Time{}
	}
}

// fail records a failed attempt of s's wake: a retry within the jitter.
func (m *dsModel) fail(s *dsmSub) {
	s.status, s.lease = webhooks.DSFailed, time.Time{}
	b := dsmBackoff(s.attempt)
	s.retryLo, s.retryHi = m.now.Add(b*8/10), m.now.Add(b*12/10)
	s.due = s.retryLo
}

// current reports whether p is of s's wake in flight, attempt included.
func (m *dsModel) current(p *dsmPost) (*dsmSub, bool) {
	s := m.subs[p.sub]
	return s, s != nil && s.inc == p.inc && s.inflight && s.gen == p.gen && s.attempt == p.attempt
}

// answer applies the webhook's answer to p (the outcome of deliver).
func (m *dsModel) answer(p *dsmPost, o modelOutcome) {
	m.open = slices.DeleteFunc(m.open, func(q *dsmPost) bool { return q == p })
	s := m.subs[p.sub]
	if o == modelDone {
		// The auto-ack is fenced on the wake (not the attempt) and its lease.
		if s == nil || s.inc != p.inc || !s.inflight || s.gen != p.gen || (!s.lease.IsZero() && !s.lease.After(m.now)) {
			return
		}
		for _, sn := range p.streams {
			if l := s.links[sn.path]; l != nil { // a link removed meanwhile is no longer acked
				l.acked = max(l.acked, sn.tail)
				l.tail = max(l.tail, l.acked)
			}
		}
		m.endWake(s)
		return
	}
	s, ok := m.current(p)
	if !ok {
		return
	}
	if o == modelFail {
		m.fail(s)
		return
	}
	s.status = webhooks.DSActive
	s.lease = m.now.Add(s.cfg.lease)
	s.due = s.lease
}

// nextEvent is the model's next time after now: a due time, a retry's
// window start, or an open POST's request timeout.
func (m *dsModel) nextEvent() (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && t.After(m.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, s := range m.subs {
		consider(s.due)
	}
	for _, p := range m.open {
		consider(p.sentAt.Add(m.reqTimeout))
	}
	return next, !next.IsZero()
}

// timeouts fails every open POST whose request timeout has passed.
func (m *dsModel) timeouts() []*dsmPost {
	var out []*dsmPost
	for _, p := range slices.Clone(m.open) {
		if !p.sentAt.Add(m.reqTimeout).After(m.now) {
			out = append(out, p)
			m.answer(p, modelFail)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// The driver.

// dsmToken is a callback or claim token the driver was given.
type dsmToken struct {
	sub    string
	inc    int
	gen    int64
	wakeID string
	raw    string
}

type dsmRig struct {
	t     *testing.T
	rng   *rand.Rand
	h     *harness
	src   *appendingSource
	clock *modelClock
	recv  *modelReceiver
	m     *dsModel
	store webhooks.DSStore

	wallet  []dsmToken
	trace   []string
	context string

	// Observations, for the invariants.
	seenEvents int                          // wake events of the wake stream checked
	eventGens  map[string]map[int64]int     // D1: wake events per generation
	postWakes  map[string]map[int64]string  // D1: the wake id of a webhook generation
	wakeIDs    map[string]bool              // every wake id seen
	removed    map[string]map[string]bool   // D5: links removed and not linked again
	acked      map[string]map[string]string // D6: last acked offset seen per link
	draining   bool
	woken      map[string]bool // subscriptions woken during the drain
}

func modelDSRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e9955bd1e995))
	reqTimeout := webhooks.DefaultRequestTimeout
	if rng.IntN(2) == 0 {
		reqTimeout = 4 * time.Second
	}
	recv := newModelReceiver(t, seed) // before the harness: the engine stops first
	clk := &modelClock{Clock: newMockClock()}
	var src *appendingSource
	h := &harness{t: t, clock: clk.Clock, store: memstore.New(), source: newFakeSource(), recv: newReceiver(t), dsSignals: true}
	h.recv.srv.Close() // the harness's receiver; this test has its own
	h.wrap = func(f *fakeSource) webhooks.StreamSource {
		src = &appendingSource{fakeSource: f, events: map[string][][]byte{},
			notify: func(ctx context.Context, path string) error { return h.engine.StreamAppended(ctx, path) }}
		return src
	}
	h.startEngine(
		webhooks.WithClock(clk),
		webhooks.WithTimeouts(webhooks.DefaultWakingTimeout, webhooks.DefaultLivenessTimeout, reqTimeout),
		webhooks.WithTokenTTL(24*time.Hour), // token expiry is TestModel's
		webhooks.WithLogger(slog.New(slog.DiscardHandler)),
	)
	r := &dsmRig{
		t: t, rng: rng, h: h, src: src, clock: clk, recv: recv, store: h.store.(webhooks.DSStore),
		m: &dsModel{now: h.clock.Now(), reqTimeout: reqTimeout, streams: map[string]int{}, subs: map[string]*dsmSub{},
			gens: map[string]int64{}, incs: map[string]int{}, expiredWith: map[string]int64{}},
		eventGens: map[string]map[int64]int{}, postWakes: map[string]map[int64]string{}, wakeIDs: map[string]bool{},
		removed: map[string]map[string]bool{}, acked: map[string]map[string]string{},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("request timeout %v\nreplay: go test -race -run 'TestModelDS$' -model.seed=%d\nlast steps:\n%s",
				reqTimeout, seed, strings.Join(r.trace, "\n"))
		}
	})
	r.quiesce()
	if rng.IntN(3) > 0 {
		r.createStream(dsmWakePath, 0)
	}
	if rng.IntN(2) == 0 {
		r.createStream("e/1", rng.IntN(4)) // backfilled at its tail
	}
	r.putSub(dsmHook)
	r.putSub(dsmPull)
	for range 30 + rng.IntN(50) {
		r.step()
	}
	r.drain()
}

func (r *dsmRig) note(format string, args ...any) {
	line := fmt.Sprintf("%9s  ", r.m.now.Sub(testStart).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	r.trace = append(r.trace, line)
	if len(r.trace) > 80 {
		r.trace = r.trace[1:]
	}
}

func (r *dsmRig) count(what string) { modelDSCoverage.add(what) }

func (r *dsmRig) failf(check, format string, args ...any) {
	r.t.Helper()
	if r.context != "" && r.context != check {
		check += " [step: " + r.context + "]"
	}
	r.t.Fatalf("%s: %s", check, fmt.Sprintf(format, args...))
}

func (r *dsmRig) pick(n int) int { return r.rng.IntN(n) }

func (r *dsmRig) step() {
	actions := []func() bool{
		r.appendStep, r.createStreamStep, r.deleteStreamStep, r.putStep, r.deleteSubStep, r.addStreamsStep,
		r.removeStreamStep, r.replyStep, r.ackStep, r.releaseStep, r.claimStep, r.raceStep, r.advanceStep, r.getStep,
	}
	for !actions[modelPickWeighted(r.rng, 22, 5, 3, 4, 3, 5, 5, 18, 22, 6, 10, 4, 16, 3)]() {
	}
}

// ds sends a request to the reserved API.
func (r *dsmRig) ds(method, path string, body any, token string) dsReply {
	r.t.Helper()
	rep := r.h.ds(method, path, body, token)
	rep.raw = strings.TrimSpace(rep.raw)
	return rep
}

// ---------------------------------------------------------------------------
// Streams.

func (r *dsmRig) existing() []string {
	var out []string
	for _, p := range dsmPaths {
		if _, ok := r.m.streams[p]; ok {
			out = append(out, p)
		}
	}
	return out
}

func (r *dsmRig) appendStep() bool {
	paths := r.existing()
	if len(paths) == 0 {
		return false
	}
	p, n := paths[r.pick(len(paths))], 1+r.pick(4)
	r.note("append %d to %s", n, p)
	r.m.streams[p] += n
	r.m.streamChanged(p)
	r.h.source.grow("/"+p, n)
	require.NoError(r.t, r.h.engine.StreamAppended(context.Background(), "/"+p))
	r.settle("D7 pending work of an idle subscription wakes it")
	return true
}

func (r *dsmRig) createStreamStep() bool {
	var free []string
	for _, p := range dsmPaths {
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

func (r *dsmRig) createStream(p string, n int) {
	r.note("create %s with %d", p, n)
	r.m.streams[p] = n
	r.m.streamChanged(p)
	r.h.source.set("/"+p, n)
	require.NoError(r.t, r.h.engine.StreamCreated(context.Background(), "/"+p))
	r.settle("a stream found by its creation is linked before its events")
}

// deleteStreamStep deletes a stream, and sometimes creates it again: its
// links, glob and explicit, are dropped, and a stream created again is
// linked afresh by the patterns that match it.
func (r *dsmRig) deleteStreamStep() bool {
	paths := r.existing()
	if len(paths) == 0 {
		return false
	}
	p := paths[r.pick(len(paths))]
	r.note("delete stream %s", p)
	delete(r.m.streams, p)
	for _, id := range slices.Sorted(maps.Keys(r.m.subs)) {
		if _, ok := r.m.subs[id].links[p]; ok {
			delete(r.m.subs[id].links, p)
			delete(r.acked[id], p)
			r.count("a deleted stream's link dropped")
		}
	}
	r.h.source.remove("/" + p)
	require.NoError(r.t, r.h.engine.StreamDeleted(context.Background(), "/"+p))
	r.settle("a stream deleted is unlinked")
	if r.pick(2) == 0 {
		r.createStream(p, r.pick(4))
	}
	return true
}

// ---------------------------------------------------------------------------
// Subscriptions.

func (r *dsmRig) randomConfig(id string) dsmConfig {
	for {
		c := dsmConfig{pattern: dsmPatterns[id][r.pick(3)], lease: dsmLeases[r.pick(len(dsmLeases))]}
		for _, p := range dsmExplicit[id] {
			if r.pick(3) == 0 {
				c.streams = append(c.streams, p)
			}
		}
		if c.pattern != "" || len(c.streams) > 0 {
			return c
		}
	}
}

func (r *dsmRig) body(id string, c dsmConfig) map[string]any {
	b := map[string]any{"lease_ttl_ms": c.lease.Milliseconds()}
	if c.pattern != "" {
		b["pattern"] = c.pattern
	}
	if len(c.streams) > 0 {
		b["streams"] = c.streams
	}
	if id == dsmHook {
		b["type"], b["webhook"] = "webhook", map[string]string{"url": r.recv.url}
	} else {
		b["type"], b["wake_stream"] = "pull-wake", dsmWakePath
	}
	return b
}

func (r *dsmRig) putSub(id string) {
	r.putConfig(id, r.randomConfig(id))
}

// putConfig PUTs c as subscription id: a create if there is none, a
// re-confirmation if c is its configuration, else a 409 that changes
// nothing.
func (r *dsmRig) putConfig(id string, c dsmConfig) {
	s := r.m.subs[id]
	r.note("PUT %s pattern %q streams %v lease %v", id, c.pattern, c.streams, c.lease)
	want := http.StatusCreated
	switch {
	case s == nil:
		r.m.incs[id]++
		s = &dsmSub{id: id, typ: webhooks.DSWebhook, cfg: c, inc: r.m.incs[id], links: map[string]*dsmLink{},
			gen: r.m.gens[id], status: webhooks.DSActive}
		if id == dsmPull {
			s.typ = webhooks.DSPullWake
		}
		r.m.subs[id] = s
		r.acked[id] = map[string]string{}
		r.removed[id] = map[string]bool{}
		r.count("subscription created")
	case slices.Equal(s.cfg.streams, c.streams) && s.cfg.pattern == c.pattern && s.cfg.lease == c.lease:
		want = http.StatusOK
		r.count("subscription re-confirmed")
	default:
		want = http.StatusConflict
		r.count("subscription conflict")
	}
	if want != http.StatusConflict {
		// Explicit streams and the eager backfill, at their tails.
		for _, p := range c.streams {
			r.m.link(s, p, true, r.m.tailOf(p))
			delete(r.removed[id], p)
		}
		for _, p := range r.existing() {
			if s.matches(p) {
				r.m.link(s, p, false, r.m.streams[p])
				delete(r.removed[id], p)
			}
		}
	}
	before := r.snapshot()
	rep := r.ds(http.MethodPut, "subscriptions/"+id, r.body(id, c), "")
	if rep.status != want {
		r.failf("PUT creates, re-confirms or conflicts", "PUT %s answered %d, model expects %d: %s", id, rep.status, want, rep.raw)
	}
	if want == http.StatusConflict {
		r.unmoved("a conflicting PUT changes nothing", before)
	} else {
		r.checkListed(id, rep.body["streams"], "the PUT's answer")
	}
	r.settle("existing streams are linked at their tails")
}

func (r *dsmRig) putStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	s := r.m.subs[id]
	if s != nil && r.pick(2) == 0 {
		r.putConfig(id, s.cfg) // the same configuration
		return true
	}
	r.putSub(id)
	return true
}

func (r *dsmRig) deleteSubStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	s := r.m.subs[id]
	r.note("DELETE subscription %s", id)
	rep := r.ds(http.MethodDelete, "subscriptions/"+id, nil, "")
	if s == nil {
		if rep.status != http.StatusNotFound {
			r.failf("DELETE of a deleted subscription", "answered %d: %s", rep.status, rep.raw)
		}
		return true
	}
	if rep.status != http.StatusNoContent {
		r.failf("DELETE tombstones", "answered %d: %s", rep.status, rep.raw)
	}
	r.count("subscription deleted")
	r.m.gens[id] = s.gen
	delete(r.m.subs, id)
	delete(r.m.expiredWith, id)
	r.settle("a deleted subscription is tombstoned")
	return true
}

func (r *dsmRig) addStreamsStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	s := r.m.subs[id]
	if s == nil {
		return false
	}
	paths := []string{dsmExplicit[id][r.pick(2)]}
	if r.pick(3) == 0 {
		paths = append(paths, []string{"e/1", "e/2", "e/x/y", "m/1"}[r.pick(4)])
	}
	if id == dsmPull && r.pick(8) == 0 {
		paths = append(paths, dsmWakePath) // refused: its own wake stream
	}
	r.note("POST %s/streams %v", id, paths)
	before := r.snapshot()
	rep := r.ds(http.MethodPost, "subscriptions/"+id+"/streams", map[string]any{"streams": paths}, "")
	if slices.Contains(paths, dsmWakePath) {
		if rep.status != http.StatusBadRequest {
			r.failf("a subscription never links its own wake stream", "POST streams with it answered %d: %s", rep.status, rep.raw)
		}
		r.unmoved("a refused POST streams changes nothing", before)
		r.count("own wake stream refused")
		return true
	}
	if rep.status != http.StatusNoContent {
		r.failf("POST streams links", "answered %d: %s", rep.status, rep.raw)
	}
	r.count("explicit streams added")
	for _, p := range paths {
		r.m.link(s, p, true, r.m.tailOf(p))
		delete(r.removed[id], p)
	}
	r.settle("explicit streams are linked at their tails")
	return true
}

func (r *dsmRig) removeStreamStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	s := r.m.subs[id]
	if s == nil {
		return false
	}
	var explicit []string
	for _, p := range slices.Sorted(maps.Keys(s.links)) {
		if s.links[p].explicit {
			explicit = append(explicit, p)
		}
	}
	p := "m/1"
	if len(explicit) > 0 && r.pick(5) > 0 {
		p = explicit[r.pick(len(explicit))]
	}
	r.note("DELETE %s/streams/%s", id, p)
	rep := r.ds(http.MethodDelete, "subscriptions/"+id+"/streams/"+url.PathEscape(p), nil, "")
	if rep.status != http.StatusNoContent {
		r.failf("DELETE streams/:path unlinks", "answered %d: %s", rep.status, rep.raw)
	}
	if l := s.links[p]; l != nil {
		l.explicit = false
		if s.matches(p) {
			l.glob = true
		}
		if !l.glob {
			delete(s.links, p)
			delete(r.acked[id], p)
			r.removed[id][p] = true
			r.count("link removed")
		} else {
			r.count("explicit link removed, glob link kept")
		}
	}
	r.settle("D5 a removed link is never listed again")
	return true
}

func (r *dsmRig) getStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	s := r.m.subs[id]
	rep := r.ds(http.MethodGet, "subscriptions/"+id, nil, "")
	if s == nil {
		if rep.status != http.StatusNotFound {
			r.failf("a deleted subscription is gone", "GET %s answered %d: %s", id, rep.status, rep.raw)
		}
		return true
	}
	if rep.status != http.StatusOK {
		r.failf("GET reads", "GET %s answered %d: %s", id, rep.status, rep.raw)
	}
	r.checkListed(id, rep.body["streams"], "GET")
	if got := rep.body["status"]; got != string(s.status) {
		r.failf("status is failed while a retry is scheduled", "GET %s status %v, model %s", id, got, s.status)
	}
	return true
}

// checkListed compares the links a response lists with the model's.
func (r *dsmRig) checkListed(id string, listed any, where string) {
	r.t.Helper()
	s := r.m.subs[id]
	var got, want []string
	items, _ := listed.([]any)
	for _, it := range items {
		l, _ := it.(map[string]any)
		path, _ := l["path"].(string)
		if r.removed[id][path] {
			r.failf("D5 a removed link is never listed again", "%s of %s lists %s", where, id, path)
		}
		got = append(got, fmt.Sprintf("%s %v %v", path, l["link_type"], l["acked_offset"]))
	}
	for _, p := range slices.Sorted(maps.Keys(s.links)) {
		l := s.links[p]
		want = append(want, fmt.Sprintf("%s %s %s", p, l.linkType(), dsmOffset(l.acked)))
	}
	if !slices.Equal(got, want) {
		r.failf("links", "%s of %s lists %v; model %v", where, id, got, want)
	}
}

// ---------------------------------------------------------------------------
// Webhook answers, callbacks, acks, releases and claims.

func (r *dsmRig) replyStep() bool {
	if len(r.m.open) == 0 {
		return false
	}
	p := r.m.open[r.pick(len(r.m.open))]
	weights := make([]int, len(modelReplies))
	for i, rep := range modelReplies {
		weights[i] = rep.weight
	}
	rep := modelReplies[modelPickWeighted(r.rng, weights...)]
	r.reply(p, rep.name, rep.reply, rep.outcome)
	return true
}

func (r *dsmRig) reply(p *dsmPost, name string, rep modelReply, o modelOutcome) {
	_, current := r.m.current(p)
	r.note("answer POST %s g%d a%d: %s", p.sub, p.gen, p.attempt, name)
	r.count(fmt.Sprintf("POST answered %s (current: %v)", name, current))
	before := r.snapshot()
	r.m.answer(p, o)
	p.arrival.reply <- rep
	r.settle("webhook answer")
	if !current && o != modelDone {
		r.unmoved("an answer to an ended attempt changes nothing", before)
	}
}

// randomToken picks a token for id: mostly the newest, sometimes an
// older or another subscription's.
func (r *dsmRig) randomToken(id string) (dsmToken, bool) {
	var mine []dsmToken
	for _, tok := range r.wallet {
		if tok.sub == id {
			mine = append(mine, tok)
		}
	}
	switch {
	case len(r.wallet) > 0 && r.pick(12) == 0:
		return r.wallet[r.pick(len(r.wallet))], true
	case len(mine) == 0:
		return dsmToken{}, false
	case r.pick(4) == 0:
		return mine[r.pick(len(mine))], true
	}
	return mine[len(mine)-1], true
}

// dsmCall is a callback, ack or release as sent, and the model's verdict.
type dsmCall struct {
	id      string
	tok     dsmToken
	gen     int64
	wakeID  string
	acks    [][2]any // path, position
	done    bool
	release bool
}

// stale varies a call's generation or wake id away from its token's.
func (r *dsmRig) stale(c *dsmCall) {
	switch r.pick(10) {
	case 0:
		c.gen++
		r.count("request with a generation its token was not issued for")
	case 1:
		c.wakeID = "w_" + fmt.Sprint(r.pick(1000))
		r.count("request with a wake_id its token was not issued for")
	}
}

func (r *dsmRig) ackStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	tok, ok := r.randomToken(id)
	if !ok {
		return false
	}
	c := dsmCall{id: id, tok: tok, gen: tok.gen, wakeID: tok.wakeID, done: r.pick(3) > 0}
	r.stale(&c)
	if s := r.m.subs[id]; s != nil {
		paths := slices.Sorted(maps.Keys(s.links))
		for range r.pick(3) {
			if len(paths) == 0 {
				break
			}
			p := paths[r.pick(len(paths))]
			c.acks = append(c.acks, [2]any{p, -1 + r.pick(s.links[p].tail+2)})
		}
		if r.pick(15) == 0 {
			c.acks = append(c.acks, [2]any{"e/unlinked", 1})
		}
	}
	r.call(c)
	return true
}

func (r *dsmRig) releaseStep() bool {
	id := []string{dsmHook, dsmPull}[r.pick(2)]
	tok, ok := r.randomToken(id)
	if !ok {
		return false
	}
	c := dsmCall{id: id, tok: tok, gen: tok.gen, wakeID: tok.wakeID, release: true}
	r.stale(&c)
	r.call(c)
	return true
}

// verdict is the model's answer to c: the status and error code, and
// whether it applies.
func (r *dsmRig) verdict(c dsmCall) (int, string) {
	s := r.m.subs[c.id]
	switch {
	case c.tok.sub != c.id:
		return http.StatusUnauthorized, "TOKEN_INVALID"
	case c.gen != c.tok.gen || c.wakeID != c.tok.wakeID:
		return http.StatusConflict, "FENCED"
	case s == nil:
		return http.StatusNotFound, "SUBSCRIPTION_NOT_FOUND"
	case !s.inflight || s.gen != c.gen || s.wakeID != c.wakeID || (!s.lease.IsZero() && !s.lease.After(r.m.now)):
		return http.StatusConflict, "FENCED"
	}
	for _, a := range c.acks {
		if s.links[a[0].(string)] == nil {
			return http.StatusBadRequest, "INVALID_REQUEST"
		}
	}
	if c.release {
		return http.StatusNoContent, ""
	}
	return http.StatusOK, ""
}

func (r *dsmRig) call(c dsmCall) {
	op := "callback"
	if c.id == dsmPull {
		op = "ack"
	}
	if c.release {
		op = "release"
	}
	body := map[string]any{"wake_id": c.wakeID, "generation": c.gen}
	if !c.release {
		acks := []map[string]string{}
		for _, a := range c.acks {
			acks = append(acks, map[string]string{"stream": a[0].(string), "offset": dsmOffset(a[1].(int))})
		}
		body["acks"], body["done"] = acks, c.done
	}
	r.note("%s %s g%d %s acks %v done %v (token of %s#%d g%d)", op, c.id, c.gen, c.wakeID, c.acks, c.done, c.tok.sub, c.tok.inc, c.tok.gen)
	status, code := r.verdict(c)
	before := r.snapshot()
	rep := r.ds(http.MethodPost, "subscriptions/"+c.id+"/"+op, body, c.tok.raw)
	if rep.status != status || rep.errorCode() != code {
		check := "D2 a stale or tombstoned request is refused"
		if code == "" {
			check = "a current request is applied"
		}
		r.failf(check, "%s answered %d %s, model expects %d %s: %s", op, rep.status, rep.errorCode(), status, code, rep.raw)
	}
	r.count(fmt.Sprintf("%s answered %d %s", op, status, code))
	if code == "FENCED" && rep.raw != `{"error":{"code":"FENCED"}}` {
		r.failf("FENCED is exactly as section 7.1 writes it", "%s", rep.raw)
	}
	if code != "" {
		r.unmoved("D2 no cursor moves on a fenced or tombstoned request", before)
		r.settle("D2 no cursor moves on a fenced or tombstoned request")
		return
	}
	s := r.m.subs[c.id]
	for _, a := range c.acks {
		l := s.links[a[0].(string)]
		l.acked = max(l.acked, a[1].(int))
		l.tail = max(l.tail, l.acked)
	}
	switch {
	case c.release:
		r.count("released")
		r.m.endWake(s)
	case c.done:
		r.m.endWake(s)
		if want := fmt.Sprintf(`{"ok":true,"next_wake":%v}`, s.pending()); rep.raw != want {
			r.failf("ack answers next_wake", "%s answered %s, model %s", op, rep.raw, want)
		}
	default:
		r.count("heartbeat")
		s.lease = r.m.now.Add(s.cfg.lease)
		s.due = s.lease
		if rep.raw != `{"ok":true,"next_wake":false}` {
			r.failf("ack answers next_wake", "heartbeat answered %s", rep.raw)
		}
		got, err := r.store.GetDSSubscription(context.Background(), c.id)
		require.NoError(r.t, err)
		if !got.Cursor.LeaseExpiresAt.Equal(s.lease) {
			r.failf("D4 a heartbeat extends the lease", "lease ends at %v after a heartbeat at %v, want %v",
				got.Cursor.LeaseExpiresAt.Sub(testStart), r.m.now.Sub(testStart), s.lease.Sub(testStart))
		}
	}
	r.settle("acks apply and end the wake")
}

// dsmClaimReply is a claim's answer.
type dsmClaimReply struct {
	WakeID     string         `json:"wake_id"`
	Generation int64          `json:"generation"`
	Token      string         `json:"token"`
	Streams    []dsStreamWire `json:"streams"`
	LeaseTTLMS int64          `json:"lease_ttl_ms"`
}

type dsStreamWire struct {
	Path        string `json:"path"`
	LinkType    string `json:"link_type"`
	AckedOffset string `json:"acked_offset"`
	TailOffset  string `json:"tail_offset"`
	HasPending  bool   `json:"has_pending"`
}

// claimModel applies a claim of id by worker to the model, and returns the
// holder that refuses it, or "".
func (r *dsmRig) claimModel(s *dsmSub, worker string) string {
	live := !s.lease.IsZero() && s.lease.After(r.m.now)
	if s.holder != "" && s.holder != worker && live {
		return s.holder
	}
	lapsed := !s.lease.IsZero() && !live
	if !s.inflight || lapsed {
		s.gen++
		s.inflight, s.wakeID = true, ""
		r.count("claim starts a generation")
	}
	s.holder = worker
	s.lease = r.m.now.Add(s.cfg.lease)
	s.due = s.lease
	s.attempt, s.status = 0, webhooks.DSActive
	return ""
}

// checkClaimed checks a won claim against the model and keeps its token.
func (r *dsmRig) checkClaimed(s *dsmSub, rep dsReply, snap []dsmSnap) {
	r.t.Helper()
	var c dsmClaimReply
	require.NoError(r.t, json.Unmarshal([]byte(rep.raw), &c))
	if c.Generation != s.gen || c.LeaseTTLMS != s.cfg.lease.Milliseconds() || c.Token == "" {
		r.failf("claim", "claim answered %s; model generation %d lease %v", rep.raw, s.gen, s.cfg.lease)
	}
	r.learnWakeID(s, c.WakeID)
	r.checkStreams(s.id, c.Streams, snap, "the claim")
	r.wallet = append(r.wallet, dsmToken{sub: s.id, inc: s.inc, gen: c.Generation, wakeID: c.WakeID, raw: c.Token})
	if r.draining {
		r.woken[s.id] = true
	}
}

// checkStreams compares the streams a wake or claim shows with snap.
func (r *dsmRig) checkStreams(id string, got []dsStreamWire, snap []dsmSnap, where string) {
	r.t.Helper()
	var g, w []string
	for _, x := range got {
		if r.removed[id][x.Path] {
			r.failf("D5 a removed link is never listed again", "%s of %s lists %s", where, id, x.Path)
		}
		g = append(g, fmt.Sprintf("%s %s %s..%s %v", x.Path, x.LinkType, x.AckedOffset, x.TailOffset, x.HasPending))
	}
	for _, x := range snap {
		w = append(w, fmt.Sprintf("%s %s %s..%s true", x.path, x.typ, dsmOffset(x.acked), dsmOffset(x.tail)))
	}
	if !slices.Equal(g, w) {
		r.failf("a wake shows the pending links", "%s of %s shows %v; model %v", where, id, g, w)
	}
}

func (r *dsmRig) claimStep() bool {
	id := dsmPull
	if r.pick(10) == 0 {
		id = dsmHook
	}
	s := r.m.subs[id]
	worker := dsmWorkers[r.pick(len(dsmWorkers))]
	r.note("claim %s by %s", id, worker)
	before := r.snapshot()
	rep := r.ds(http.MethodPost, "subscriptions/"+id+"/claim", map[string]string{"worker": worker}, "")
	switch {
	case s == nil:
		if rep.status != http.StatusNotFound {
			r.failf("a deleted subscription is gone", "claim answered %d: %s", rep.status, rep.raw)
		}
		return true
	case id == dsmHook:
		if rep.status != http.StatusBadRequest {
			r.failf("only pull-wake subscriptions are claimed", "claim of the webhook subscription answered %d: %s", rep.status, rep.raw)
		}
		r.unmoved("a refused claim changes nothing", before)
		return true
	}
	snap := s.pendingLinks()
	if holder := r.claimModel(s, worker); holder != "" {
		r.checkRefusedClaim(s, rep, holder, before)
		return true
	}
	if rep.status != http.StatusOK {
		r.failf("claim", "claim by %s answered %d; model expects it won: %s", worker, rep.status, rep.raw)
	}
	r.count("claim won")
	r.checkClaimed(s, rep, snap)
	r.settle("a claim takes the lease")
	return true
}

func (r *dsmRig) checkRefusedClaim(s *dsmSub, rep dsReply, holder string, before string) {
	r.t.Helper()
	want := fmt.Sprintf(`{"error":{"code":"ALREADY_CLAIMED","current_holder":%q,"generation":%d}}`, holder, s.gen)
	if rep.status != http.StatusConflict || rep.raw != want {
		r.failf("ALREADY_CLAIMED names the holder", "claim answered %d %s, model %s", rep.status, rep.raw, want)
	}
	r.count("claim refused: ALREADY_CLAIMED")
	r.unmoved("a refused claim changes nothing", before)
}

// raceStep has two workers claim at once: one wins, the other is told who.
func (r *dsmRig) raceStep() bool {
	s := r.m.subs[dsmPull]
	if s == nil {
		return false
	}
	i := r.pick(len(dsmWorkers))
	workers := []string{dsmWorkers[i], dsmWorkers[(i+1)%len(dsmWorkers)]}
	r.note("race to claim %s: %v", dsmPull, workers)
	var wg sync.WaitGroup
	reps := make([]dsReply, 2)
	for k, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[k] = r.ds(http.MethodPost, "subscriptions/"+dsmPull+"/claim", map[string]string{"worker": w}, "")
		}()
	}
	wg.Wait()
	snap := s.pendingLinks()
	won := slices.IndexFunc(reps, func(rep dsReply) bool { return rep.status == http.StatusOK })
	if won < 0 {
		// Both refused: a third worker's lease is live.
		holder := r.claimModel(s, workers[0])
		if holder == "" {
			r.failf("racing workers: one wins", "both claims refused: %s / %s", reps[0].raw, reps[1].raw)
		}
		for _, rep := range reps {
			r.checkRefusedClaim(s, rep, holder, r.snapshot())
		}
		return true
	}
	if h := r.claimModel(s, workers[won]); h != "" {
		r.failf("racing workers: one wins", "%s won, but %s holds a live lease: %s", workers[won], h, reps[won].raw)
	}
	r.count("claim race won")
	r.checkClaimed(s, reps[won], snap)
	if holder := r.claimModel(s, workers[1-won]); holder != workers[won] {
		r.failf("racing workers: one wins", "the model lets %s claim too", workers[1-won])
	}
	r.checkRefusedClaim(s, reps[1-won], workers[won], r.snapshot())
	r.settle("racing workers: one wins, the other is told who")
	return true
}

// ---------------------------------------------------------------------------
// Time.

func (r *dsmRig) advanceStep() bool {
	var d time.Duration
	next, ok := r.m.nextEvent()
	switch x := r.pick(100); {
	case x < 30:
		d = time.Duration(1+r.pick(2000)) * time.Millisecond
	case x < 50:
		d = time.Duration(3+r.pick(10)) * time.Second
	case x < 60:
		d = time.Duration(30+r.pick(60)) * time.Second
	case x < 85:
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

// advance moves the clock by d, stopping at every time the engine or the
// model may act, so that each acts at exactly that time.
func (r *dsmRig) advance(d time.Duration) {
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
		r.m.now = next
		for _, p := range r.m.timeouts() {
			r.note("  POST %s g%d a%d timed out", p.sub, p.gen, p.attempt)
			r.count("POST timed out")
		}
		r.settle("timers: leases, retries, request timeouts")
	}
}

// ---------------------------------------------------------------------------
// Settling, observing and comparing.

// settle waits until the engine has done what the last step caused, then
// compares it with the model and checks the invariants.
func (r *dsmRig) settle(property string) {
	r.t.Helper()
	r.context = property
	r.m.runDue()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for len(r.m.sends) > 0 {
		select {
		case a := <-r.recv.arrivals:
			r.arrive(a)
			continue
		default:
		}
		if ctx.Err() != nil {
			r.compare()
			r.failf("D7 pending work is woken", "expected webhook POST of %s generation %d attempt %d was never sent",
				r.m.sends[0].sub, r.m.sends[0].gen, r.m.sends[0].attempt)
		}
		r.pause(ctx)
	}
	for {
		r.observeEvents()
		quiet, why := r.quiet()
		if quiet && len(r.m.events) == 0 && r.diff() == "" {
			break
		}
		if !quiet && ctx.Err() != nil {
			r.failf(property, "the engine did not settle: %s", why)
		}
		if quiet {
			// Idle: it does no more until the clock moves or a step acts.
			r.observeEvents()
			if len(r.m.events) > 0 {
				r.failf("D7 pending work is woken", "expected wake event of %s generation %d was never appended", r.m.events[0].sub, r.m.events[0].gen)
			}
			r.compare()
			break
		}
		r.pause(ctx)
	}
	select {
	case a := <-r.recv.arrivals:
		r.arrive(a)
	default:
	}
	r.compare()
}

func (r *dsmRig) pause(ctx context.Context) {
	select {
	case <-r.h.signals():
	case a := <-r.recv.arrivals:
		r.arrive(a)
	case <-ctx.Done():
	}
}

// quiesce waits until the engine is idle before the clock moves.
func (r *dsmRig) quiesce() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		quiet, why := r.quiet()
		if quiet {
			return
		}
		if ctx.Err() != nil {
			r.failf(r.context, "the engine did not settle: %s", why)
		}
		r.pause(ctx)
	}
}

// quiet reports whether both schedulers are parked and exactly the POSTs
// the model holds open are being sent.
func (r *dsmRig) quiet() (bool, string) {
	e := r.h.engine
	if !webhooks.SchedulerParked(e) || !webhooks.DSSchedulerParked(e) {
		return false, "a scheduler is busy"
	}
	if n := webhooks.DSSendsRunning(e); n != int64(len(r.m.open)+len(r.m.sends)) {
		return false, fmt.Sprintf("%d wakes are being sent, the model holds %d POSTs open", n, len(r.m.open)+len(r.m.sends))
	}
	return true, ""
}

// arrive checks a webhook POST against the model.
func (r *dsmRig) arrive(a *modelArrival) {
	var w dsWakeWire
	if err := json.Unmarshal(a.body, &w); err != nil {
		r.failf("wake payload", "POST body %q: %v", a.body, err)
	}
	i := slices.IndexFunc(r.m.sends, func(p *dsmPost) bool { return p.sub == w.SubscriptionID })
	if i < 0 {
		r.failf("D7 no wake without pending work", "the engine sent a POST the model does not expect: %s", a.body)
	}
	p := r.m.sends[i]
	r.m.sends = slices.Delete(r.m.sends, i, i+1)
	p.arrival = a
	r.m.open = append(r.m.open, p)
	r.note("  POST %s g%d a%d %s", p.sub, w.Generation, p.attempt, w.WakeID)
	r.count(map[bool]string{true: "POST first attempt", false: "POST retry"}[p.attempt == 1])
	if !dsmSignatureRe.MatchString(a.sig) {
		r.failf("webhooks are signed with Ed25519", "Webhook-Signature %q", a.sig)
	}
	if w.Generation != p.gen || w.CallbackToken == "" || w.CallbackURL != callbackBase+"/__ds/subscriptions/"+p.sub+"/callback" {
		r.failf("wake payload", "POST %s; model generation %d", a.body, p.gen)
	}
	if s, ok := r.m.current(p); ok {
		r.learnWakeID(s, w.WakeID)
	}
	if prev, ok := r.postWakes[p.sub][w.Generation]; ok && prev != w.WakeID {
		r.failf("D1 one wake per generation", "generation %d of %s was sent as wake %s and %s", w.Generation, p.sub, prev, w.WakeID)
	}
	if r.postWakes[p.sub] == nil {
		r.postWakes[p.sub] = map[int64]string{}
	}
	r.postWakes[p.sub][w.Generation] = w.WakeID
	p.wakeID = w.WakeID
	r.checkStreams(p.sub, w.Streams, p.streams, "the POST")
	r.wallet = append(r.wallet, dsmToken{sub: p.sub, inc: p.inc, gen: w.Generation, wakeID: w.WakeID, raw: w.CallbackToken})
	if r.draining {
		r.woken[p.sub] = true
	}
}

// dsWakeWire is a webhook wake as sent.
type dsWakeWire struct {
	SubscriptionID string         `json:"subscription_id"`
	WakeID         string         `json:"wake_id"`
	Generation     int64          `json:"generation"`
	Streams        []dsStreamWire `json:"streams"`
	CallbackURL    string         `json:"callback_url"`
	CallbackToken  string         `json:"callback_token"`
}

// learnWakeID learns the wake id of s's new wake, which must be new.
func (r *dsmRig) learnWakeID(s *dsmSub, id string) {
	r.t.Helper()
	if s.wakeID != "" {
		if id != s.wakeID {
			r.failf("D1 one wake per generation", "%s generation %d has wake ids %s and %s", s.id, s.gen, s.wakeID, id)
		}
		return
	}
	if id == "" || r.wakeIDs[id] {
		r.failf("wake ids are unique", "%s generation %d has wake id %q, empty or used before", s.id, s.gen, id)
	}
	r.wakeIDs[id] = true
	s.wakeID = id
}

// observeEvents checks the wake events appended since the last look.
func (r *dsmRig) observeEvents() {
	events := r.src.wakeEvents("/" + dsmWakePath)
	for ; r.seenEvents < len(events); r.seenEvents++ {
		ev := events[r.seenEvents]
		id, _ := ev["subscription_id"].(string)
		gen := int64(ev["generation"].(float64))
		if r.eventGens[id] == nil {
			r.eventGens[id] = map[int64]int{}
		}
		r.eventGens[id][gen]++
		if n := r.eventGens[id][gen]; n > 1 {
			r.failf("D1 one wake per generation", "generation %d of %s got %d wake events", gen, id, n)
		}
		if len(r.m.events) == 0 {
			r.failf("D7 no wake without pending work", "unexpected wake event %v", ev)
		}
		want := r.m.events[0]
		r.m.events = r.m.events[1:]
		stream, _ := ev["stream"].(string)
		if ev["type"] != "wake" || id != want.sub || gen != want.gen || stream != want.stream || int64(ev["ts"].(float64)) != want.ts {
			r.failf("wake event", "wake event %v; model %+v", ev, want)
		}
		r.note("  wake event %s g%d %s", id, gen, stream)
		r.count("wake event")
		if r.draining {
			r.woken[id] = true
		}
	}
}

// dsmState is a subscription's cursor and links as the Store has them,
// as one comparable string.
func (r *dsmRig) stored(id string) (string, *webhooks.DSSubscription, []webhooks.DSLink) {
	sub, err := r.store.GetDSSubscription(context.Background(), id)
	if errors.Is(err, webhooks.ErrDSSubscriptionNotFound) {
		return "absent", nil, nil
	}
	require.NoError(r.t, err)
	links, err := r.store.ListDSLinks(context.Background(), &webhooks.ListDSLinksParams{ID: id, Limit: 100})
	require.NoError(r.t, err)
	return r.cursorString(sub.Cursor, links), sub, links
}

func (r *dsmRig) cursorString(c webhooks.DSCursor, links []webhooks.DSLink) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(testStart).String()
	}
	var ls []string
	for _, l := range links {
		ls = append(ls, fmt.Sprintf("%s:%s:%s..%s:%v", l.Path, l.Type, l.AckedOffset, l.TailOffset, l.Pending))
	}
	return fmt.Sprintf("gen %d wake %q holder %q lease %s due %s attempt %d status %s pending %v links [%s]",
		c.Generation, c.WakeID, c.Holder, at(c.LeaseExpiresAt), at(c.DueAt), c.Attempt, c.Status, c.Pending, strings.Join(ls, " "))
}

// modelString is s as cursorString shows a stored one.
func (r *dsmRig) modelString(s *dsmSub) string {
	if s == nil {
		return "absent"
	}
	c := webhooks.DSCursor{Generation: s.gen, WakeID: s.wakeID, Holder: s.holder, LeaseExpiresAt: s.lease, DueAt: s.due,
		Attempt: s.attempt, Status: s.status, Pending: s.pending()}
	var links []webhooks.DSLink
	for _, p := range slices.Sorted(maps.Keys(s.links)) {
		l := s.links[p]
		t := webhooks.DSLinkType(0)
		if l.glob {
			t |= webhooks.DSLinkGlob
		}
		if l.explicit {
			t |= webhooks.DSLinkExplicit
		}
		links = append(links, webhooks.DSLink{Path: p, Type: t, AckedOffset: dsmOffset(l.acked), TailOffset: dsmOffset(l.tail), Pending: l.tail > l.acked})
	}
	return r.cursorString(c, links)
}

// learn takes what the model cannot know from the Store: a new wake's id,
// and a retry's due time, within its window.
func (r *dsmRig) learn(s *dsmSub, got *webhooks.DSSubscription) {
	if got == nil {
		return
	}
	if s.inflight && s.wakeID == "" && got.Cursor.WakeID != "" && got.Cursor.Generation == s.gen {
		r.learnWakeID(s, got.Cursor.WakeID)
	}
	if !s.retryLo.IsZero() {
		due := got.Cursor.DueAt
		if due.Before(s.retryLo) || due.After(s.retryHi) {
			r.failf("retries back off from 1 s to 60 s with 20 % jitter", "%s attempt %d failed at %v: retry at %v, window %v..%v",
				s.id, s.attempt, r.m.now.Sub(testStart), due.Sub(testStart), s.retryLo.Sub(testStart), s.retryHi.Sub(testStart))
		}
		s.due, s.retryLo, s.retryHi = due, time.Time{}, time.Time{}
		r.count(fmt.Sprintf("retry scheduled after attempt %d", min(s.attempt, 5)))
	}
}

// diff compares the Store with the model, learning what it may first.
func (r *dsmRig) diff() string {
	var out []string
	for _, id := range []string{dsmHook, dsmPull} {
		got, sub, _ := r.stored(id)
		s := r.m.subs[id]
		if s != nil && sub != nil {
			// A retry is recorded with the attempt's lease cleared and a due time.
			if !s.retryLo.IsZero() && (sub.Cursor.Status != webhooks.DSFailed || !sub.Cursor.LeaseExpiresAt.IsZero() || sub.Cursor.DueAt.IsZero()) {
				out = append(out, id+": retry not scheduled yet")
				continue
			}
			r.learn(s, sub)
		}
		if want := r.modelString(s); got != want {
			out = append(out, fmt.Sprintf("%s:\n  store %s\n  model %s", id, got, want))
		}
	}
	return strings.Join(out, "\n")
}

// compare fails on a difference from the model, and checks the
// invariants on what the Store holds.
func (r *dsmRig) compare() {
	r.t.Helper()
	for _, id := range []string{dsmHook, dsmPull} {
		_, sub, links := r.stored(id)
		if sub == nil {
			continue
		}
		for _, l := range links {
			if r.removed[id][l.Path] {
				r.failf("D5 a removed link is never listed again", "%s links %s again", id, l.Path)
			}
			if prev, ok := r.acked[id][l.Path]; ok && l.AckedOffset < prev {
				r.failf("D6 acked offsets never go backwards", "%s %s acked %s after %s", id, l.Path, l.AckedOffset, prev)
			}
			r.acked[id][l.Path] = l.AckedOffset
		}
		if g, ok := r.m.expiredWith[id]; ok {
			if sub.Cursor.Generation <= g && sub.Cursor.Pending {
				r.failf("D3 an expired lease with pending work wakes again", "%s generation %d expired with work pending, and is still at generation %d\n%s",
					id, g, sub.Cursor.Generation, r.diff())
			}
			r.count("lease expired with pending work: woken again")
			delete(r.m.expiredWith, id)
		}
	}
	if d := r.diff(); d != "" {
		r.failf(r.context, "the Store differs from the model:\n%s", d)
	}
}

// snapshot is the Store's state, to compare after a request that must
// change nothing.
func (r *dsmRig) snapshot() string {
	a, _, _ := r.stored(dsmHook)
	b, _, _ := r.stored(dsmPull)
	return a + "\n" + b
}

// unmoved fails check if the Store changed since before.
func (r *dsmRig) unmoved(check, before string) {
	r.t.Helper()
	if now := r.snapshot(); now != before {
		r.failf(check, "the Store changed:\nbefore %s\nafter  %s", before, now)
	}
}

// ---------------------------------------------------------------------------
// The drain: liveness.

// drain ends a sequence: no more appends; every POST answered done, every
// pull-wake wake claimed once its event is out and acked whole, the clock
// advanced as needed. Every subscription with pending work must be woken
// (D7) and all must end idle with nothing pending.
func (r *dsmRig) drain() {
	r.note("drain")
	r.context = "D7 pending work is woken"
	if _, ok := r.m.streams[dsmWakePath]; !ok {
		r.createStream(dsmWakePath, 0)
	}
	r.draining, r.woken = true, map[string]bool{}
	waiting := map[string]bool{}
	for id, s := range r.m.subs {
		if s.pending() && !s.inflight {
			waiting[id] = true
		}
	}
	for round := 0; ; round++ {
		if round > 500 {
			r.failf("D7 pending work is woken", "the drain did not end")
		}
		if len(r.m.open) > 0 {
			r.reply(r.m.open[0], "drain: 200 {done:true}", modelReply{status: 200, body: `{"done":true}`}, modelDone)
			continue
		}
		if s := r.m.subs[dsmPull]; s != nil && s.inflight && s.holder == "" && r.eventGens[dsmPull][s.gen] > 0 {
			r.drainPull(s)
			continue
		}
		busy := false
		for _, s := range r.m.subs {
			busy = busy || s.inflight || s.pending()
		}
		if !busy {
			break
		}
		next, ok := r.m.nextEvent()
		if !ok {
			r.failf("D7 pending work is woken", "work is pending but nothing is scheduled:\n%s\n%s",
				r.modelString(r.m.subs[dsmHook]), r.modelString(r.m.subs[dsmPull]))
		}
		r.advance(next.Sub(r.m.now))
	}
	for id := range waiting {
		if r.m.subs[id] != nil && !r.woken[id] {
			r.failf("D7 pending work is woken", "%s had pending work and was never woken", id)
		}
	}
}

// drainPull claims the pull-wake wake whose event is out and acks every
// pending link.
func (r *dsmRig) drainPull(s *dsmSub) {
	snap := s.pendingLinks()
	rep := r.ds(http.MethodPost, "subscriptions/"+dsmPull+"/claim", map[string]string{"worker": "drainer"}, "")
	if h := r.claimModel(s, "drainer"); h != "" || rep.status != http.StatusOK {
		r.failf("claim", "the drain's claim answered %d %s", rep.status, rep.raw)
	}
	r.checkClaimed(s, rep, snap)
	tok := r.wallet[len(r.wallet)-1]
	c := dsmCall{id: dsmPull, tok: tok, gen: tok.gen, wakeID: tok.wakeID, done: true}
	for _, sn := range snap {
		c.acks = append(c.acks, [2]any{sn.path, sn.tail})
	}
	r.call(c)
}
