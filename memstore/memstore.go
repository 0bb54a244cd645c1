// Package memstore is an in-memory webhooks.Store, for tests and for
// embedding the engine in a single process. Nothing survives a restart.
package memstore

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

var (
	_ webhooks.Store            = (*Store)(nil)
	_ webhooks.SubscriptionFeed = (*Store)(nil)
	_ webhooks.DeliveryLog      = (*Store)(nil)
)

// Store is an in-memory webhooks.Store. The zero value is not usable; call
// New.
//
// Locks are taken in the order subscription, consumer, store. The store lock
// is never held while an UpdateConsumer function runs, so consumers update in
// parallel; only the index maintenance afterwards is serialized.
//
// Contexts are ignored: no operation does I/O, though UpdateConsumer and
// DeleteSubscription wait for update functions running on the same consumers.
//
// It is a webhooks.SubscriptionFeed, so that engines in one process that
// share a Store learn of each other's subscriptions.
type Store struct {
	mu        sync.RWMutex
	subs      map[string]*subEntry
	consumers map[string]*entry
	// byStream holds, for every path, the consumers whose primary stream or
	// Streams include it, sorted by ID so reads need no sort.
	byStream  map[string][]*entry
	deadlines deadlineHeap
	counts    map[webhooks.ConsumerState]int
	key       []byte
	// webhookKeys is the WebhookKeyStore's key set, nil until stored.
	webhookKeys []byte
	leases      map[string]heldLease
	// subsChanged is closed, and replaced, when a subscription is created,
	// updated or deleted: it wakes every WatchSubscriptions at once.
	subsChanged chan struct{}
	// ds is the DSStore's data.
	ds dsState
}

// subEntry is a stored subscription. Its mu is read-locked by CreateConsumer
// and write-locked by DeleteSubscription, so no consumer can be created while
// a delete is collecting the consumer locks. sub.Health is its health, which
// only UpdateHealth changes.
type subEntry struct {
	mu  sync.RWMutex
	sub webhooks.Subscription
	// byState holds its consumers by state, each list ordered by ID, so
	// that ListConsumers reads a page without a sort, with a state filter
	// or without. They belong to Store.mu.
	byState map[webhooks.ConsumerState]*idList
	deleted bool // written under mu and Store.mu
}

// New returns an empty Store.
func New() *Store {
	return &Store{
		subs:      make(map[string]*subEntry),
		consumers: make(map[string]*entry),
		byStream:  make(map[string][]*entry),
		counts:    make(map[webhooks.ConsumerState]int),

		subsChanged: make(chan struct{}),
	}
}

// CreateSubscription implements webhooks.Store.
func (s *Store) CreateSubscription(_ context.Context, sub *webhooks.Subscription) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.subs[sub.ID]; ok {
		return webhooks.ErrSubscriptionExists
	}
	se := &subEntry{sub: *sub.Clone(), byState: make(map[webhooks.ConsumerState]*idList)}
	se.sub.Health = webhooks.SubscriptionHealth{}
	s.subs[sub.ID] = se
	s.subscriptionsChanged()
	return nil
}

// UpdateSubscription implements webhooks.Store.
func (s *Store) UpdateSubscription(_ context.Context, id string, fn func(*webhooks.Subscription) error) (*webhooks.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.subs[id]
	if !ok {
		return nil, webhooks.ErrSubscriptionNotFound
	}
	sub := se.sub.Clone()
	if err := fn(sub); err != nil {
		return nil, err
	}
	sub.ID, sub.Pattern, sub.CreatedAt, sub.Health = se.sub.ID, se.sub.Pattern, se.sub.CreatedAt, se.sub.Health
	se.sub = *sub.Clone()
	s.subscriptionsChanged()
	return sub, nil
}

// GetSubscription implements webhooks.Store.
func (s *Store) GetSubscription(_ context.Context, id string) (*webhooks.Subscription, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	se, ok := s.subs[id]
	if !ok {
		return nil, webhooks.ErrSubscriptionNotFound
	}
	return se.sub.Clone(), nil
}

