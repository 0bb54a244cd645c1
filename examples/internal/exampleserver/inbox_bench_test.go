package exampleserver

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/inbox"
)

// BenchmarkInboxReceipt measures the inbox's receipt of a signed GitHub
// delivery of about 2 KiB, each with its own id, on the example server's
// streams in memory and on disk (-data: an fsynced log per stream), against
// its ceiling in the same run: a bare handler that reads the body and
// answers 202. The benchmark's parallelism is that of concurrent senders.
func BenchmarkInboxReceipt(b *testing.B) {
	const secret = "s"
	body := `{"action":"opened","payload":"` + strings.Repeat("x", 2000) + `"}`
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
	})
	inboxOn := func(b *testing.B, streams *dstream.Server) http.Handler {
		if err := streams.Create(context.Background(), "/inbox/github/records", "application/json"); err != nil {
			b.Fatal(err)
		}
		h, err := inbox.New(streams, []inbox.Provider{{Name: "github", Scheme: inbox.GitHub{Secret: secret}}})
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	for _, bc := range []struct {
		name    string
		handler func(b *testing.B) http.Handler
	}{
		{"ceiling", func(*testing.B) http.Handler { return bare }},
		{"memory", func(b *testing.B) http.Handler { return inboxOn(b, dstream.New(dstream.Options{})) }},
		{"disk", func(b *testing.B) http.Handler {
			streams, err := dstream.Open(b.TempDir(), dstream.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(streams.Close)
			return inboxOn(b, streams)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := bc.handler(b)
			b.SetParallelism(16)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodPost, "/inbox/github", strings.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					r.Header.Set("X-GitHub-Delivery", strconv.FormatInt(n.Add(1), 10))
					r.Header.Set("X-Hub-Signature-256", sig)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusAccepted {
						b.Fatalf("status %d", w.Code)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "accepted/s")
		})
	}
}
