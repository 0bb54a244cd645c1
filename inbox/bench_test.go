package inbox

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lastAppender copies each record, as an in-memory store would, but keeps
// only the last, so that the benchmark's memory does not grow with b.N.
type lastAppender struct {
	mu   sync.Mutex
	last []byte
}

func (a *lastAppender) Append(_ context.Context, _ string, record []byte) error {
	kept := append([]byte(nil), record...)
	a.mu.Lock()
	a.last = kept
	a.mu.Unlock()
	return nil
}

// BenchmarkReceipt compares receipt through the Handler, a GitHub
// delivery of about 2 KiB with a unique id each, to its ceiling: a bare
// handler that reads the body and answers 202.
func BenchmarkReceipt(b *testing.B) {
	body := `{"action":"opened","payload":"` + strings.Repeat("x", 2000) + `"}`
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
	})
	h, err := New(&lastAppender{}, []Provider{{Name: "github", Scheme: GitHub{Secret: "s"}}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		handler http.Handler
	}{{"ceiling", bare}, {"inbox", h}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			i := 0
			for b.Loop() {
				i++
				r := httptest.NewRequest(http.MethodPost, "/inbox/github", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("X-GitHub-Delivery", strconv.Itoa(i))
				r.Header.Set("X-Hub-Signature-256", "sha256=00")
				w := httptest.NewRecorder()
				bc.handler.ServeHTTP(w, r)
				if w.Code != http.StatusAccepted {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
