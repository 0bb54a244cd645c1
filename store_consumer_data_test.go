package webhooks

import (
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// indexedFields are the Consumer fields a Store keeps in columns, outside
// the data MarshalData encodes.
var indexedFields = map[string]bool{"ID": true, "SubscriptionID": true, "PrimaryStream": true, "State": true, "Deadline": true}

// dataConsumer sets every field MarshalData encodes, with values that catch
// sign, width and position mistakes.
func dataConsumer() *Consumer {
	return &Consumer{
		Epoch:        -(1 << 40), // negative: varints, not uvarints
		WakeID:       "w_ü",
		Streams:      []StreamOffset{{Path: "/a", Offset: "-1"}, {Path: "", Offset: ""}},
		WakeTails:    []StreamOffset{{Path: "/a", Offset: "0000000000000001_0000000000000002"}},
		TriggeredBy:  []string{"/a", ""},
		Attempt:      3,
		InFlight:     true,
		Failures:     1 << 20,
		FailingSince: time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC),
		CreatedAt:    time.Unix(0, -5).UTC(), // before 1970
		// UpdatedAt stays zero.
		LastError: "status_5xx: 503",
		Batch:     ReadLimit{MaxEvents: 100, MaxBytes: -1, Until: "0000000000000001_0000000000000009"},
		BatchEnd:  "0000000000000001_0000000000000005",
		Skipped: []SkippedBatch{{
			DeliveryID: "msg_1", From: "-1", To: "0000000000000001_0000000000000003", Attempts: 5, Failures: -7,
			FailingSince: time.Unix(0, -9).UTC(), LastError: "status_4xx: status 400", SkippedAt: time.Unix(7, 8).UTC(),
		}, {}},
	}
}

// dataV1 is dataConsumer, without the fields version 2 added, as
// sqlitestore's encoder wrote it before the engine took the format over:
// databases hold values like it.
const dataV1 = "01ffffffffff3f04775fc3bc02022f61022d31000001022f6121303030303030303030303030303030315f3030303030303030303030303030303202022f610006018080800101aa8cbcf5cbcbc0a930010900"

// dataV2 is dataConsumer in version 2.
const dataV2 = "02ffffffffff3f04775fc3bc02022f61022d31000001022f6121303030303030303030303030303030315f3030303030303030303030303030303202022f610006018080800101aa8cbcf5cbcbc0a9300109000f7374617475735f3578783a20353033c8010121303030303030303030303030303030315f30303030303030303030303030303039"

// dataV3 is dataConsumer in version 3: version 2's fields, then BatchEnd
// and the two skipped batches.
const dataV3 = "03" + "ffffffffff3f04775fc3bc02022f61022d31000001022f6121303030303030303030303030303030315f3030303030303030303030303030303202022f610006018080800101aa8cbcf5cbcbc0a9300109000f7374617475735f3578783a20353033c8010121303030303030303030303030303030315f30303030303030303030303030303039" +
	"21303030303030303030303030303030315f30303030303030303030303030303035" + "02" +
	"056d73675f31022d3121303030303030303030303030303030315f303030303030303030303030303030330a0d0111019098dc9334167374617475735f3478783a20737461747573203430300000000000000000"

func TestConsumerDataRoundTrip(t *testing.T) {
	want := dataConsumer()
	data, err := want.MarshalData()
	require.NoError(t, err)
	require.Equal(t, dataV3, hex.EncodeToString(data), "a released format never changes")
	var got Consumer
	require.NoError(t, got.UnmarshalData(data))
	require.Equal(t, want, &got)
}

// Values written in version 1 read with the fields version 2 added zero.
func TestConsumerDataReadsV1(t *testing.T) {
	data, err := hex.DecodeString(dataV1)
	require.NoError(t, err)
	want := dataConsumer()
	want.LastError, want.Batch, want.BatchEnd, want.Skipped = "", ReadLimit{}, "", nil
	var got Consumer
	require.NoError(t, got.UnmarshalData(data))
	require.Equal(t, want, &got)
}

// Values written in version 2 read with the fields version 3 added zero.
func TestConsumerDataReadsV2(t *testing.T) {
	data, err := hex.DecodeString(dataV2)
	require.NoError(t, err)
	want := dataConsumer()
	want.BatchEnd, want.Skipped = "", nil
	var got Consumer
	require.NoError(t, got.UnmarshalData(data))
	require.Equal(t, want, &got)
}

// TestConsumerDataCoversEveryField fails when a field added to Consumer is
// neither indexed nor encoded: it would be lost by every durable Store.
func TestConsumerDataCoversEveryField(t *testing.T) {
	full := dataConsumer()
	full.UpdatedAt = time.Unix(1, 2).UTC()
	rv := reflect.ValueOf(full).Elem()
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		if !indexedFields[name] {
			require.False(t, rv.Field(i).IsZero(), "dataConsumer leaves %s unset: encode it in MarshalData and set it here", name)
		}
	}
	data, err := full.MarshalData()
	require.NoError(t, err)
	var got Consumer
	require.NoError(t, got.UnmarshalData(data))
	require.Equal(t, full, &got)
}

func TestConsumerDataSetsEveryField(t *testing.T) {
	data, err := (&Consumer{}).MarshalData()
	require.NoError(t, err)
	indexed := Consumer{ID: "s:%2Fa", SubscriptionID: "s", PrimaryStream: "/a", State: StateLive, Deadline: time.Unix(9, 0)}
	got := *dataConsumer()
	got.ID, got.SubscriptionID, got.PrimaryStream, got.State, got.Deadline = indexed.ID, indexed.SubscriptionID, indexed.PrimaryStream, indexed.State, indexed.Deadline
	require.NoError(t, got.UnmarshalData(data))
	require.Equal(t, indexed, got, "fields absent from data become zero; the indexed ones stay")
}

func TestConsumerDataCorrupt(t *testing.T) {
	data, err := dataConsumer().MarshalData()
	require.NoError(t, err)
	unmarshal := func(data []byte) error {
		c := dataConsumer()
		err := c.UnmarshalData(data)
		require.Equal(t, dataConsumer(), c, "a failed decode leaves the consumer alone")
		return err
	}
	for n := range len(data) {
		require.ErrorIs(t, unmarshal(data[:n]), errCorruptData, "truncated to %d bytes", n)
	}
	require.ErrorIs(t, unmarshal(append(data, 0)), errCorruptData, "trailing byte")
	other := append([]byte{consumerDataV3 + 1}, data[1:]...)
	require.ErrorIs(t, unmarshal(other), errCorruptData, "unknown version")
	// A list length larger than the data must not allocate it.
	huge := []byte{consumerDataV1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	require.ErrorIs(t, unmarshal(huge), errCorruptData)
}

func TestConsumerDataTimeOutsideRange(t *testing.T) {
	c := dataConsumer()
	c.UpdatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := c.MarshalData()
	require.ErrorContains(t, err, "outside the storable range")
}

// FuzzConsumerData checks that no data panics the decoder and that what
// decodes survives a round trip.
func FuzzConsumerData(f *testing.F) {
	data, err := dataConsumer().MarshalData()
	require.NoError(f, err)
	f.Add(data)
	f.Add([]byte{consumerDataV1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Consumer
		if c.UnmarshalData(data) != nil {
			return
		}
		again, err := c.MarshalData()
		require.NoError(t, err)
		var c2 Consumer
		require.NoError(t, c2.UnmarshalData(again))
		require.Equal(t, c, c2)
	})
}
