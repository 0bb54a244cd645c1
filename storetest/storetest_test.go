package storetest_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunDurable runs RunDurable against a store that snapshots a memstore
// to a file on Close, so that the durable suite itself is exercised.
func TestRunDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) webhooks.Store { return openSnapshot(t, dir, nil) })
}

// TestRunShared runs RunShared against one memstore as both handles, so
// that the shared suite itself is exercised.
func TestRunShared(t *testing.T) {
	storetest.RunShared(t, func(*testing.T) (webhooks.Store, webhooks.Store) {
		s := memstore.New()
		return s, s
	})
}

// mutants are stores broken in one way each, with the subtests that must
// catch the breakage. TestSuiteCatchesMutants runs the suite against each
// in a child process and expects those subtests to fail.
var mutants = map[string]struct {
	durable bool
	open    func(t *testing.T, dir string) webhooks.Store
	openTwo func(t *testing.T) (webhooks.Store, webhooks.Store) // set: run RunShared
	caught  []string
	says    string // in the output too, if set
}{
	"separate-handles": {
		openTwo: func(*testing.T) (webhooks.Store, webhooks.Store) { return memstore.New(), memstore.New() },
		caught:  []string{"SeesWrites", "NoLostUpdate", "DeleteCascade", "CreateSameID", "SigningKey", "WebhookKeys", "Feed/Create", "Feed/Delete"},
	},
	"silent-feed": {
		openTwo: func(*testing.T) (webhooks.Store, webhooks.Store) {
			s := &silentFeed{memstore.New()}
			return s, s
		},
		caught: []string{"Feed/Create", "Feed/Delete"},
	},

	"locks-per-handle": {
		openTwo: func(*testing.T) (webhooks.Store, webhooks.Store) {
			s := memstore.New()
			return &lockedHere{lostUpdate: lostUpdate{s}}, &lockedHere{lostUpdate: lostUpdate{s}}
		},
		caught: []string{"NoLostUpdate"},
	},
	"lost-update": {
		open:   func(*testing.T, string) webhooks.Store { return &lostUpdate{memstore.New()} },
		caught: []string{"Concurrent/NoLostUpdate"},
	},
	"no-cascade": {
		open:   func(*testing.T, string) webhooks.Store { return newNoCascade() },
		caught: []string{"DeleteSubscriptionCascade", "Concurrent/DeleteCascade", "Model"},
	},
	"unordered-by-stream": {
		open:   func(*testing.T, string) webhooks.Store { return &reversedByStream{memstore.New()} },
		caught: []string{"ConsumersByStream", "Model"},
	},
	"latest-due-first": {
		open:   func(*testing.T, string) webhooks.Store { return &latestDueFirst{memstore.New()} },
		caught: []string{"DueConsumers", "Model"},
	},
	"aliasing": {
		open:   func(*testing.T, string) webhooks.Store { return &aliasing{Store: memstore.New()} },
		caught: []string{"CallerOwnsConsumers"},
	},
	"microseconds": {
		open:   func(*testing.T, string) webhooks.Store { return &microseconds{memstore.New()} },
		caught: []string{"ConsumerFields", "DueConsumers"},
	},
	"racy-key": {
		open:   func(*testing.T, string) webhooks.Store { return &racyKey{Store: memstore.New()} },
		caught: []string{"Concurrent/SigningKey"},
	},
	"ds-unfenced": {
		open:   func(*testing.T, string) webhooks.Store { return &dsUnfenced{memstore.New()} },
		caught: []string{"DS/Fencing"},
	},
	"ds-claim-ignores-holder": {
		open:   func(*testing.T, string) webhooks.Store { return &dsClaimIgnoresHolder{memstore.New()} },
		caught: []string{"DS/Claim", "DS/ClaimRace"},
	},
	"ds-tombstone-forgets-generation": {
		open:   func(*testing.T, string) webhooks.Store { return &dsForgetsGeneration{memstore.New()} },
		caught: []string{"DS/Tombstone"},
	},
	"ds-links-reversed": {
		open:   func(*testing.T, string) webhooks.Store { return &dsLinksReversed{memstore.New()} },
		caught: []string{"DS/LinksPaging"},
	},
	"lease-always-granted": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("always-granted") },
		caught: []string{"Lease/HeldByAnother", "Lease/Renew", "Lease/Expiry", "Lease/Release", "Lease/Concurrent"},
	},
	"lease-never-expires": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("never-expires") },
		caught: []string{"Lease/Expiry"},
	},
	"lease-expires-late": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("expires-late") },
		caught: []string{"Lease/Expiry"},
	},
	"lease-not-renewed": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("not-renewed") },
		caught: []string{"Lease/HeldByAnother", "Lease/Renew"},
	},
	"lease-not-released": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("not-released") },
		caught: []string{"Lease/Release"},
	},
	"lease-released-by-anyone": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("released-by-anyone") },
		caught: []string{"Lease/Release"},
	},
	"lease-racy": {
		open:   func(*testing.T, string) webhooks.Store { return newFlawedLease("racy") },
		caught: []string{"Lease/Concurrent"},
	},
	"forgets-secrets": {
		durable: true,
		open: func(t *testing.T, dir string) webhooks.Store {
			return openSnapshot(t, dir, func(s *snapshot) {
				for _, sub := range s.Subs {
					sub.Secret = ""
				}
			})
		},
		caught: []string{"Everything", "Deletes"},
	},
	"forgets-webhook-keys": {
		durable: true,
		open: func(t *testing.T, dir string) webhooks.Store {
			return openSnapshot(t, dir, func(s *snapshot) { s.WebhookKeys = nil })
		},
		caught: []string{"WebhookKeys"},
	},
	"not-a-closer": {
		durable: true,
		open:    func(*testing.T, string) webhooks.Store { return memstore.New() },
		caught:  []string{"Empty", "Everything", "Updates", "Deletes"},
		says:    "RunDurable needs a Store that implements io.Closer, and *memstore.Store does not",
	},
	"keeps-first-snapshot": {
		durable: true,
		open: func(t *testing.T, dir string) webhooks.Store {
			st := openSnapshot(t, dir, nil)
			_, err := os.Stat(st.file)
			st.readOnly = err == nil
			return st
		},
		caught: []string{"Updates", "Deletes"},
	},
}

func TestSuiteCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutant$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "STORETEST_MUTANT="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite passed against mutant %s:\n%s", name, out)
			for _, sub := range m.caught {
				require.Contains(t, string(out), "--- FAIL: TestMutant/"+sub+" ", "mutant %s not caught by %s", name, sub)
			}
			require.Contains(t, string(out), m.says)
		})
	}
}

// TestMutant runs the suite against the mutant STORETEST_MUTANT names, in
// the child process of TestSuiteCatchesMutants.
func TestMutant(t *testing.T) {
	name := os.Getenv("STORETEST_MUTANT")
	if name == "" {
		t.Skip("run by TestSuiteCatchesMutants")
	}
	m, ok := mutants[name]
	require.True(t, ok, "unknown mutant %q", name)
	switch {
	case m.openTwo != nil:
		storetest.RunShared(t, m.openTwo)
	case m.durable:
		storetest.RunDurable(t, m.open)
	default:
		storetest.Run(t, func(t *testing.T) webhooks.Store { return m.open(t, "") })
	}
}

// lostUpdate reads, runs fn and writes without holding the consumer.
type lostUpdate struct{ *memstore.Store }

func (s *lostUpdate) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	c, err := s.GetConsumer(ctx, id)
	if err != nil {
		return nil, err
	}
	action, err := fn(c)
	if err != nil {
		return nil, err
	}
	return s.Store.UpdateConsumer(ctx, id, func(stored *webhooks.Consumer) (webhooks.UpdateAction, error) {
		*stored = *c
		return action, nil
	})
}

// silentFeed watches without reporting a change.
type silentFeed struct{ *memstore.Store }

func (s *silentFeed) WatchSubscriptions(ctx context.Context, changed func()) error {
	changed()
	<-ctx.Done()
	return ctx.Err()
}

// lockedHere is lostUpdate serialized within one handle only, as a store
// that locks a consumer in its process but not in the shared database.
type lockedHere struct {
	mu sync.Mutex
	lostUpdate
}

func (s *lockedHere) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lostUpdate.UpdateConsumer(ctx, id, fn)
}

// noCascade keeps subscriptions apart from the memstore that holds the
// consumers, so deleting one leaves its consumers behind.
type noCascade struct {
	*memstore.Store
	mu   sync.Mutex
	subs map[string]*webhooks.Subscription
}

func newNoCascade() *noCascade {
	return &noCascade{Store: memstore.New(), subs: make(map[string]*webhooks.Subscription)}
}

