package webhooks

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// subscriptionSet is the engine's view of the subscriptions: each one, as
// stored, with its parsed pattern, and the index built from the patterns.
// Deliveries take a subscription's webhook and secret from it rather than
// from the Store. The subscription API changes it after each create or
// delete it commits; the feed's reload brings it in line with the Store. A
// reload's list may predate a change the API has just applied, so the ids
// the API changes while a reload runs are left as the API set them.
type subscriptionSet struct {
	index *patternIndex

	mu      sync.RWMutex
	entries map[string]indexed // id → every indexed subscription
	// touched, while a reload runs, holds the ids the API changed since
	// the reload began; nil otherwise.
	touched map[string]bool
}

// indexed is a subscription of the set and its parsed pattern.
type indexed struct {
	pattern *Pattern
	sub     *Subscription
}

func newSubscriptionSet() *subscriptionSet {
	return &subscriptionSet{index: newPatternIndex(), entries: make(map[string]indexed)}
}

// add indexes sub on p, its parsed pattern, for a create the API
// committed.
func (s *subscriptionSet) add(p *Pattern, sub *Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(p, sub)
	s.touch(sub.ID)
}

// remove unindexes subscription id, for a delete the API committed.
func (s *subscriptionSet) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(id)
	s.touch(id)
}

// update replaces subscription sub in the set, if the set holds it, for an
// update the engine committed.
func (s *subscriptionSet) update(sub *Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.entries[sub.ID]; ok {
		s.put(old.pattern, sub)
		s.touch(sub.ID)
	}
}

// get returns subscription id, or nil if the set lacks it. The caller must
// not change it.
func (s *subscriptionSet) get(id string) *Subscription {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.entries[id].sub
}

// pending returns the subscriptions of the set that are pending
// verification. The caller must not change them.
func (s *subscriptionSet) pending() []*Subscription {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Subscription
	for _, e := range s.entries {
		if e.sub.status() == StatusPending {
			out = append(out, e.sub)
		}
	}
	return out
}

// patterns returns the pattern of every subscription in the set, by id.
func (s *subscriptionSet) patterns() map[string]*Pattern {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]*Pattern, len(s.entries))
	for id, e := range s.entries {
		out[id] = e.pattern
	}
	return out
}

func (s *subscriptionSet) touch(id string) {
	if s.touched != nil {
		s.touched[id] = true
	}
}

// put and drop change the set and its index; the caller holds mu.
func (s *subscriptionSet) put(p *Pattern, sub *Subscription) {
	if old, ok := s.entries[sub.ID]; !ok || old.pattern.String() != p.String() {
		if ok {
			s.index.remove(old.pattern, sub.ID)
		}
		s.index.add(p, sub.ID)
	}
	s.entries[sub.ID] = indexed{pattern: p, sub: sub.Clone()}
}

func (s *subscriptionSet) drop(id string) {
	if old, ok := s.entries[id]; ok {
		s.index.remove(old.pattern, id)
		delete(s.entries, id)
	}
}

// beginReload starts a reload, before its list is read.
func (s *subscriptionSet) beginReload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touched = make(map[string]bool)
}

// endReload makes the set what subs, listed after beginReload, say, except
// for the ids the API has changed since then. It returns the ids added or
// replaced and removed, and the stored subscriptions whose pattern does
// not parse.
func (s *subscriptionSet) endReload(subs []*Subscription) (added, removed []string, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := s.touched
	s.touched = nil
	listed := make(map[string]bool, len(subs))
	for _, sub := range subs {
		listed[sub.ID] = true
		if touched[sub.ID] {
			continue
		}
		p, err := ParsePattern(sub.Pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("stored subscription %s: %w", sub.ID, err))
			continue
		}
		// A subscription deleted and created again under its id through
		// another engine is replaced, webhook and secret too. Its health
		// changes with every delivery, on any engine, and is no change of
		// the subscription: it is taken as it is, and not reported.
		old, ok := s.entries[sub.ID]
		if !ok || !sameSubscription(old.sub, sub) {
			added = append(added, sub.ID)
		}
		s.put(p, sub)
	}
	for id := range s.entries {
		if !listed[id] && !touched[id] {
			s.drop(id)
			removed = append(removed, id)
		}
	}
	return added, removed, errs
}

