package mockclock

import (
	"testing"
	"time"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// leftover arms a timer for at and leaves it unfired, as a re-arm in Set's
// last moment does: Reset registers a timer without firing it.
func leftover(c *Clock, at time.Time) <-chan time.Time {
	tm := c.Mock.Timer(time.Hour)
	tm.Stop()
	tm.Reset(at.Sub(c.Mock.Now()))
	return tm.C
}

func fired(ch <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-ch:
		return at, true
	default:
		return time.Time{}, false
	}
}

// A timer due before now and unfired fires at its own time, and the time
// comes back to now.
func TestFireLeftoverFiresAnEarlierTimer(t *testing.T) {
	c := New()
	c.Set(start)
	ch := leftover(c, start.Add(-time.Second))
	if !c.fireLeftover(start) {
		t.Fatal("the leftover timer was not found")
	}
	if at, ok := fired(ch); !ok || !at.Equal(start.Add(-time.Second)) {
		t.Fatalf("fired %v at %v, want at %v", ok, at, start.Add(-time.Second))
	}
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("now %v, want %v", got, start)
	}
	if c.fireLeftover(start) {
		t.Fatal("a second look found a leftover timer")
	}
}

// A timer due at exactly now ties with the probe; it fires either way.
func TestFireLeftoverFiresATimerDueNow(t *testing.T) {
	for range 20 { // the probe and the timer sort either way round
		c := New()
		c.Set(start)
		ch := leftover(c, start)
		c.fireLeftover(start)
		if _, ok := fired(ch); !ok {
			t.Fatal("the timer due now did not fire")
		}
	}
}

// Add and Set fire what is due by their time, and nothing later.
func TestAddFiresWhatIsDue(t *testing.T) {
	c := New()
	c.Set(start)
	soon := c.Timer(time.Second)
	later := c.Timer(time.Hour)
	early := leftover(c, start.Add(-time.Minute))
	c.Add(time.Second)
	if _, ok := fired(early); !ok {
		t.Fatal("the leftover timer did not fire")
	}
	if _, ok := fired(soon.C); !ok {
		t.Fatal("the timer due at the new time did not fire")
	}
	if _, ok := fired(later.C); ok {
		t.Fatal("a timer not yet due fired")
	}
	if got := c.Now(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("now %v, want %v", got, start.Add(time.Second))
	}
}