func (s *noCascade) CreateSubscription(ctx context.Context, sub *webhooks.Subscription) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[sub.ID] != nil {
		return webhooks.ErrSubscriptionExists
	}
	s.subs[sub.ID] = sub.Clone()
	if err := s.Store.CreateSubscription(ctx, sub); err != nil && !errors.Is(err, webhooks.ErrSubscriptionExists) {
		return err
	}
	return nil
}

func (s *noCascade) GetSubscription(_ context.Context, id string) (*webhooks.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub := s.subs[id]; sub != nil {
		return sub.Clone(), nil
	}
	return nil, webhooks.ErrSubscriptionNotFound
}

func (s *noCascade) ListSubscriptions(context.Context) ([]*webhooks.Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*webhooks.Subscription
	for _, id := range slices.Sorted(maps.Keys(s.subs)) {
		out = append(out, s.subs[id].Clone())
	}
	return out, nil
}

func (s *noCascade) DeleteSubscription(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[id] == nil {
		return webhooks.ErrSubscriptionNotFound
	}
	delete(s.subs, id)
	return nil
}

func (s *noCascade) CreateConsumer(ctx context.Context, c *webhooks.Consumer) error {
	if _, err := s.GetSubscription(ctx, c.SubscriptionID); err != nil {
		return err
	}
	return s.Store.CreateConsumer(ctx, c)
}

// reversedByStream returns ConsumersByStream in descending ID order.
type reversedByStream struct{ *memstore.Store }

func (s *reversedByStream) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	cs, err := s.Store.ConsumersByStream(ctx, path)
	slices.Reverse(cs)
	return cs, err
}

// latestDueFirst returns the latest due consumers first.
type latestDueFirst struct{ *memstore.Store }

func (s *latestDueFirst) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	cs, err := s.Store.DueConsumers(ctx, now, 1<<20)
	slices.Reverse(cs)
	return cs[:min(limit, len(cs))], err
}

// aliasing hands out the same value to every GetConsumer until it changes.
type aliasing struct {
	*memstore.Store
	mu    sync.Mutex
	cache map[string]*webhooks.Consumer
}

func (s *aliasing) GetConsumer(ctx context.Context, id string) (*webhooks.Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cache[id]; c != nil {
		return c, nil
	}
	c, err := s.Store.GetConsumer(ctx, id)
	if err == nil {
		if s.cache == nil {
			s.cache = make(map[string]*webhooks.Consumer)
		}
		s.cache[id] = c
	}
	return c, err
}

func (s *aliasing) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	s.mu.Lock()
	delete(s.cache, id)
	s.mu.Unlock()
	return s.Store.UpdateConsumer(ctx, id, fn)
}

// microseconds stores times rounded down to the microsecond.
type microseconds struct{ *memstore.Store }

func truncate(c *webhooks.Consumer) {
	c.Deadline = c.Deadline.Truncate(time.Microsecond)
	c.FailingSince = c.FailingSince.Truncate(time.Microsecond)
	c.CreatedAt = c.CreatedAt.Truncate(time.Microsecond)
	c.UpdatedAt = c.UpdatedAt.Truncate(time.Microsecond)
}

func (s *microseconds) CreateConsumer(ctx context.Context, c *webhooks.Consumer) error {
	c = c.Clone()
	truncate(c)
	return s.Store.CreateConsumer(ctx, c)
}

func (s *microseconds) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	return s.Store.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		action, err := fn(c)
		truncate(c)
		return action, err
	})
}

// racyKey checks for a stored key and stores one in two steps.
type racyKey struct {
	*memstore.Store
	mu  sync.Mutex
	key []byte
	// window counts callers that found no key and have not stored theirs.
	window atomic.Int32
}

func (s *racyKey) LoadOrStoreSigningKey(_ context.Context, key []byte) ([]byte, error) {
	s.mu.Lock()
	stored := s.key
	s.mu.Unlock()
	if stored != nil {
		return slices.Clone(stored), nil
	}
	// Hold the window open until a second caller is in it too, so that the
	// race happens however the machine schedules the callers; a caller
	// alone gives up after a while.
	s.window.Add(1)
	for i := 0; s.window.Load() < 2 && i < 1_000_000; i++ {
		runtime.Gosched()
	}
	s.mu.Lock()
	s.key = slices.Clone(key)
	s.mu.Unlock()
	return slices.Clone(key), nil
}

