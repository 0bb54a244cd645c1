package webhooks

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// The stream sweep finds appends whose StreamAppended or StreamCreated
// never ran: the host that committed them crashed first, or the call
// failed and its engine died before retrying it. Nothing else would wake
// the consumers of such a stream, IDLE with no deadline, until its next
// append or an engine's restart.
//
// Every sweep interval (WithSweepInterval) each engine lists the streams
// its subscriptions match, as Start's recovery does, and keeps the sums
// of the hashes of their paths and tails, their marks (sweep_marks.go).
// A stream whose mark the previous sweep did not count (its tail moved,
// or it is new) gets what the missed call would have done: its IDLE consumers with pending work are woken, and consumers it
// lacks are spawned. The first tails come from Start's recovery, which
// makes up for everything committed before them. So an append committed
// while an engine runs is found by that engine's next sweep at the latest,
// and each running engine sweeps: an append is stranded only if every
// engine dies.
//
// A subscription created since Start is swept once its creator has
// adopted the streams that existed (Subscription.adopted; before, a
// spawn here would race the adoption and replay them from their start).
// The first sweep that sees the mark looks at every stream it matches,
// however still its tail: one created meanwhile through an engine that
// did not know the subscription yet has no consumer of it, and gets one
// before its first event. So such a stream waits one sweep interval, not
// for its next append. A new subscription costs each engine one
// GetSubscription a sweep until it is adopted, then one ConsumersByStream
// per stream it matches.
//
// An idle sweep costs one StreamSource.MatchStreams per distinct pattern,
// a bounded memory (the marks, sweep_marks.go: sums by pattern and by
// bucket of streams, not a mark per stream), and no Store access: only
// streams that moved, and the few that share a bucket with them, are
// looked up. Streams appended to through the engine are looked at once
// more, at the sweep after their append.

// sweepPolls is the default sweep interval, in poll intervals.
const sweepPolls = 60

// sweepWidth is how many streams Start's recovery and a sweep look at at
// once. Their Store reads overlap, and a Store that merges concurrent
// reads (pgstore reads many streams' consumers in one query) serves the
// recovery of a million streams in thousands of round trips, not a
// million one after another.
const sweepWidth = 64

// sweepGroup runs a sweep's streams, at most sweepWidth at once.
type sweepGroup struct {
	wg    sync.WaitGroup
	slots chan struct{}
}

func newSweepGroup() *sweepGroup { return &sweepGroup{slots: make(chan struct{}, sweepWidth)} }

// run runs fn once a slot is free, and reports false, without running it,
// if ctx ends first.
func (g *sweepGroup) run(ctx context.Context, fn func()) bool {
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	g.wg.Go(func() {
		defer func() { <-g.slots }()
		fn()
	})
	return true
}

// wait waits for every fn run has started.
func (g *sweepGroup) wait() { g.wg.Wait() }

// streamSweep is the engine's part that sweeps the streams. What the
// previous sweep saw is used only by the goroutine that sweeps.
type streamSweep struct {
	startstop.Base
	source   StreamSource
	store    Store
	log      *slog.Logger
	clock    clock.Clock
	interval time.Duration
	seed     maphash.Seed
	// subscriptions are the engine's subscriptions' patterns by id, and
	// match the ids of those matching a path.
	subscriptions func() map[string]*Pattern
	match         func(path string) []string
	// stored are the subscriptions Start loaded, with their patterns: its
	// recovery covers only these.
	stored map[string]*Pattern
	// spawnAndWake and startIfPending do what StreamAppended would have.
	spawnAndWake   func(ctx context.Context, path string, subs []string, listed *StreamInfo) error
	startIfPending func(ctx context.Context, id, subID string) error
	swept          func()

	// marks are the marks of the streams as last checked.
	marks *sweepMarks
	// known are the subscriptions a stream gets consumers of: those Start
	// loaded, as the start-up sweep spawns only these, and those whose
	// existing streams are adopted (Subscription.adopted). A subscription
	// being created adopts its streams itself, at their tails, and
	// spawning them here first would replay whole streams.
	known map[string]bool
}

func (s *streamSweep) hash(v string) uint64 { return maphash.String(s.seed, v) }

// mark hashes a stream's path and tail. A path has no control character,
// so the NUL between them keeps any two pairs apart.
func (s *streamSweep) mark(st StreamInfo) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	_, _ = h.WriteString(st.Path)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(st.Tail)
	return h.Sum64()
}