// sameSubscription reports whether a and b are the same stored
// subscription: every field but Health equal, times as instants, and the
// rest by its encoding, which is canonical.
func sameSubscription(a, b *Subscription) bool {
	encode := func(s *Subscription) []byte {
		data, err := s.MarshalData()
		if err != nil {
			return nil // never equal
		}
		return data
	}
	if a.adopted != b.adopted {
		// The adoption mark is the engine's own bookkeeping, written
		// right after a create: no change of the subscription.
		b = b.Clone()
		b.adopted = a.adopted
	}
	ea, eb := encode(a), encode(b)
	return a.ID == b.ID && a.Pattern == b.Pattern && a.Webhook == b.Webhook && a.Description == b.Description &&
		a.Secret == b.Secret && a.CreatedAt.Equal(b.CreatedAt) && ea != nil && bytes.Equal(ea, eb)
}

// abortReload ends a reload whose list failed, changing nothing.
func (s *subscriptionSet) abortReload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touched = nil
}

// subscriptionFeed is the engine's part that keeps its subscription set in
// line with the Store's, if the Store is a SubscriptionFeed: between Start
// and Stop one goroutine watches and another reloads, so that a burst of
// notifications that arrives during a reload merges into one more.
type subscriptionFeed struct {
	startstop.Base
	feed  SubscriptionFeed // nil if the Store is none
	store Store
	set   *subscriptionSet
	clock clock.Clock
	log   *slog.Logger
	// reloadDS reloads the __ds subscriptions' patterns, which the feed
	// reports too.
	reloadDS func(ctx context.Context) error
	// reloaded signals a test at the end of each reload.
	reloaded func()
}

// Start follows the feed, in ctx, until Stop; without a feed it does
// nothing.
func (f *subscriptionFeed) Start(ctx context.Context) {
	if f.feed == nil {
		return
	}
	ctx, ok, stopped := f.StartInit(ctx)
	if !ok {
		return
	}
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		f.watch(ctx, notify)
	}()
	go func() {
		defer wg.Done()
		f.reload(ctx, changed, notify)
	}()
	go func() {
		defer stopped()
		wg.Wait()
	}()
}

// watch runs the feed's watch until ctx ends, again after each error.
func (f *subscriptionFeed) watch(ctx context.Context, notify func()) {
	for {
		err := f.feed.WatchSubscriptions(ctx, notify)
		if ctx.Err() != nil {
			return
		}
		f.log.ErrorContext(ctx, "webhooks: watching subscriptions", "error", err)
		if !f.pause(ctx, storeErrorRetry) {
			return
		}
	}
}

// reload reloads the subscriptions each time changed has an element,
// until ctx ends.
func (f *subscriptionFeed) reload(ctx context.Context, changed <-chan struct{}, notify func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		f.set.beginReload()
		subs, err := f.store.ListSubscriptions(ctx)
		if err != nil {
			f.set.abortReload()
			if ctx.Err() != nil {
				return
			}
			f.log.ErrorContext(ctx, "webhooks: reloading subscriptions", "error", err)
			if !f.pause(ctx, storeErrorRetry) {
				return
			}
			notify()
			continue
		}
		added, removed, errs := f.set.endReload(subs)
		if err := f.reloadDS(ctx); err != nil && ctx.Err() == nil {
			errs = append(errs, err)
			notify()
		}
		for _, err := range errs {
			f.log.ErrorContext(ctx, "webhooks: reloading subscriptions", "error", err)
		}
		if len(added)+len(removed) > 0 {
			f.log.InfoContext(ctx, "webhooks: subscriptions changed through another engine", "added", added, "removed", removed)
		}
		f.reloaded()
	}
}

// pause waits d on the feed's clock, and reports false if ctx ended
// first.
func (f *subscriptionFeed) pause(ctx context.Context, d time.Duration) bool {
	t := f.clock.Timer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
