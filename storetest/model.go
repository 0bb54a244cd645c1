package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// model is what a store must hold after the operations testModel applied.
type model struct {
	subs map[string]bool
	cons map[string]*webhooks.Consumer
}

var (
	modelSubs  = []string{"m0", "m1", "m2", "m3"}
	modelPaths = []string{"/p0", "/p1", "/p2", "/p3", "/p4", "/p5", "/p6", "/p7"}
	modelZones = []*time.Location{time.UTC, zone, time.FixedZone("west", -8*60*60)}
	modelState = []webhooks.ConsumerState{webhooks.StateIdle, webhooks.StateWaking, webhooks.StateLive}
	errModel   = errors.New("storetest: update function failed on purpose")
)

// testModel applies random operations to the store and to a model, and
// compares every read with the model. Few deadline values make many ties.
func testModel(t *testing.T, s webhooks.Store) {
	seed := rand.Uint64()
	if env := os.Getenv("STORETEST_SEED"); env != "" {
		var err error
		seed, err = strconv.ParseUint(env, 10, 64)
		require.NoError(t, err, "STORETEST_SEED")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("storetest: replay with STORETEST_SEED=%d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed))
	m := &model{subs: make(map[string]bool), cons: make(map[string]*webhooks.Consumer)}
	const steps = 1500
	for step := range steps {
		switch r := rng.IntN(20); {
		case r < 2:
			m.createSub(t, s, rng)
		case r < 3:
			m.deleteSub(t, s, rng)
		case r < 8:
			m.createConsumer(t, s, rng)
		default:
			m.update(t, s, rng)
		}
		if step%10 == 0 || step == steps-1 {
			m.check(t, s, rng, step)
		}
	}
}

func (m *model) createSub(t *testing.T, s webhooks.Store, rng *rand.Rand) {
	id := modelSubs[rng.IntN(len(modelSubs))]
	err := s.CreateSubscription(t.Context(), newSub(id))
	if m.subs[id] {
		require.ErrorIs(t, err, webhooks.ErrSubscriptionExists)
		return
	}
	require.NoError(t, err)
	m.subs[id] = true
}

func (m *model) deleteSub(t *testing.T, s webhooks.Store, rng *rand.Rand) {
	id := modelSubs[rng.IntN(len(modelSubs))]
	err := s.DeleteSubscription(t.Context(), id)
	if !m.subs[id] {
		require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
		return
	}
	require.NoError(t, err)
	delete(m.subs, id)
	maps.DeleteFunc(m.cons, func(_ string, c *webhooks.Consumer) bool { return c.SubscriptionID == id })
}

func (m *model) createConsumer(t *testing.T, s webhooks.Store, rng *rand.Rand) {
	c := newConsumer(modelSubs[rng.IntN(len(modelSubs))], modelPaths[rng.IntN(len(modelPaths))])
	c.State = modelState[rng.IntN(len(modelState))]
	c.Streams = modelStreams(rng)
	if rng.IntN(2) == 0 {
		c.Deadline = modelDeadline(rng)
	}
	err := s.CreateConsumer(t.Context(), c)
	switch {
	case !m.subs[c.SubscriptionID]:
		require.ErrorIs(t, err, webhooks.ErrSubscriptionNotFound)
	case m.cons[c.ID] != nil:
		require.ErrorIs(t, err, webhooks.ErrConsumerExists)
	default:
		require.NoError(t, err)
		m.cons[c.ID] = c
	}
}

func (m *model) update(t *testing.T, s webhooks.Store, rng *rand.Rand) {
	id := webhooks.ConsumerID(modelSubs[rng.IntN(len(modelSubs))], modelPaths[rng.IntN(len(modelPaths))])
	want := m.cons[id]
	op := rng.IntN(8)
	d := modelDeadline(rng)
	streams := modelStreams(rng)
	st := modelState[rng.IntN(len(modelState))]
	mutate := func(c *webhooks.Consumer) {
		switch op {
		case 0, 1:
			c.Deadline = d
		case 2:
			c.Deadline = time.Time{}
		case 3:
			c.State = st
		case 4:
			c.Streams = slices.Clone(streams)
		default:
			c.Epoch++
			c.WakeID = fmt.Sprintf("w%d", c.Epoch)
			c.Deadline = d
			c.State = st
		}
	}
	action := webhooks.UpdateSave
	var fnErr error
	switch rng.IntN(10) {
	case 0:
		action = webhooks.UpdateDelete
	case 1:
		action = webhooks.UpdateNone
	case 2:
		fnErr = errModel
	}
	got, err := s.UpdateConsumer(t.Context(), id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		assertConsumer(t, want, c, "fn gets the stored consumer")
		mutate(c)
		return action, fnErr
	})
	switch {
	case want == nil:
		require.ErrorIs(t, err, webhooks.ErrConsumerNotFound)
	case fnErr != nil:
		require.ErrorIs(t, err, fnErr)
	case action == webhooks.UpdateDelete:
		require.NoError(t, err)
		require.Nil(t, got)
		delete(m.cons, id)
	case action == webhooks.UpdateSave:
		want = want.Clone()
		mutate(want)
		m.cons[id] = want
		fallthrough
	default:
		require.NoError(t, err)
		requireConsumer(t, want, got, "UpdateConsumer returns the consumer as stored")
	}
}

// check compares every read of the store with the model.
func (m *model) check(t *testing.T, s webhooks.Store, rng *rand.Rand, step int) {
	ctx := t.Context()
	when := fmt.Sprintf("after step %d", step)

	subs, err := s.ListSubscriptions(ctx)
	require.NoError(t, err)
	var gotSubs []string
	for _, sub := range subs {
		gotSubs = append(gotSubs, sub.ID)
	}
	require.Equal(t, slices.Sorted(maps.Keys(m.subs)), gotSubs, "ListSubscriptions %s", when)

	for _, sub := range modelSubs {
		for _, p := range modelPaths {
			id := webhooks.ConsumerID(sub, p)
			got, err := s.GetConsumer(ctx, id)
			if want := m.cons[id]; want == nil {
				require.ErrorIs(t, err, webhooks.ErrConsumerNotFound, "GetConsumer(%s) %s", id, when)
			} else {
				require.NoError(t, err)
				requireConsumer(t, want, got, "GetConsumer(%s) %s", id, when)
			}
		}
	}

	for _, p := range modelPaths {
		var want []*webhooks.Consumer
		for _, c := range m.cons {
			if c.PrimaryStream == p || slices.ContainsFunc(c.Streams, func(so webhooks.StreamOffset) bool { return so.Path == p }) {
				want = append(want, c)
			}
		}
		slices.SortFunc(want, func(a, b *webhooks.Consumer) int { return strings.Compare(a.ID, b.ID) })
		got, err := s.ConsumersByStream(ctx, p)
		require.NoError(t, err)
		requireConsumers(t, want, got, "ConsumersByStream(%s) %s", p, when)
	}

	var sched []*webhooks.Consumer
	counts := make(map[webhooks.ConsumerState]int)
	for _, c := range m.cons {
		counts[c.State]++
		if !c.Deadline.IsZero() {
			sched = append(sched, c)
		}
	}
	requireCounts(t, s, counts)
	slices.SortFunc(sched, func(a, b *webhooks.Consumer) int { return a.Deadline.Compare(b.Deadline) })
	if len(sched) == 0 {
		requireNext(t, s, time.Time{}, when)
	} else {
		requireNext(t, s, sched[0].Deadline, when)
	}

	// Equal deadlines may come in any order, so compare each result's
	// deadline with the model's at its position, and its value with the
	// model's for its ID.
	now := t0.Add(time.Duration(rng.IntN(8)-1) * time.Second).In(modelZones[rng.IntN(len(modelZones))])
	limit := 1 + rng.IntN(len(modelSubs)*len(modelPaths))
	var dueAll []*webhooks.Consumer
	for _, c := range sched {
		if !c.Deadline.After(now) {
			dueAll = append(dueAll, c)
		}
	}
	got, err := s.DueConsumers(ctx, now, limit)
	require.NoError(t, err)
	require.Len(t, got, min(limit, len(dueAll)), "DueConsumers(%v, %d) %s: %v", now, limit, when, ids(got))
	seen := make(map[string]bool)
	for i, c := range got {
		require.False(t, seen[c.ID], "DueConsumers %s returned %s twice", when, c.ID)
		seen[c.ID] = true
		requireConsumer(t, m.cons[c.ID], c, "DueConsumers %s", when)
		require.True(t, c.Deadline.Equal(dueAll[i].Deadline), "DueConsumers(%v, %d) %s: result %d has deadline %v, want %v",
			now, limit, when, i, c.Deadline, dueAll[i].Deadline)
	}
}

// modelDeadline returns one of six instants, in one of several locations.
func modelDeadline(rng *rand.Rand) time.Time {
	return t0.Add(time.Duration(rng.IntN(6)) * time.Second).In(modelZones[rng.IntN(len(modelZones))])
}

// modelStreams returns up to three of the model's paths, maybe repeated.
func modelStreams(rng *rand.Rand) []webhooks.StreamOffset {
	out := make([]webhooks.StreamOffset, rng.IntN(4))
	for i := range out {
		out[i] = webhooks.StreamOffset{Path: modelPaths[rng.IntN(len(modelPaths))], Offset: strconv.Itoa(rng.IntN(100))}
	}
	return out
}
