package webhooks

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// Lanes dispatch delivery attempts fairly, per destination. Each webhook
// host has a lane with its own concurrency limit, so hanging, resetting or
// slow endpoints hold at most what their own lanes allow, and a destination
// whose last POST succeeded can always start one when it has none in
// flight: bad destinations cannot take what a healthy one needs. There is
// no goroutine per lane or per consumer; a goroutine exists only per POST
// in flight.

const (
	// laneStartLimit is how many POSTs a lane new to the engine, or back
	// from failures, may have in flight before successes raise its limit.
	laneStartLimit = 8
	// laneIdleTTL is how long a lane with nothing waiting or in flight is
	// remembered: long enough to keep a failing destination's probe limit
	// over its consumers' retry backoff, and a healthy one's standing
	// between wakes.
	laneIdleTTL = 5 * time.Minute
)

// laneOutcome is what a POST's outcome says about its destination.
type laneOutcome int

const (
	laneAnswered laneOutcome = iota // an answer that proves neither health nor failure (non-2xx), or no POST
	laneSuccess                     // 2xx
	laneFailure                     // timeout or connection-level failure
)

// laneOutcomeOf classifies a delivery outcome; "" is an attempt that made
// no POST.
func laneOutcomeOf(outcome string) laneOutcome {
	switch outcome {
	case outcomeOK, outcomeDone:
		return laneSuccess
	case outcomeTimeout, outcomeError:
		return laneFailure
	default:
		return laneAnswered
	}
}

