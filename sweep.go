package webhooks

import (
	"context"
	"hash/maphash"
	"maps"
	"slices"
)

// The stream sweep finds appends whose StreamAppended or StreamCreated
// never ran: the host that committed them crashed first, or the call
// failed and its engine died before retrying it. Nothing else would wake
// the consumers of such a stream, IDLE with no deadline, until its next
// append or an engine's restart.
//
// Every sweep interval (WithSweepInterval) each engine lists the streams
// its subscriptions match, as Start's recovery does, and keeps a hash of
// each one's tail. A stream whose tail differs from the one the previous
// sweep kept (or that it did not see) gets what the missed call would have
// done: its IDLE consumers with pending work are woken, and consumers it
// lacks are spawned. The first tails come from Start's recovery, which
// makes up for everything committed before them. So an append committed
// while an engine runs is found by that engine's next sweep at the latest,
// and each running engine sweeps: an append is stranded only if every
// engine dies.
//
// An idle sweep costs one StreamSource.MatchStreams per distinct pattern
// and about 40 bytes of memory per stream, and no Store access: only
// streams that moved are looked up. Streams appended to through the
// engine are looked at once more, at the sweep after their append.

// sweepPolls is the default sweep interval, in poll intervals.
const sweepPolls = 60

// streamSweep is what the previous sweep saw. Only the goroutine that
// sweeps uses it.
type streamSweep struct {
	seed maphash.Seed
	// tails maps a stream path's hash to its tail's hash, as last checked;
	// nil before Start's recovery has run.
	tails map[uint64]uint64
	// known are the subscriptions of the previous sweep: a stream gets
	// consumers only of these, as the start-up sweep spawns only those
	// Start loaded. A subscription created since adopts its streams
	// itself, and spawning them here first would replay whole streams.
	known map[string]bool
}

func newStreamSweep() streamSweep { return streamSweep{seed: maphash.MakeSeed()} }

func (s *streamSweep) hash(v string) uint64 { return maphash.String(s.seed, v) }

// sweepLoop runs Start's recovery, and then a sweep every sweep interval,
// until ctx ends.
func (e *Engine) sweepLoop(ctx context.Context) {
	e.sweep.tails = make(map[uint64]uint64)
	e.sweep.known = make(map[string]bool, len(e.stored))
	for id := range e.stored {
		e.sweep.known[id] = true
	}
	e.recover(ctx, e.sweep.tails)
	e.swept.Send()
	t := e.clock.Ticker(e.cfg.sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.sweepStreams(ctx)
		e.swept.Send()
	}
}

// sweepStreams runs one sweep: it wakes or spawns the consumers of every
// stream whose tail moved since the previous sweep.
func (e *Engine) sweepStreams(ctx context.Context) {
	patterns := e.subs.patterns()
	distinct := make(map[string]*Pattern)
	for _, p := range patterns {
		distinct[p.String()] = p
	}
	prev := e.sweep.tails
	seen := make(map[uint64]uint64, len(prev))
	var moved []StreamInfo
	for _, key := range slices.Sorted(maps.Keys(distinct)) {
		streams, err := e.source.MatchStreams(ctx, distinct[key])
		if err != nil {
			if ctx.Err() == nil {
				e.log.ErrorContext(ctx, "webhooks: stream sweep: matching streams", "pattern", key, "error", err)
			}
			// The previous tails stay, so nothing that moved is lost:
			// the next sweep finds it.
			return
		}
		for _, s := range streams {
			k := e.sweep.hash(s.Path)
			if _, dup := seen[k]; dup {
				continue
			}
			tail := e.sweep.hash(s.Tail)
			seen[k] = tail
			if old, ok := prev[k]; (!ok || old != tail) && validateStreamPath(s.Path) == nil {
				moved = append(moved, s)
			}
		}
	}
	for _, s := range moved {
		if err := e.sweepStream(ctx, s); err != nil {
			if ctx.Err() != nil {
				return
			}
			// Forgotten, so that the next sweep tries it again.
			delete(seen, e.sweep.hash(s.Path))
			e.log.ErrorContext(ctx, "webhooks: stream sweep", "stream", s.Path, "error", err)
		}
	}
	e.sweep.tails = seen
	known := make(map[string]bool, len(patterns))
	for id := range patterns {
		known[id] = true
	}
	e.sweep.known = known
}

// sweepStream does for stream s, whose tail moved, what a StreamAppended
// would have done, for the subscriptions of the previous sweep.
func (e *Engine) sweepStream(ctx context.Context, s StreamInfo) error {
	subs := slices.DeleteFunc(e.subs.index.match(s.Path), func(id string) bool { return !e.sweep.known[id] })
	existing, err := e.store.ConsumersByStream(ctx, s.Path)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		id := ConsumerID(sub, s.Path)
		if !slices.ContainsFunc(existing, func(c *Consumer) bool { return c.ID == id }) {
			return e.spawnAndWake(ctx, s.Path, subs)
		}
	}
	// Only consumers that look stranded are woken: the others are in a
	// wake cycle already, or up to date.
	t := tails{s.Path: s}
	for _, c := range existing {
		if c.State != StateIdle || len(pendingStreams(c, t)) == 0 {
			continue
		}
		if err := e.startIfPending(ctx, c.ID, c.SubscriptionID); err != nil {
			return err
		}
	}
	return nil
}
