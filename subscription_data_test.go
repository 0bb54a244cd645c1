package webhooks

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSubscriptionDataRoundTrip(t *testing.T) {
	for _, mode := range []DeliveryMode{"", DeliveryWake, "events"} {
		in := &Subscription{ID: "s1", Pattern: "/a/*", Delivery: mode}
		out := &Subscription{ID: "s1", Pattern: "/a/*", Delivery: "stale"}
		require.NoError(t, out.UnmarshalData(in.MarshalData()))
		require.Equal(t, in, out)
	}
}

// A subscription stored before its Store kept data reads as all zero.
func TestSubscriptionDataEmpty(t *testing.T) {
	s := &Subscription{ID: "s1", Delivery: DeliveryWake}
	require.NoError(t, s.UnmarshalData(nil))
	require.Equal(t, &Subscription{ID: "s1"}, s)
}

func TestSubscriptionDataCorrupt(t *testing.T) {
	good := (&Subscription{Delivery: DeliveryWake}).MarshalData()
	for name, data := range map[string][]byte{
		"unknown version": append([]byte{99}, good[1:]...),
		"truncated":       good[:len(good)-1],
		"trailing bytes":  append(good, 0),
	} {
		s := &Subscription{ID: "s1", Delivery: "kept"}
		require.ErrorIs(t, s.UnmarshalData(data), errCorruptSubscriptionData, name)
		require.Equal(t, DeliveryMode("kept"), s.Delivery, "%s: a corrupt value changes nothing", name)
	}
}