// laneKey is the lane of a webhook URL: its lowercased host and port.
func laneKey(webhook string) string {
	u, err := url.Parse(webhook)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// attempt is a delivery attempt, marked as sent in the Store, waiting in
// or started from its lane. The lanes know it by its key and deadline
// only: what it delivers, and how, is run's.
type attempt struct {
	ctx context.Context
	// key names what the attempt delivers for: a consumer's ID, or a
	// `__ds` subscription's DSDeliveryLogKey. A lane keeps one
	// waiting attempt per key.
	key string
	// deadline is when a waiting attempt is no longer worth starting;
	// zero for never.
	deadline time.Time
	// run makes the attempt, in ctx, and calls answered with the
	// transport's outcome as soon as it has one, and not at all if
	// nothing was sent; ended is called once it has ended.
	run   func(ctx context.Context, answered func(outcome string))
	ended func()
	lane  *lane
	seq   uint64 // its lane's count of POSTs started, this one included
}

// lane is one destination's FIFO of waiting attempts, at most one per
// attempt key, and its adaptive concurrency limit.
type lane struct {
	key      string
	limit    int
	inFlight int
	// started counts the POSTs the lane started; cutAt is started when
	// the limit was last cut. Failures of POSTs started before the cut
	// were already answered by it.
	started, cutAt uint64
	// healthy is set while the last success has had no failure after it;
	// such a lane may start one POST past the global cap.
	healthy   bool
	waiting   []*attempt
	byKey     map[string]*attempt
	ready     bool // in lanes.ready
	idleSince time.Time
}

func (l *lane) idle() bool { return l.inFlight == 0 && len(l.waiting) == 0 }

// lanes dispatches attempts to start, calling start for each outside its
// lock. A lane's limit starts at laneStartLimit, grows by one per success
// up to maxPerHost, and halves, down to 1, on a failure of a POST started
// since it was last cut: a burst of POSTs failing together cuts it once,
// so a slow destination that times out some attempts and answers the rest
// keeps working capacity, while one that only fails soon probes with one
// POST at a time. The limits bind
// once spare POSTs are in flight: below that every lane may have up to
// maxPerHost, so that a slow but working destination with many consumers
// is not throttled while nobody needs the capacity. POSTs in flight stay
// within maxTotal, except that a healthy lane with none in flight may start
// one past it, up to twice maxTotal in all: a destination whose last POST
// succeeded never waits behind bad ones. A destination never yet answered
// competes for maxTotal, since nothing yet tells it from a bad one. Lanes
// waiting for the global cap are served round-robin.
type lanes struct {
	clock      clock.Clock
	maxTotal   int
	maxPerHost int
	spare      int // half of maxTotal
	start      func(*attempt)

	mu       sync.Mutex
	byKey    map[string]*lane
	ready    []*lane // lanes with waiting attempts held back by maxTotal
	inFlight int
	swept    time.Time
}

func newLanes(clk clock.Clock, maxTotal, maxPerHost int, start func(*attempt)) *lanes {
	return &lanes{
		clock:      clk,
		maxTotal:   maxTotal,
		maxPerHost: maxPerHost,
		spare:      maxTotal / 2,
		start:      start,
		byKey:      make(map[string]*lane),
		swept:      clk.Now(),
	}
}

// enqueue queues attempt a, just marked as sent, in lane key, replacing
// an attempt of a's key still waiting there, and starts what may start.
func (ls *lanes) enqueue(key string, a *attempt) {
	ls.mu.Lock()
	now := ls.clock.Now()
	if now.Sub(ls.swept) >= laneIdleTTL {
		ls.forgetIdle(now)
	}
	l := ls.byKey[key]
	if l == nil {
		l = &lane{key: key, limit: min(laneStartLimit, ls.maxPerHost), byKey: make(map[string]*attempt)}
		ls.byKey[key] = l
	}
	if w := l.byKey[a.key]; w != nil {
		w.ctx, w.deadline, w.run, w.ended = a.ctx, a.deadline, a.run, a.ended
	} else {
		a.lane = l
		l.waiting = append(l.waiting, a)
		l.byKey[a.key] = a
	}
	started := ls.fill(l, now, nil)
	ls.mu.Unlock()
	for _, a := range started {
		ls.start(a)
	}
}

// finish records the outcome of a started attempt, and starts what its
// lane and the freed capacity now allow.
func (ls *lanes) finish(a *attempt, outcome laneOutcome) {
	ls.mu.Lock()
	now := ls.clock.Now()
	l := a.lane
	l.inFlight--
	ls.inFlight--
	switch outcome {
	case laneSuccess:
		l.healthy = true
		l.limit = min(l.limit+1, ls.maxPerHost)
	case laneFailure:
		l.healthy = false
		if a.seq > l.cutAt {
			l.limit = max(1, l.limit/2)
			l.cutAt = l.started
		}
	}
	// Freed global capacity goes to the waiting lanes in turn, this one
	// among them; past the cap, only this lane's floor can start one.
	var started []*attempt
	if ls.inFlight >= ls.maxTotal {
		started = ls.fill(l, now, started)
	} else {
		ls.queue(l)
	}
	started = ls.serveReady(now, started)
	if l.idle() {
		l.idleSince = now
	}
	ls.mu.Unlock()
	for _, a := range started {
		ls.start(a)
	}
}

// canStart reports whether lane l may start one more POST.
func (ls *lanes) canStart(l *lane) bool {
	if l.inFlight >= ls.maxPerHost {
		return false
	}
	if ls.inFlight < ls.spare {
		return true
	}
	if l.inFlight >= l.limit {
		return false
	}
	return ls.inFlight < ls.maxTotal || (l.healthy && l.inFlight == 0 && ls.inFlight < 2*ls.maxTotal)
}

// fill starts what lane l may start, and puts it in the ready ring if the
// global cap holds back what its own limit would let start. Outside finish
// the ring is empty whenever the cap is not reached, so l takes no turn
// from another lane.
func (ls *lanes) fill(l *lane, now time.Time, started []*attempt) []*attempt {
	for ls.canStart(l) {
		a := ls.next(l, now)
		if a == nil {
			break
		}
		started = append(started, a)
	}
	ls.queue(l)
	if l.idle() {
		l.idleSince = now
	}
	return started
}

// queue puts lane l at the back of the ready ring if it has attempts
// waiting that its own limit would let start.
func (ls *lanes) queue(l *lane) {
	own := l.inFlight < ls.maxPerHost && (ls.inFlight < ls.spare || l.inFlight < l.limit)
	if len(l.waiting) > 0 && own && !l.ready {
		l.ready = true
		ls.ready = append(ls.ready, l)
	}
}

// serveReady hands free global capacity to the lanes in the ready ring,
// one attempt per lane in turn.
func (ls *lanes) serveReady(now time.Time, started []*attempt) []*attempt {
	for len(ls.ready) > 0 && ls.inFlight < ls.maxTotal {
		l := ls.ready[0]
		ls.ready = ls.ready[1:]
		l.ready = false
		if ls.canStart(l) {
			if a := ls.next(l, now); a != nil {
				started = append(started, a)
			}
		}
		// A lane held back by its own limit leaves the ring until one of
		// its POSTs finishes.
		ls.queue(l)
		if l.idle() {
			l.idleSince = now
		}
	}
	if len(ls.ready) == 0 {
		ls.ready = nil
	}
	return started
}

// next takes lane l's first waiting attempt that is still worth sending
// and counts it in flight. An attempt whose WAKING timeout has passed is
// dropped: the scheduler has failed it, or will, and retries it on the
// backoff schedule, so a hanging destination's backlog does not pile up.
func (ls *lanes) next(l *lane, now time.Time) *attempt {
	for len(l.waiting) > 0 {
		a := l.waiting[0]
		l.waiting[0] = nil
		l.waiting = l.waiting[1:]
		delete(l.byKey, a.key)
		if (!a.deadline.IsZero() && !now.Before(a.deadline)) || a.ctx.Err() != nil {
			continue
		}
		l.inFlight++
		ls.inFlight++
		l.started++
		a.seq = l.started
		return a
	}
	l.waiting = nil
	return nil
}

// forgetIdle drops the lanes idle for laneIdleTTL. It runs at most once a
// TTL, so its cost per attempt stays constant.
func (ls *lanes) forgetIdle(now time.Time) {
	for key, l := range ls.byKey {
		if l.idle() && now.Sub(l.idleSince) >= laneIdleTTL {
			delete(ls.byKey, key)
		}
	}
	ls.swept = now
}

// pending counts the attempts in flight and waiting.
func (ls *lanes) pending() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := ls.inFlight
	for _, l := range ls.byKey {
		n += len(l.waiting)
	}
	return n
}
