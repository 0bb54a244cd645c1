package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamhooks/webhooks/examples/internal/narrate/narratetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPushDemo runs the demo as `go run ./examples/pushdemo` does and
// checks that its narrative shows both batches pushed, filtered and acked.
func TestPushDemo(t *testing.T) {
	got := narratetest.Narrates(t, run, timeout,
		"POST        delivery msg_",
		": 2 events of /orders/eu, offsets -1 → ",
		`              {"type":"order.paid","id":"o1"}`,
		`              {"type":"refund.issued.partial","id":"o1"}`,
		"state       consumer is IDLE, cursor at ",
	)
	require.NotContains(t, got, `"user.login"`, "filtered out")
}

// TestPushDemoStopsWhenContextEnds checks that the demo returns an error,
// rather than hanging or claiming success, once its deadline has passed.
func TestPushDemoStopsWhenContextEnds(t *testing.T) { narratetest.StopsWhenContextEnds(t, run) }
