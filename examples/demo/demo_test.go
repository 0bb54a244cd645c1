package main

import (
	"testing"

	"github.com/streamhooks/webhooks/examples/internal/narrate/narratetest"
)

// TestDemo runs the demo as `go run ./examples/demo` does and checks that
// its narrative shows both wake cycles complete.
func TestDemo(t *testing.T) {
	narratetest.Narrates(t, run, timeout,
		"WOKEN       consumer demo-agents:%2Fagents%2Ftask-1, epoch 1, wake_id w_",
		"read        /agents/task-1 from offset -1: 3 events",
		"done        epoch 1 finished",
		"state       consumer is IDLE at epoch 1",
		"epoch 2 (re-wake)",
		": 2 events",
		"state       consumer is IDLE at epoch 2",
	)
}

// TestDemoStopsWhenContextEnds checks that the demo returns an error,
// rather than hanging or claiming success, once its deadline has passed.
func TestDemoStopsWhenContextEnds(t *testing.T) { narratetest.StopsWhenContextEnds(t, run) }