// flawedLease keeps leases itself, with the flaw it names.
type flawedLease struct {
	*memstore.Store
	flaw   string
	mu     sync.Mutex
	leases map[string]flawedLeaseEntry
	// window counts the racy callers that have checked and not granted.
	window atomic.Int32
}

type flawedLeaseEntry struct {
	holder string
	until  time.Time
}

func newFlawedLease(flaw string) *flawedLease {
	return &flawedLease{Store: memstore.New(), flaw: flaw, leases: make(map[string]flawedLeaseEntry)}
}

func (s *flawedLease) TryLease(_ context.Context, name, holder string, now, until time.Time) (bool, error) {
	s.mu.Lock()
	cur, held := s.leases[name]
	if s.flaw == "racy" {
		// Checks, then grants under a second hold of the lock. The window
		// stays open until a second caller has checked too, so that the
		// race happens however a busy machine schedules the callers; a
		// caller alone gives up after a while.
		s.window.Add(1)
		s.mu.Unlock()
		for i := 0; s.window.Load() < 2 && i < 1_000_000; i++ {
			runtime.Gosched()
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	free := !held || !cur.until.After(now)
	switch s.flaw {
	case "always-granted":
		free = true
	case "never-expires":
		free = !held
	case "expires-late":
		free = !held || cur.until.Before(now)
	}
	mine := held && cur.holder == holder && s.flaw != "not-renewed"
	if !free && !mine {
		return false, nil
	}
	s.leases[name] = flawedLeaseEntry{holder: holder, until: until}
	return true, nil
}

func (s *flawedLease) ReleaseLease(_ context.Context, name, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.flaw == "not-released":
	case s.flaw == "released-by-anyone", s.leases[name].holder == holder:
		delete(s.leases, name)
	}
	return nil
}

// snapshot is what snapshotStore writes to its file.
type snapshot struct {
	Subs      []*webhooks.Subscription // with their health
	Consumers []*webhooks.Consumer
	// Attempts are each consumer's, oldest first, by consumer ID: their
	// MarshalBinary, which gob uses, leaves the ID out.
	Attempts map[string][]*webhooks.DeliveryAttempt
	Key      []byte
	// WebhookKeys is the webhooks.WebhookKeyStore's key set.
	WebhookKeys []byte
}

// snapshotStore is a memstore loaded from a file when opened and written
// back when closed: the simplest durable Store.
type snapshotStore struct {
	*memstore.Store
	noDS
	file     string
	onWrite  func(*snapshot) // breaks the snapshot, for mutants
	readOnly bool            // never writes, for mutants

	mu  sync.Mutex
	ids map[string]bool // every consumer ID ever created; some deleted
}

// noDS hides memstore's webhooks.DSStore from snapshotStore, which does not
// snapshot it: its PutDSSubscription, at the same depth as memstore's,
// makes the name ambiguous, so snapshotStore lacks the method and the
// durable DS case skips.
type noDS struct{}

func (noDS) PutDSSubscription() {}

func openSnapshot(t *testing.T, dir string, onWrite func(*snapshot)) *snapshotStore {
	ctx := t.Context()
	s := &snapshotStore{Store: memstore.New(), file: filepath.Join(dir, "store.gob"), onWrite: onWrite, ids: make(map[string]bool)}
	data, err := os.ReadFile(s.file)
	if errors.Is(err, os.ErrNotExist) {
		return s
	}
	require.NoError(t, err)
	var snap snapshot
	require.NoError(t, gob.NewDecoder(bytes.NewReader(data)).Decode(&snap))
	for _, sub := range snap.Subs {
		require.NoError(t, s.Store.CreateSubscription(ctx, sub))
		_, err := s.UpdateHealth(ctx, sub.ID, func(h *webhooks.SubscriptionHealth) { *h = sub.Health })
		require.NoError(t, err)
	}
	for _, c := range snap.Consumers {
		require.NoError(t, s.CreateConsumer(ctx, c))
	}
	for id, as := range snap.Attempts {
		for _, a := range as {
			a.ConsumerID = id
		}
		require.NoError(t, s.AppendAttempts(ctx, as, len(as)))
	}
	if snap.Key != nil {
		_, err := s.LoadOrStoreSigningKey(ctx, snap.Key)
		require.NoError(t, err)
	}
	if snap.WebhookKeys != nil {
		_, err := s.UpdateWebhookKeys(ctx, func([]byte) ([]byte, error) { return snap.WebhookKeys, nil })
		require.NoError(t, err)
	}
	return s
}

var _ io.Closer = (*snapshotStore)(nil)

func (s *snapshotStore) CreateConsumer(ctx context.Context, c *webhooks.Consumer) error {
	err := s.Store.CreateConsumer(ctx, c)
	if err == nil {
		s.mu.Lock()
		s.ids[c.ID] = true
		s.mu.Unlock()
	}
	return err
}

// Close writes the snapshot. The stored key is read back by offering an
// empty key, which memstore refuses when it has none.
func (s *snapshotStore) Close() error {
	if s.readOnly {
		return nil
	}
	ctx := context.Background()
	snap := snapshot{Attempts: make(map[string][]*webhooks.DeliveryAttempt)}
	var err error
	if snap.Subs, err = s.ListSubscriptions(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	ids := slices.Sorted(maps.Keys(s.ids))
	s.mu.Unlock()
	for _, id := range ids {
		c, err := s.GetConsumer(ctx, id)
		if errors.Is(err, webhooks.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		snap.Consumers = append(snap.Consumers, c)
		as, err := s.ListAttempts(ctx, id, math.MaxInt)
		if err != nil {
			return err
		}
		slices.Reverse(as)
		snap.Attempts[id] = as
	}
	snap.Key, _ = s.LoadOrStoreSigningKey(ctx, nil)
	if snap.WebhookKeys, err = s.WebhookKeys(ctx); err != nil {
		return err
	}
	if s.onWrite != nil {
		s.onWrite(&snap)
	}
	// Gob, not JSON, keeps strings that are not UTF-8.
	var data bytes.Buffer
	if err := gob.NewEncoder(&data).Encode(&snap); err != nil {
		return err
	}
	return os.WriteFile(s.file, data.Bytes(), 0o600)
}

// dsUnfenced makes every ack and release the current wake's, lease
// included, before the store checks them.
type dsUnfenced struct{ *memstore.Store }

func (s *dsUnfenced) unfence(ctx context.Context, id string, gen int64, wakeID string) {
	_, _ = s.UpdateDSCursor(ctx, id, func(c *webhooks.DSCursor) error {
		c.Generation, c.WakeID, c.LeaseExpiresAt = gen, wakeID, time.Time{}
		return nil
	})
}

func (s *dsUnfenced) AckDS(ctx context.Context, p *webhooks.AckDSParams) (*webhooks.DSCursor, error) {
	s.unfence(ctx, p.ID, p.Generation, p.WakeID)
	return s.Store.AckDS(ctx, p)
}

func (s *dsUnfenced) ReleaseDS(ctx context.Context, p *webhooks.ReleaseDSParams) (*webhooks.DSCursor, error) {
	s.unfence(ctx, p.ID, p.Generation, p.WakeID)
	return s.Store.ReleaseDS(ctx, p)
}

// dsClaimIgnoresHolder lets a claim take a live lease from its holder.
type dsClaimIgnoresHolder struct{ *memstore.Store }

func (s *dsClaimIgnoresHolder) ClaimDS(ctx context.Context, p *webhooks.ClaimDSParams) (*webhooks.DSCursor, error) {
	_, _ = s.UpdateDSCursor(ctx, p.ID, func(c *webhooks.DSCursor) error { c.Holder = ""; return nil })
	return s.Store.ClaimDS(ctx, p)
}

// dsForgetsGeneration deletes a subscription's generations with it, so
// that a successor starts again from 0.
type dsForgetsGeneration struct{ *memstore.Store }

func (s *dsForgetsGeneration) DeleteDSSubscription(ctx context.Context, id string) error {
	_, _ = s.UpdateDSCursor(ctx, id, func(c *webhooks.DSCursor) error { c.Generation = 0; return nil })
	return s.Store.DeleteDSSubscription(ctx, id)
}

// dsLinksReversed returns links in descending path order.
type dsLinksReversed struct{ *memstore.Store }

func (s *dsLinksReversed) ListDSLinks(ctx context.Context, p *webhooks.ListDSLinksParams) ([]webhooks.DSLink, error) {
	ls, err := s.Store.ListDSLinks(ctx, p)
	slices.Reverse(ls)
	return ls, err
}