// ListSubscriptions implements webhooks.Store.
func (s *Store) ListSubscriptions(_ context.Context) ([]*webhooks.Subscription, error) {
	s.mu.RLock()
	out := make([]*webhooks.Subscription, 0, len(s.subs))
	for _, se := range s.subs {
		out = append(out, se.sub.Clone())
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *webhooks.Subscription) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// WatchSubscriptions implements webhooks.SubscriptionFeed.
func (s *Store) WatchSubscriptions(ctx context.Context, changed func()) error {
	for {
		s.mu.RLock()
		next := s.subsChanged
		s.mu.RUnlock()
		changed()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-next:
		}
	}
}

// subscriptionsChanged wakes the watchers. The caller holds s.mu.
func (s *Store) subscriptionsChanged() {
	close(s.subsChanged)
	s.subsChanged = make(chan struct{})
}

// DeleteSubscription implements webhooks.Store. It waits for update
// functions running on the subscription's consumers, so that each of them
// either commits before the delete or finds its consumer gone.
func (s *Store) DeleteSubscription(_ context.Context, id string) error {
	s.mu.RLock()
	se, ok := s.subs[id]
	s.mu.RUnlock()
	if !ok {
		return webhooks.ErrSubscriptionNotFound
	}
	se.mu.Lock()
	defer se.mu.Unlock()

	// With se.mu held the consumer list can only shrink, so a snapshot
	// covers every consumer the delete must take.
	s.mu.RLock()
	if se.deleted {
		s.mu.RUnlock()
		return webhooks.ErrSubscriptionNotFound
	}
	var doomed []*entry
	for _, l := range se.byState {
		doomed = slices.AppendSeq(doomed, l.after(""))
	}
	s.mu.RUnlock()
	for _, e := range doomed {
		e.mu.Lock()
	}
	s.mu.Lock()
	s.removeAll(doomed)
	se.deleted = true
	se.byState = nil
	delete(s.subs, id)
	s.subscriptionsChanged()
	s.mu.Unlock()
	for _, e := range doomed {
		e.mu.Unlock()
	}
	return nil
}

// removeAll deletes the consumers of a subscription being deleted, skipping
// any already deleted. The caller holds s.mu and every entry's mu.
func (s *Store) removeAll(doomed []*entry) {
	paths := make(map[string]struct{})
	for _, e := range doomed {
		if e.deleted { // deleted by UpdateConsumer while we waited
			continue
		}
		e.deleted = true
		delete(s.consumers, e.id)
		s.count(e.state, -1)
		if e.heapPos >= 0 {
			heap.Remove(&s.deadlines, int(e.heapPos))
		}
		for _, p := range pathsOf(e.consumer()) {
			paths[p] = struct{}{}
		}
	}
	// One pass per path, not one per consumer: a path shared by many of the
	// doomed consumers would otherwise cost quadratic time.
	for p := range paths {
		rest := slices.DeleteFunc(s.byStream[p], func(e *entry) bool { return e.deleted })
		if len(rest) == 0 {
			delete(s.byStream, p)
		} else {
			s.byStream[p] = rest
		}
	}
}

// CreateConsumer implements webhooks.Store.
func (s *Store) CreateConsumer(_ context.Context, c *webhooks.Consumer) error {
	data, err := c.MarshalData()
	if err != nil {
		return err
	}
	s.mu.RLock()
	se, ok := s.subs[c.SubscriptionID]
	s.mu.RUnlock()
	if !ok {
		return webhooks.ErrSubscriptionNotFound
	}
	se.mu.RLock()
	defer se.mu.RUnlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if se.deleted {
		return webhooks.ErrSubscriptionNotFound
	}
	if _, ok := s.consumers[c.ID]; ok {
		return webhooks.ErrConsumerExists
	}
	e := &entry{heapPos: -1, id: c.ID, sub: c.SubscriptionID, primary: c.PrimaryStream}
	e.set(c, withWakeRoom(c, data))
	se.index(e)
	s.consumers[c.ID] = e
	s.count(c.State, 1)
	if !c.Deadline.IsZero() {
		heap.Push(&s.deadlines, e)
	}
	forEachPath(c, func(p string) { s.indexStream(p, e) })
	return nil
}

