package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// benchBody is a notification-sized body to sign.
var benchBody = []byte(strings.Repeat(`{"consumer_id":"s1:%2Fagents%2Fa","epoch":1}`, 12))

func BenchmarkVerify(b *testing.B) {
	v := verifierAt(b, testSignTime, testSecret)
	h := http.Header{SignatureHeader: {signStreamhooks(testSecret, testSignTime, benchBody)}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(ctx, h, benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseNotification measures what a Go consumer does first with
// every wake-up: verify the signature and decode the body.
func BenchmarkParseNotification(b *testing.B) {
	body, err := json.Marshal(Notification{
		ConsumerID:    "s1:%2Fagents%2Fa",
		Epoch:         7,
		WakeID:        "w_0123456789abcdef0123456789abcdef",
		PrimaryStream: "/agents/a",
		Streams:       []StreamOffset{{Path: "/agents/a", Offset: "00000000000000000010"}},
		TriggeredBy:   []string{"/agents/a"},
		Callback:      "http://127.0.0.1:8787/callback/s1:%2Fagents%2Fa",
		Token:         strings.Repeat("t", 220),
	})
	if err != nil {
		b.Fatal(err)
	}
	v := verifierAt(b, testSignTime, testSecret)
	r := &http.Request{Header: http.Header{SignatureHeader: {signStreamhooks(testSecret, testSignTime, body)}}}
	b.ReportAllocs()
	for b.Loop() {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if _, err := v.ParseNotification(r); err != nil {
			b.Fatal(err)
		}
	}
}