// begin readies the sweep for the subscriptions Start loaded.
func (s *streamSweep) begin() {
	s.marks = nil
	s.known = make(map[string]bool, len(s.stored))
	for id := range s.stored {
		s.known[id] = true
	}
}

// Start runs, in ctx until Stop, Start's recovery of the subscriptions
// the engine loaded (stored) and then the sweeps.
func (s *streamSweep) Start(ctx context.Context) {
	ctx, ok, stopped := s.StartInit(ctx)
	if !ok {
		return
	}
	go func() {
		defer stopped()
		s.run(ctx)
	}()
}

// run runs Start's recovery of the subscriptions it loaded (stored), and
// then a sweep every sweep interval, until ctx ends.
func (s *streamSweep) run(ctx context.Context) {
	s.begin()
	marks := newSweepMarks()
	s.recover(ctx, marks)
	s.marks = marks.done()
	s.swept()
	t := s.clock.Ticker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.sweep(ctx)
		s.swept()
	}
}

// sweep runs one sweep: it wakes or spawns the consumers of every stream
// whose tail moved since the previous sweep.
func (s *streamSweep) sweep(ctx context.Context) {
	patterns := s.subscriptions()
	distinct := make(map[string]*Pattern)
	for _, p := range patterns {
		distinct[p.String()] = p
	}
	// A subscription newly adopted has every stream it matches looked
	// at: one created after the adoption's scan through an engine that
	// did not know the subscription yet got none of its consumers, and
	// the tail it had then may never move again.
	adopted := s.adopted(ctx, patterns)
	adoptedPatterns := make(map[string]bool)
	for id := range adopted {
		adoptedPatterns[patterns[id].String()] = true
	}
	prev, next := s.marks, newSweepMarks()
	var prevPatterns map[string]uint64
	if prev != nil {
		prevPatterns = prev.patterns
	}
	// The listings of the patterns whose sum changed, kept until every
	// pattern's streams are in the buckets' sums.
	type listing struct {
		pattern string
		streams []StreamInfo
	}
	var changed []listing
	for _, key := range slices.Sorted(maps.Keys(distinct)) {
		streams, err := s.source.MatchStreams(ctx, distinct[key])
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "webhooks: stream sweep: matching streams", "pattern", key, "error", err)
			}
			// The previous marks stay, so nothing that moved is lost:
			// the next sweep finds it.
			return
		}
		next.list(key)
		for _, st := range streams {
			next.add(key, s.hash(st.Path), s.mark(st))
		}
		if old, ok := prevPatterns[key]; !ok || old != next.patterns[key] || adoptedPatterns[key] {
			changed = append(changed, listing{key, streams})
		}
	}
	next.done()
	bucketChanged := bucketChanges(prev, next)
	type movedStream struct {
		StreamInfo
		pattern string
	}
	var moved []movedStream
	isMoved := make(map[uint64]bool)
	for _, l := range changed {
		for _, st := range l.streams {
			h := s.hash(st.Path)
			if !bucketChanged(h) && !s.matchesAny(st.Path, adopted) {
				continue
			}
			if m := s.mark(st); !isMoved[m] && nameableStreamPath(st.Path) == nil {
				isMoved[m] = true
				moved = append(moved, movedStream{st, l.pattern})
			}
		}
	}
	var failedMu sync.Mutex
	for id := range adopted {
		s.known[id] = true
	}
	g := newSweepGroup()
	for _, st := range moved {
		ok := g.run(ctx, func() {
			if err := s.sweepStream(ctx, st.StreamInfo); err != nil && ctx.Err() == nil {
				// Forgotten, so that the next sweep tries it again.
				failedMu.Lock()
				next.forget(st.pattern, s.hash(st.Path))
				failedMu.Unlock()
				s.log.ErrorContext(ctx, "webhooks: stream sweep", "stream", st.Path, "error", err)
			}
		})
		if !ok {
			break
		}
	}
	g.wait()
	if ctx.Err() != nil {
		return
	}
	s.marks = next
	for id := range s.known {
		if patterns[id] == nil {
			delete(s.known, id) // deleted
		}
	}
}