// GetConsumer implements webhooks.Store.
func (s *Store) GetConsumer(_ context.Context, id string) (*webhooks.Consumer, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.consumers[id]
	if !ok {
		return nil, webhooks.ErrConsumerNotFound
	}
	return e.consumer(), nil
}

// UpdateConsumer implements webhooks.Store. fn must not change the
// consumer's ID, SubscriptionID or PrimaryStream: they are its identity, and
// UpdateConsumer returns an error rather than save such a change.
func (s *Store) UpdateConsumer(_ context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	s.mu.RLock()
	e, ok := s.consumers[id]
	s.mu.RUnlock()
	if !ok {
		return nil, webhooks.ErrConsumerNotFound
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deleted { // deleted while we waited for the lock
		return nil, webhooks.ErrConsumerNotFound
	}

	c := e.consumer()
	oldPaths := pathsOf(c)
	action, err := fn(c)
	if err != nil {
		return nil, err
	}
	switch action {
	case webhooks.UpdateNone:
		return e.consumer(), nil
	case webhooks.UpdateSave:
		if c.ID != e.id || c.SubscriptionID != e.sub || c.PrimaryStream != e.primary {
			return nil, fmt.Errorf("memstore: update of consumer %q changed its ID, SubscriptionID or PrimaryStream", id)
		}
		data, err := c.MarshalData()
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.save(e, oldPaths, c, data)
		s.mu.Unlock()
		// save encoded c: it is the caller's, who gave fn it, and is handed
		// back without another copy, empty lists nil as decoding makes them.
		for _, l := range []*[]webhooks.StreamOffset{&c.Streams, &c.WakeTails} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if len(c.TriggeredBy) == 0 {
			c.TriggeredBy = nil
		}
		return c, nil
	case webhooks.UpdateDelete:
		s.mu.Lock()
		s.remove(e, oldPaths)
		s.mu.Unlock()
		return nil, nil
	default:
		return nil, fmt.Errorf("memstore: update of consumer %q returned unknown action %d", id, action)
	}
}

// ConsumersByStream implements webhooks.Store.
func (s *Store) ConsumersByStream(_ context.Context, path string) ([]*webhooks.Consumer, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	es := s.byStream[path]
	out := make([]*webhooks.Consumer, len(es))
	for i, e := range es {
		out[i] = e.consumer()
	}
	return out, nil
}

// DueConsumers implements webhooks.Store. Equal deadlines are ordered by ID.
// A limit below one returns nothing. It costs O(limit·log limit), however
// many consumers are due.
func (s *Store) DueConsumers(_ context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*webhooks.Consumer
	// Walk the heap best-first: a frontier of heap positions whose parents
	// were taken yields the due entries in order without popping them.
	f := &frontier{h: s.deadlines}
	if len(s.deadlines) > 0 {
		f.pos = append(f.pos, 0)
	}
	for len(out) < limit && f.Len() > 0 {
		i := heap.Pop(f).(int)
		e := s.deadlines[i]
		if e.deadline.After(now) {
			break
		}
		out = append(out, e.consumer())
		for child := 2*i + 1; child <= 2*i+2 && child < len(s.deadlines); child++ {
			heap.Push(f, child)
		}
	}
	return out, nil
}

// NextDeadline implements webhooks.Store.
func (s *Store) NextDeadline(_ context.Context) (time.Time, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.deadlines) == 0 {
		return time.Time{}, false, nil
	}
	return s.deadlines[0].deadline, true, nil
}

