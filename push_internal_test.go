package webhooks

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// eventsBody encodes a payload as encoding/json does, events aside.
func TestEventsBodyIsTheJSONEncoding(t *testing.T) {
	for _, p := range []*EventsPayload{
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
	spaced := &EventsPayload{Events: []json.RawMessage{json.RawMessage(`{ "n" : 1 }`)}}
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