// adopted returns the subscriptions of patterns that the sweep did not
// know and whose existing streams are now adopted. It reads each unknown
// subscription from the Store, once a sweep until it is adopted.
func (s *streamSweep) adopted(ctx context.Context, patterns map[string]*Pattern) map[string]bool {
	var out map[string]bool
	for id := range patterns {
		if s.known[id] {
			continue
		}
		sub, err := s.store.GetSubscription(ctx, id)
		if err != nil {
			if !errors.Is(err, ErrSubscriptionNotFound) && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "webhooks: stream sweep: reading a subscription", "subscription_id", id, "error", err)
			}
			continue
		}
		if sub.adopted {
			if out == nil {
				out = make(map[string]bool)
			}
			out[id] = true
		}
	}
	return out
}

// matchesAny reports whether one of subs matches stream path.
func (s *streamSweep) matchesAny(path string, subs map[string]bool) bool {
	return len(subs) > 0 && slices.ContainsFunc(s.match(path), func(id string) bool { return subs[id] })
}

// sweepStream does for stream st, whose tail moved, what a StreamAppended
// would have done, for the subscriptions of the previous sweep.
func (s *streamSweep) sweepStream(ctx context.Context, st StreamInfo) error {
	subs := slices.DeleteFunc(s.match(st.Path), func(id string) bool { return !s.known[id] })
	existing, err := s.store.ConsumersByStream(ctx, st.Path)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		id := ConsumerID(sub, st.Path)
		if !slices.ContainsFunc(existing, func(c *Consumer) bool { return c.ID == id }) {
			return s.spawnAndWake(ctx, st.Path, subs, &st)
		}
	}
	// Only consumers that look stranded are woken: the others are in a
	// wake cycle already, or up to date.
	t := tails{st.Path: st}
	for _, c := range existing {
		if c.State != StateIdle || len(pendingStreams(c, t)) == 0 {
			continue
		}
		if err := s.startIfPending(ctx, c.ID, c.SubscriptionID); err != nil {
			return err
		}
	}
	return nil
}

// recover makes up for stream events the engine may have missed while it
// was down: the host may have appended to or created a stream after its
// last call reached the engine, or before Start. For the subscriptions that
// were in the Store when Start loaded them, it spawns the consumers that matching streams lack
// and wakes every IDLE consumer with pending work. Subscriptions created
// since adopt their streams themselves, at the tail; spawning them here
// would race that and replay whole streams. Deadlines of WAKING and LIVE
// consumers need no sweep: they are in the Store, and the scheduler acts
// on overdue ones as soon as it starts. If marks is set, it adds there
// each stream's mark as listed, before it looks at its consumers: the
// stream sweep's first marks. It looks at sweepWidth streams at once, so
// that a Store that merges concurrent reads reads the consumers of many
// streams per round trip.
//
// Its memory does not grow with the streams: it holds one subscription's
// listing and the consumers of sweepWidth streams at a time. A stream that
// several subscriptions match is looked at with the first of them in ID
// order whose listing did not fail, not remembered as looked at.
func (s *streamSweep) recover(ctx context.Context, marks *sweepMarks) {
	ids := slices.Sorted(maps.Keys(s.stored))
	failed := make(map[string]bool)
	g := newSweepGroup()
	defer g.wait()
	for _, id := range ids {
		p := s.stored[id]
		streams, err := s.source.MatchStreams(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "webhooks: start-up sweep: matching streams", "subscription_id", id, "error", err)
			}
			failed[id] = true
			continue
		}
		// Each pattern's marks once, as a sweep adds them.
		key, listed := p.String(), true
		if marks != nil {
			if _, listed = marks.patterns[key]; !listed {
				marks.list(key)
			}
		}
		for _, st := range streams {
			if !listed {
				marks.add(key, s.hash(st.Path), s.mark(st))
			}
			subs := slices.DeleteFunc(s.match(st.Path), func(sub string) bool { return s.stored[sub] == nil })
			if slices.ContainsFunc(subs, func(sub string) bool { return sub < id && !failed[sub] }) {
				continue // looked at with sub
			}
			ok := g.run(ctx, func() {
				if err := s.spawnAndWake(ctx, st.Path, subs, &st); err != nil && ctx.Err() == nil {
					s.log.ErrorContext(ctx, "webhooks: start-up sweep", "stream", st.Path, "error", err)
				}
			})
			if !ok {
				return
			}
		}
	}
}