// CountConsumers implements webhooks.Store. States with no consumers are
// absent from the map.
func (s *Store) CountConsumers(_ context.Context) (map[webhooks.ConsumerState]int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[webhooks.ConsumerState]int, len(s.counts))
	for st, n := range s.counts {
		out[st] = n
	}
	return out, nil
}

// ListConsumers implements webhooks.Store. A page costs O(log n + limit)
// per state listed, for n consumers in the subscription, and a limit below
// one returns nothing.
func (s *Store) ListConsumers(_ context.Context, p *webhooks.ListConsumersParams) ([]*webhooks.Consumer, error) {
	if p.Limit < 1 {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	se, ok := s.subs[p.SubscriptionID]
	if !ok {
		return nil, nil
	}
	// Each state's page, merged: at most limit entries from each.
	var page []*entry
	for st, l := range se.byState {
		if p.State != "" && st != p.State {
			continue
		}
		n := 0
		for e := range l.after(p.After) {
			if n == p.Limit {
				break
			}
			page = append(page, e)
			n++
		}
	}
	slices.SortFunc(page, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	page = page[:min(len(page), p.Limit)]
	out := make([]*webhooks.Consumer, len(page))
	for i, e := range page {
		out[i] = e.consumer()
	}
	return out, nil
}

// UpdateHealth implements webhooks.Store. fn runs under the store's lock,
// so it must not call the Store.
func (s *Store) UpdateHealth(_ context.Context, id string, fn func(h *webhooks.SubscriptionHealth)) (*webhooks.SubscriptionHealth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.subs[id]
	if !ok {
		return nil, webhooks.ErrSubscriptionNotFound
	}
	// SubscriptionHealth holds no references: a copy is a deep one.
	h := se.sub.Health
	fn(&h)
	se.sub.Health = h
	return &h, nil
}

// LoadOrStoreSigningKey implements webhooks.Store. It rejects an empty key,
// which would make every token forgeable.
func (s *Store) LoadOrStoreSigningKey(_ context.Context, key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key == nil {
		if len(key) == 0 {
			return nil, errors.New("memstore: empty signing key")
		}
		s.key = slices.Clone(key)
	}
	return slices.Clone(s.key), nil
}

// save stores c, encoded as data, as e's new value and brings the indexes
// up to date; oldPaths are the paths of e's value before. The caller holds
// e.mu and s.mu.
func (s *Store) save(e *entry, oldPaths []string, c *webhooks.Consumer, data []byte) {
	for _, p := range oldPaths {
		if !hasPath(c, p) {
			s.unindexStream(p, e)
		}
	}
	forEachPath(c, func(p string) {
		if !slices.Contains(oldPaths, p) {
			s.indexStream(p, e)
		}
	})
	stateChanged := c.State != e.state
	if stateChanged {
		s.count(e.state, -1)
		s.count(c.State, 1)
		s.subs[e.sub].unindex(e)
	}
	wasScheduled, deadlineChanged := !e.deadline.IsZero(), !c.Deadline.Equal(e.deadline)
	e.set(c, data)
	if stateChanged {
		s.subs[e.sub].index(e)
	}
	switch {
	case !deadlineChanged:
	case e.deadline.IsZero():
		heap.Remove(&s.deadlines, int(e.heapPos))
	case wasScheduled:
		heap.Fix(&s.deadlines, int(e.heapPos))
	default:
		heap.Push(&s.deadlines, e)
	}
}

// remove deletes e, whose paths are paths, from the store and every
// index. The caller holds e.mu and s.mu.
func (s *Store) remove(e *entry, paths []string) {
	e.deleted = true
	delete(s.consumers, e.id)
	s.count(e.state, -1)
	if e.heapPos >= 0 {
		heap.Remove(&s.deadlines, int(e.heapPos))
	}
	for _, p := range paths {
		s.unindexStream(p, e)
	}
	s.subs[e.sub].unindex(e)
}

// index adds e to the list of its state. The caller holds Store.mu.
func (se *subEntry) index(e *entry) {
	l := se.byState[e.state]
	if l == nil {
		l = &idList{}
		se.byState[e.state] = l
	}
	l.insert(e)
}

// unindex removes e from the list of its state. The caller holds Store.mu.
func (se *subEntry) unindex(e *entry) {
	l := se.byState[e.state]
	if l == nil {
		return
	}
	if l.remove(e); len(l.chunks) == 0 {
		delete(se.byState, e.state)
	}
}

func (s *Store) count(st webhooks.ConsumerState, delta int) {
	if n := s.counts[st] + delta; n == 0 {
		delete(s.counts, st)
	} else {
		s.counts[st] = n
	}
}

func (s *Store) indexStream(path string, e *entry) {
	es := s.byStream[path]
	i, _ := slices.BinarySearchFunc(es, e.id, cmpID)
	s.byStream[path] = slices.Insert(es, i, e)
}

func (s *Store) unindexStream(path string, e *entry) {
	es := s.byStream[path]
	i, found := slices.BinarySearchFunc(es, e.id, cmpID)
	if !found {
		return
	}
	if es = slices.Delete(es, i, i+1); len(es) == 0 {
		delete(s.byStream, path)
	} else {
		s.byStream[path] = es
	}
}

func cmpID(e *entry, id string) int { return strings.Compare(e.id, id) }

// forEachPath calls fn once for every distinct stream path of c: its primary
// stream and the paths in Streams.
func forEachPath(c *webhooks.Consumer, fn func(path string)) {
	fn(c.PrimaryStream)
	for i, so := range c.Streams {
		if so.Path != c.PrimaryStream && !slices.ContainsFunc(c.Streams[:i], func(prev webhooks.StreamOffset) bool { return prev.Path == so.Path }) {
			fn(so.Path)
		}
	}
}

// pathsOf returns the distinct stream paths of c, as forEachPath calls
// them.
func pathsOf(c *webhooks.Consumer) []string {
	var out []string
	forEachPath(c, func(p string) { out = append(out, p) })
	return out
}

func hasPath(c *webhooks.Consumer, path string) bool {
	return path == c.PrimaryStream || slices.ContainsFunc(c.Streams, func(so webhooks.StreamOffset) bool { return so.Path == path })
}

// deadlineHeap orders scheduled consumers by deadline, then ID, and keeps
// each entry's heapPos current so it can be fixed or removed in O(log n).
type deadlineHeap []*entry

func (h deadlineHeap) Len() int { return len(h) }

func (h deadlineHeap) Less(i, j int) bool { return earlier(h[i], h[j]) }

func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapPos = int32(i)
	h[j].heapPos = int32(j)
}

func (h *deadlineHeap) Push(x any) {
	e := x.(*entry)
	e.heapPos = int32(len(*h))
	*h = append(*h, e)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.heapPos = -1
	return e
}

func earlier(a, b *entry) bool {
	if !a.deadline.Equal(b.deadline) {
		return a.deadline.Before(b.deadline)
	}
	return a.id < b.id
}

// frontier is a min-heap of positions in a deadlineHeap, used by
// DueConsumers to read the deadline heap in order without changing it.
type frontier struct {
	h   deadlineHeap
	pos []int
}

func (f *frontier) Len() int           { return len(f.pos) }
func (f *frontier) Less(i, j int) bool { return earlier(f.h[f.pos[i]], f.h[f.pos[j]]) }
func (f *frontier) Swap(i, j int)      { f.pos[i], f.pos[j] = f.pos[j], f.pos[i] }
func (f *frontier) Push(x any)         { f.pos = append(f.pos, x.(int)) }

func (f *frontier) Pop() any {
	i := f.pos[len(f.pos)-1]
	f.pos = f.pos[:len(f.pos)-1]
	return i
}
