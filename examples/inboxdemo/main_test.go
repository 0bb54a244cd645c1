package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/streamhooks/webhooks/examples/internal/narrate/narratetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestInboxDemo runs the demo as `go run ./examples/inboxdemo` does and
// checks that its narrative shows the delivery accepted during the
// outage, retried, processed after it, and the forgery dead-lettered.
func TestInboxDemo(t *testing.T) {
	narratetest.Narrates(t, run, timeout,
		"over the raw bytes: 202",
		"attempt 1 failed: the processor's database is down",
		"attempt 2 failed",
		"delivery-1, issues event, signature verified",
		"forged-1 in /inbox/github/dead: ",
		"no signature matches the body; never processed",
	)
}

// TestInboxDemoStopsWhenContextEnds checks that the demo returns an error,
// rather than hanging or claiming success, once its deadline has passed.
func TestInboxDemoStopsWhenContextEnds(t *testing.T) { narratetest.StopsWhenContextEnds(t, run) }
