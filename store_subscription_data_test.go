package webhooks

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dataSubscription sets every field that subscription data holds.
func dataSubscription() *Subscription {
	return &Subscription{
		Delivery: DeliveryEvents, Events: dataEvents(), Status: StatusPaused, Signature: SignatureStandard,
		PreviousSecret: "whsec_old", PreviousSecretExpiresAt: time.Unix(1_800_000_000, 5).UTC(),
		Retry: &RetryPolicy{Schedule: []time.Duration{time.Second, time.Minute}, MaxAttempts: 7, MaxAge: time.Hour,
			ClientErrors: RetryTransientClientErrors, OnExhausted: ExhaustedSkip},
		RateLimit: 1000, Handler: "inbox", Tenant: "acme", adopted: true,
		Name: "Production ü", UpdatedAt: time.Unix(1_800_000_100, 7).UTC(),
		Verification: &Verification{Attempts: 2, NextAttemptAt: time.Unix(1_800_000_200, 0).UTC(),
			ExpiresAt: time.Unix(1_800_086_400, 0).UTC(), LastError: "status 404"},
	}
}

// marshal is s.MarshalData, which cannot fail for the times tests use.
func marshal(t testing.TB, s *Subscription) []byte {
	data, err := s.MarshalData()
	require.NoError(t, err)
	return data
}

// dataEvents sets every field of EventsOptions.
func dataEvents() *EventsOptions {
	return &EventsOptions{
		MaxBatchEvents: 100,
		MaxBatchBytes:  -1, // negative: varints, not uvarints
		MaxWait:        1500 * time.Millisecond,
		Timeout:        time.Second,
		Headers:        map[string]string{"X-B": "2", "Authorization": "Bearer ü"},
		Filter:         &EventFilter{Field: "data.type", Patterns: []string{"order.*", ""}, Expression: "event.n > 1"},
		Columns:        []string{"id", "data.type"},
	}
}

func TestSubscriptionDataRoundTrip(t *testing.T) {
	for _, in := range []*Subscription{
		{ID: "s1", Pattern: "/a/*"},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryWake},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryEvents, Events: &EventsOptions{}},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryEvents, Events: dataEvents()},
		{ID: "s1", Pattern: "/a/*", Delivery: DeliveryEvents, Events: dataEvents(), Status: StatusDisabled},
		{ID: "s1", Pattern: "/a/*", Retry: &RetryPolicy{}},
		func() *Subscription { s := dataSubscription(); s.ID, s.Pattern = "s1", "/a/*"; return s }(),
	} {
		out := dataSubscription()
		out.ID, out.Pattern = "s1", "/a/*"
		require.NoError(t, out.UnmarshalData(marshal(t, in)))
		require.Equal(t, in, out)
	}
}

