package webhooks

import (
	"strings"
	"testing"
	"time"

	"github.com/streamhooks/webhooks/internal/mockclock"
)

// benchTokens returns a token issuer on a mock clock, as the engine makes
// one.
func benchTokens() *tokens {
	clk := mockclock.New()
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return newTokens([]byte(strings.Repeat("k", MinTokenKeyLength)), time.Hour, clk)
}

// BenchmarkTokenIssue measures minting one callback token, done for every
// delivery attempt.
func BenchmarkTokenIssue(b *testing.B) {
	tk := benchTokens()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.issue("sub-1:%2Ftenants%2Ft5%2Fstreams%2Fs5", 42, "w_1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTokenVerify measures checking one callback token, done for every
// callback.
func BenchmarkTokenVerify(b *testing.B) {
	tk := benchTokens()
	raw, err := tk.issue("sub-1:%2Ftenants%2Ft5%2Fstreams%2Fs5", 42, "w_1")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.verify(raw); err != nil {
			b.Fatal(err)
		}
	}
}
