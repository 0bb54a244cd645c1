package webhooks

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dataEvents sets every field of EventsOptions.
func dataEvents() *EventsOptions {
	return &EventsOptions{
		MaxBatchEvents: 100,
		MaxBatchBytes:  -1, // negative: varints, not uvarints
		MaxWait:        1500 * time.Millisecond,
		Timeout:        time.Second,
		MaxAttempts:    5,
		Headers:        map[string]string{"X-B": "2", "Authorization": "Bearer ü"},
		Filter:         &EventFilter{Field: "data.type", Patterns: []string{"order.*", ""}},
	}
}

func TestSubscriptionDataRoundTrip(t *testing.T) {
	for _, in := range []*Subscription{
		{ID: "s1", Pattern: "/a/*"},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryWake},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryEvents, Events: &EventsOptions{}},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryEvents, Events: dataEvents()},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryEvents, Events: dataEvents(), Status: StatusDisabled},
	} {
		out := &Subscription{ID: "s1", Pattern: "/a/*", Delivery: "stale", Events: dataEvents(), Status: "stale"}
		require.NoError(t, out.UnmarshalData(in.MarshalData()))
		require.Equal(t, in, out)
	}
}

// The released formats never change, and every one of them reads.
func TestSubscriptionDataKnownAnswers(t *testing.T) {
	events := &Subscription{Delivery: DeliveryEvents, Events: dataEvents(), Status: StatusDisabled}
	const v2 = "02066576656e74730864697361626c656401c8010180bcc1960b80a8d6b9070a020d417574686f72697a6174696f6e0942656172657220c3bc03582d4201320109646174612e7479706502076f726465722e2a00"
	require.Equal(t, v2, hex.EncodeToString(events.MarshalData()))
	v1, err := hex.DecodeString("010477616b65") // version 1, "wake"
	require.NoError(t, err)
	s := &Subscription{Events: dataEvents(), Status: StatusDisabled}
	require.NoError(t, s.UnmarshalData(v1))
	require.Equal(t, &Subscription{Delivery: DeliveryWake}, s)
}

// A subscription stored before its Store kept data reads as all zero.
func TestSubscriptionDataEmpty(t *testing.T) {
	s := &Subscription{ID: "s1", Delivery: DeliveryEvents, Events: dataEvents(), Status: StatusDisabled}
	require.NoError(t, s.UnmarshalData(nil))
	require.Equal(t, &Subscription{ID: "s1"}, s)
}

func TestSubscriptionDataCorrupt(t *testing.T) {
	good := (&Subscription{Delivery: DeliveryEvents, Events: dataEvents()}).MarshalData()
	cases := map[string][]byte{
		"unknown version": append([]byte{99}, good[1:]...),
		"trailing bytes":  append(good, 0),
	}
	// Empty data is valid: a subscription from before data.
	for n := 1; n < len(good); n++ {
		cases[fmt.Sprintf("truncated to %d bytes", n)] = good[:n]
	}
	for name, data := range cases {
		s := &Subscription{ID: "s1", Delivery: "kept"}
		require.ErrorIs(t, s.UnmarshalData(data), errCorruptSubscriptionData, name)
		require.Equal(t, &Subscription{ID: "s1", Delivery: "kept"}, s, "%s: a corrupt value changes nothing", name)
	}
}

// FuzzSubscriptionData checks that no data panics the decoder and that what
// decodes survives a round trip.
func FuzzSubscriptionData(f *testing.F) {
	f.Add((&Subscription{Delivery: DeliveryEvents, Events: dataEvents()}).MarshalData())
	f.Add([]byte{subscriptionDataV1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Subscription
		if s.UnmarshalData(data) != nil {
			return
		}
		var s2 Subscription
		require.NoError(t, s2.UnmarshalData(s.MarshalData()))
		require.Equal(t, s, s2)
	})
}