// The released formats never change, and every one of them reads.
func TestSubscriptionDataKnownAnswers(t *testing.T) {
	// Version 6 is version 5's fields, then the tenant, "acme", the
	// retry policy's client_errors, "transient", and on_exhausted, "skip",
	// then the name, "Production ü", the time of the last update, and the
	// verification: 2 attempts, the next and expiry times, and the last
	// error, "status 404", and that the existing streams are adopted.
	const v5Fields = "066576656e747306706175736564087374616e646172640977687365635f6f6c64018a80a0bbd29df1fa31d00f010280a8d6b90780e0ba84bf030e8080c58bc6d10101c8010180bcc1960b80a8d6b907020d417574686f72697a6174696f6e0942656172657220c3bc03582d4201320109646174612e7479706502076f726465722e2a00" + "05696e626f78" + "0b6576656e742e6e203e2031" + "02026964" + "09646174612e74797065"
	const v6 = "06" + v5Fields + "0461636d65" + "097472616e7369656e74" + "04736b6970" +
		"0d50726f64756374696f6e20c3bc" + "01" + "8ea0d7c2bba3f1fa31" + "01" + "04" + "01" + "80c08ecaa4a9f1fa31" + "01" + "808098d0e4c298fb31" + "0a73746174757320343034" + "01"
	require.Equal(t, v6, hex.EncodeToString(marshal(t, dataSubscription())))

	// Version 5 is version 4's fields, then the filter's expression,
	// "event.n > 1", and the columns, "id" and "data.type".
	v5, err := hex.DecodeString("05" + v5Fields)
	require.NoError(t, err)
	s := dataSubscription()
	require.NoError(t, s.UnmarshalData(v5))
	want := withoutV6(dataSubscription())
	require.Equal(t, want, s, "version 5 has no tenant, no 4xx or exhaustion options, no name, update time or verification")

	// Version 4 is version 3's fields, then the handler's name: "inbox".
	v4, err := hex.DecodeString("04066576656e747306706175736564087374616e646172640977687365635f6f6c64018a80a0bbd29df1fa31d00f010280a8d6b90780e0ba84bf030e8080c58bc6d10101c8010180bcc1960b80a8d6b907020d417574686f72697a6174696f6e0942656172657220c3bc03582d4201320109646174612e7479706502076f726465722e2a00" + "05696e626f78")
	require.NoError(t, err)
	s = dataSubscription()
	require.NoError(t, s.UnmarshalData(v4))
	want = withoutSelection(withoutV6(dataSubscription()))
	require.Equal(t, want, s, "version 4 has no expression or columns")

	v3, err := hex.DecodeString("03066576656e747306706175736564087374616e646172640977687365635f6f6c64018a80a0bbd29df1fa31d00f010280a8d6b90780e0ba84bf030e8080c58bc6d10101c8010180bcc1960b80a8d6b907020d417574686f72697a6174696f6e0942656172657220c3bc03582d4201320109646174612e7479706502076f726465722e2a00")
	require.NoError(t, err)
	s = dataSubscription()
	require.NoError(t, s.UnmarshalData(v3))
	want = withoutSelection(withoutV6(dataSubscription()))
	want.Handler = ""
	require.Equal(t, want, s, "version 3 has no handler")

	// Version 2 kept the events' attempt limit among their options; it
	// reads as the retry policy's.
	v2, err := hex.DecodeString("02066576656e74730864697361626c656401c8010180bcc1960b80a8d6b9070a020d417574686f72697a6174696f6e0942656172657220c3bc03582d4201320109646174612e7479706502076f726465722e2a00")
	require.NoError(t, err)
	s = dataSubscription()
	require.NoError(t, s.UnmarshalData(v2))
	require.Equal(t, &Subscription{Delivery: DeliveryEvents, Events: withoutSelection(&Subscription{Events: dataEvents()}).Events, Status: StatusDisabled, Retry: &RetryPolicy{MaxAttempts: 5}}, s)

	v1, err := hex.DecodeString("010477616b65") // version 1, "wake"
	require.NoError(t, err)
	s = dataSubscription()
	require.NoError(t, s.UnmarshalData(v1))
	require.Equal(t, &Subscription{Delivery: DeliveryWake}, s)
}

// withoutSelection is s without what versions 5 and 6 added: its filter's
// expression, its columns, its tenant and the adoption's mark.
func withoutSelection(s *Subscription) *Subscription {
	s.Tenant, s.adopted = "", false
	s.Events.Filter.Expression = ""
	s.Events.Columns = nil
	return s
}

// withoutV6 is s without what version 6 added: its tenant, its retry
// policy's ClientErrors and OnExhausted, its name, update time and
// verification, and the adoption mark.
func withoutV6(s *Subscription) *Subscription {
	s.Tenant, s.Name, s.UpdatedAt, s.Verification, s.adopted = "", "", time.Time{}, nil, false
	s.Retry.ClientErrors, s.Retry.OnExhausted = "", ""
	return s
}

// Data that holds an expression without a filter is corrupt.
func TestSubscriptionDataExpressionWithoutFilter(t *testing.T) {
	s := &Subscription{Delivery: DeliveryEvents, Events: &EventsOptions{}}
	data := marshal(t, s)
	// The last 8 bytes: no expression, no columns, then version 6's
	// empty strings, zero time and no verification.
	data = append(data[:len(data)-8], 1, 'x', 0, 0, 0, 0, 0, 0, 0)
	out := &Subscription{ID: "s1"}
	require.ErrorIs(t, out.UnmarshalData(data), errCorruptSubscriptionData)
}

// Data that holds retry options without a retry policy is corrupt.
func TestSubscriptionDataRetryOptionsWithoutPolicy(t *testing.T) {
	data := marshal(t, &Subscription{Delivery: DeliveryEvents})
	data = append(data[:len(data)-5], 4, 's', 'k', 'i', 'p', 0, 0, 0, 0)
	out := &Subscription{ID: "s1"}
	require.ErrorIs(t, out.UnmarshalData(data), errCorruptSubscriptionData)
}

// A subscription stored before its Store kept data reads as all zero.
func TestSubscriptionDataEmpty(t *testing.T) {
	s := &Subscription{ID: "s1", Delivery: DeliveryEvents, Events: dataEvents(), Status: StatusDisabled}
	require.NoError(t, s.UnmarshalData(nil))
	require.Equal(t, &Subscription{ID: "s1"}, s)
}

func TestSubscriptionDataCorrupt(t *testing.T) {
	good := marshal(t, dataSubscription())
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
	f.Add(marshal(f, dataSubscription()))
	f.Add([]byte{subscriptionDataV1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Subscription
		if s.UnmarshalData(data) != nil {
			return
		}
		data, err := s.MarshalData()
		if err != nil {
			return // a time no Store could keep
		}
		var s2 Subscription
		require.NoError(t, s2.UnmarshalData(data))
		require.Equal(t, s, s2)
	})
}
