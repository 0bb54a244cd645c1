package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// testListConsumers pages through one subscription's consumers, beside
// subscriptions whose consumer IDs share its prefix or sort next to its.
func testListConsumers(t *testing.T, s webhooks.Store) {
	// Byte-wise, "a-:…" < "a.b:…" < "a:…" < "b:…": a store that selects
	// by an ID prefix, or scans a range of IDs, finds the neighbours too.
	mustCreateSub(t, s, newSub("a"), newSub("a.b"), newSub("a-"), newSub("b"))
	for _, sub := range []string{"a.b", "a-", "b"} {
		mustCreate(t, s, newConsumer(sub, "/"), newConsumer(sub, "/p/1 ü"))
	}
	states := []webhooks.ConsumerState{webhooks.StateIdle, webhooks.StateLive, webhooks.StateFailed}
	const n = 37
	byState := make(map[webhooks.ConsumerState][]string)
	var all []string
	for i := range n {
		// Created out of ID order, with paths that PathEscape encodes.
		c := newConsumer("a", fmt.Sprintf("/p/%d ü", i*7%n))
		c.State = states[i%len(states)]
		mustCreate(t, s, c)
		all = append(all, c.ID)
		byState[c.State] = append(byState[c.State], c.ID)
	}
	full := fullConsumer("a", "/full")
	full.State = webhooks.StateLive
	mustCreate(t, s, full)
	all = append(all, full.ID)
	byState[full.State] = append(byState[full.State], full.ID)
	slices.Sort(all)
	for _, l := range byState {
		slices.Sort(l)
	}

	for _, limit := range []int{1, 2, 5, len(all) - 1, len(all), len(all) + 1, 1000} {
		require.Equal(t, all, listAll(t, s, "a", "", limit), "every consumer once, in ID order, with limit %d", limit)
	}
	for st, want := range byState {
		for _, limit := range []int{1, 4, 100} {
			require.Equal(t, want, listAll(t, s, "a", st, limit), "consumers in %s, limit %d", st, limit)
		}
	}
	require.Empty(t, listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "a", State: webhooks.StateWaking, Limit: 10}), "a state no consumer is in")
	require.Equal(t, all[:3], ids(listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "a", After: "a:", Limit: 3})),
		"After before every ID")
	require.Empty(t, listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "a", After: all[len(all)-1], Limit: 10}), "After the last ID")
	require.Empty(t, listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "a", After: "b", Limit: 10}), "After beyond every ID")
	require.Empty(t, listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "none", Limit: 10}), "no such subscription")
	for _, sub := range []string{"a.b", "a-", "b"} {
		want := []string{webhooks.ConsumerID(sub, "/"), webhooks.ConsumerID(sub, "/p/1 ü")}
		slices.Sort(want)
		require.Equal(t, want, listAll(t, s, sub, "", 1), "subscription %s", sub)
		require.Equal(t, want, listAll(t, s, sub, webhooks.StateIdle, 10), "subscription %s", sub)
	}

	// Whole consumers, which the caller owns.
	got := listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "a", After: full.ID[:len(full.ID)-1], Limit: 1})
	requireConsumers(t, []*webhooks.Consumer{full}, got)
	got[0].Streams[0].Offset = "scribbled"
	got[0].TriggeredBy[0] = "/scribbled"
	requireConsumer(t, full, mustGet(t, s, full.ID), "the stored consumer changed after mutating one ListConsumers returned")

	// After an ID no longer stored; after state changes and deletes.
	mustDelete(t, s, all[4])
	require.Equal(t, all[5:8], ids(listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: "a", After: all[4], Limit: 3})),
		"After a deleted consumer's ID")
	moved := all[5]
	mustUpdate(t, s, moved, func(c *webhooks.Consumer) { c.State = webhooks.StateWaking })
	require.Equal(t, []string{moved}, listAll(t, s, "a", webhooks.StateWaking, 1), "a saved state is listed by it")
	for st, want := range byState {
		want = slices.DeleteFunc(slices.Clone(want), func(id string) bool { return id == all[4] || id == moved })
		if st == webhooks.StateWaking {
			want = sorted(append(want, moved))
		}
		require.Equal(t, want, listAll(t, s, "a", st, 3), "consumers in %s after a delete and a state change", st)
	}
	require.NoError(t, s.DeleteSubscription(t.Context(), "a"))
	require.Empty(t, listAll(t, s, "a", "", 10), "after DeleteSubscription")
	require.Len(t, listAll(t, s, "a.b", "", 10), 2)
}

func sorted(ids []string) []string {
	slices.Sort(ids)
	return ids
}

func listPage(t *testing.T, s webhooks.Store, p *webhooks.ListConsumersParams) []*webhooks.Consumer {
	t.Helper()
	cs, err := s.ListConsumers(t.Context(), p)
	require.NoError(t, err)
	require.LessOrEqual(t, len(cs), p.Limit, "ListConsumers returned more than its limit")
	return cs
}

// listAll pages through the consumers of sub in state, if set, limit at a
// time, and returns their IDs. Every page but the last is full, and each
// starts after the last of the one before.
func listAll(t *testing.T, s webhooks.Store, sub string, state webhooks.ConsumerState, limit int) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page := ids(listPage(t, s, &webhooks.ListConsumersParams{SubscriptionID: sub, State: state, After: after, Limit: limit}))
		out = append(out, page...)
		if len(page) < limit {
			return out
		}
		require.Less(t, after, page[0], "a page starts at or before the ID it follows")
		after = page[len(page)-1]
		require.LessOrEqual(t, len(out), 10_000, "ListConsumers pages without end")
	}
}
