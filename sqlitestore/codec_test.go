package sqlitestore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

func codecConsumer() *webhooks.Consumer {
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	return &webhooks.Consumer{
		Epoch:        -(1 << 40), // negative: varints, not uvarints
		WakeID:       "w_ü",
		Streams:      []webhooks.StreamOffset{{Path: "/a", Offset: "-1"}, {Path: "", Offset: ""}},
		WakeTails:    []webhooks.StreamOffset{{Path: "/a", Offset: "0000000000000001_0000000000000002"}},
		TriggeredBy:  []string{"/a", ""},
		Attempt:      3,
		InFlight:     true,
		Failures:     1 << 20,
		FailingSince: t0,
		CreatedAt:    time.Unix(0, -5).UTC(), // before 1970
		// UpdatedAt stays zero.
	}
}

func TestConsumerDataRoundTrip(t *testing.T) {
	want := codecConsumer()
	data, err := encodeConsumerData(want)
	require.NoError(t, err)
	var got webhooks.Consumer
	require.NoError(t, decodeConsumerData(&got, data))
	require.Equal(t, want, &got)
}

func TestConsumerDataCorrupt(t *testing.T) {
	data, err := encodeConsumerData(codecConsumer())
	require.NoError(t, err)
	for n := range len(data) {
		require.ErrorIs(t, decodeConsumerData(&webhooks.Consumer{}, data[:n]), errCorrupt, "truncated to %d bytes", n)
	}
	require.ErrorIs(t, decodeConsumerData(&webhooks.Consumer{}, append(data, 0)), errCorrupt, "trailing byte")
	other := append([]byte{consumerDataV1 + 1}, data[1:]...)
	require.ErrorIs(t, decodeConsumerData(&webhooks.Consumer{}, other), errCorrupt, "unknown version")
	// A list length larger than the data must not allocate it.
	huge := []byte{consumerDataV1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	require.ErrorIs(t, decodeConsumerData(&webhooks.Consumer{}, huge), errCorrupt)
}

// FuzzConsumerData checks that no blob panics the decoder and that what
// decodes survives a round trip.
func FuzzConsumerData(f *testing.F) {
	data, err := encodeConsumerData(codecConsumer())
	require.NoError(f, err)
	f.Add(data)
	f.Add([]byte{consumerDataV1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c webhooks.Consumer
		if decodeConsumerData(&c, data) != nil {
			return
		}
		again, err := encodeConsumerData(&c)
		require.NoError(t, err)
		var c2 webhooks.Consumer
		require.NoError(t, decodeConsumerData(&c2, again))
		require.Equal(t, c, c2)
	})
}
