package webhooks

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/receiver"
)

// eventsBody encodes a payload as encoding/json does, events aside.
func TestEventsBodyIsTheJSONEncoding(t *testing.T) {
	for _, p := range []*receiver.EventsPayload{
		{SubscriptionID: "s1", Stream: "/a", DeliveryID: "msg_1", Events: []json.RawMessage{json.RawMessage(`1`)}, FirstOffset: "-1", Offset: "0_1"},
		{
			SubscriptionID: "s.1", Stream: "/a/\"q\"/<&>/ü/\u2028", DeliveryID: "msg_2",
			Events:      []json.RawMessage{json.RawMessage(`{"n":1}`), json.RawMessage(`"x"`), json.RawMessage(`[1,2]`)},
			FirstOffset: "0_1", Offset: "0_9", UpToDate: true,
		},
	} {
		want, err := json.Marshal(p)
		require.NoError(t, err)
		require.Equal(t, string(want), string(eventsBody(p)))
	}
	spaced := &receiver.EventsPayload{Events: []json.RawMessage{json.RawMessage(`{ "n" : 1 }`)}}
	require.Contains(t, string(eventsBody(spaced)), `"events":[{ "n" : 1 }]`, "events as the source gave them")
}

func TestEventFilterMatch(t *testing.T) {
	f, err := compileFilter(&EventFilter{Field: "a.type", Patterns: []string{"x.*", "y.**", "z"}})
	require.NoError(t, err)
	for event, want := range map[string]bool{
		`{"a":{"type":"x.1"}}`:         true,
		`{"a":{"type":"x.1.2"}}`:       false,
		`{"a":{"type":"x"}}`:           false,
		`{"a":{"type":"y.1.2"}}`:       true,
		`{"a":{"type":"y"}}`:           false,
		`{"a":{"type":"z"}}`:           true,
		`{"a":{"ty\u0070e":"z"}}`:      true, // a key is matched decoded
		`{"a":{"type":"\u007a"}}`:      true,
		`{"a":{"Type":"z"}}`:           false, // names are case-sensitive
		`{"a":{"type":["z"]}}`:         false,
		`{"a":"z"}`:                    false,
		`{"type":"z"}`:                 false,
		`"z"`:                          false,
		`not json`:                     false,
		`{"a":{"type":"z"},"a":{}}`:    false, // the last duplicate wins, as in encoding/json
		`{"a":{"type":"x.1"}, "b": 1}`: true,
	} {
		require.Equal(t, want, f.match([]byte(event)), event)
	}
	var none *eventFilter
	require.True(t, none.match([]byte(`1`)), "no filter matches every event")
}

// A filter pattern that makes a backtracking matcher exponential matches
// in linear time: gobwas took a core for good on this one and an 81-byte
// event. The match either ends, or the test times out.
func TestEventFilterMatchIsLinear(t *testing.T) {
	f, err := compileFilter(&EventFilter{Field: "type", Patterns: []string{"*a*a*a*a*a*a*a*a*a*a*c*"}})
	require.NoError(t, err)
	for _, n := range []int{81, 64 << 10} {
		event, err := json.Marshal(map[string]string{"type": strings.Repeat("a", n)})
		require.NoError(t, err)
		require.False(t, f.match(event))
	}
	// The translation keeps gobwas's syntax and meaning.
	f, err = compileFilter(&EventFilter{Field: "type", Patterns: []string{"[!a]?", "[a-c]{x,y.*}", `d\*`, "e.**"}})
	require.NoError(t, err)
	for value, want := range map[string]bool{
		".b": true, "b.": false, "ab": false, "by.z": true, "bx": true, "dx.z": false,
		`d*`: true, "d": false, "d*x": false, "e.f.g": true, "e": false,
	} {
		event, err := json.Marshal(map[string]string{"type": value})
		require.NoError(t, err)
		require.Equal(t, want, f.match(event), value)
	}
}

// Outcomes of attempts that are not the one in flight: a failure counts
// only for the attempt in flight, a 2xx of any attempt of the batch acks
// it, and nothing of an earlier batch changes the consumer.
func TestApplyBatchFencesOutcomes(t *testing.T) {
	m := testMachine()
	m.requestTimeout = time.Second
	sub := &Subscription{Delivery: DeliveryEvents, Events: &EventsOptions{MaxBatchEvents: 10}}
	tail := StreamInfo{Path: "/a", Tail: "0000000000000000_0000000000000005"}
	c := newConsumer("s", "/a", OffsetNone, t0)
	require.Equal(t, changeSend, pushMech.start(m, c, sub, tails{"/a": tail}, t0))
	require.Equal(t, ReadLimit{MaxEvents: 10, Until: tail.Tail}, c.Batch)
	first := attemptResult{epoch: c.Epoch, deliveryID: c.WakeID, attempt: 1, failure: statusFailure(503)}
	require.Equal(t, changeSave, m.applyBatch(c, sub, first, nil, t0))
	require.Equal(t, changeSend, m.onDue(c, sub, nil, c.Deadline), "the retry")
	require.Equal(t, 2, c.Attempt)

	require.Equal(t, noChange, m.applyBatch(c, sub, first, nil, t0), "a failure of an attempt no longer in flight")
	stale := attemptResult{epoch: c.Epoch - 1, deliveryID: c.WakeID, attempt: 2, next: tail.Tail}
	require.Equal(t, noChange, m.applyBatch(c, sub, stale, nil, t0), "another batch's 2xx")

	late := first
	late.failure, late.next = nil, tail.Tail
	require.Equal(t, changeSave, m.applyBatch(c, sub, late, tails{"/a": tail}, t0), "a late 2xx of the first attempt acks the batch")
	require.Equal(t, StateIdle, c.State)
	require.Equal(t, tail.Tail, c.Streams[0].Offset)
	require.Equal(t, noChange, m.applyBatch(c, sub, late, tails{"/a": tail}, t0), "and only once")
}

// The feed's reload compares subscriptions by value, options included.
func TestSameSubscriptionComparesOptions(t *testing.T) {
	a := &Subscription{ID: "s", Pattern: "/a", CreatedAt: t0, Delivery: DeliveryEvents, Events: dataEvents()}
	require.True(t, sameSubscription(a, a.Clone()), "equal, not the same pointers")
	b := a.Clone()
	b.Events.Headers["X-B"] = "changed"
	require.False(t, sameSubscription(a, b))
	b = a.Clone()
	b.Status = StatusDisabled
	require.False(t, sameSubscription(a, b))
}

// The log's writer sends the Store only the attempts it would keep, in
// their order.
func TestNewestAttempts(t *testing.T) {
	var in []*DeliveryAttempt
	for i, id := range []string{"a", "b", "a", "a", "b", "a"} {
		in = append(in, &DeliveryAttempt{ConsumerID: id, Attempt: i})
	}
	var got []int
	for _, a := range newest(in, 2) {
		got = append(got, a.Attempt)
	}
	require.Equal(t, []int{1, 3, 4, 5}, got)
	require.Empty(t, newest(in, 0))
}
