package testsignal

import "testing"

func TestSignal(t *testing.T) {
	var off Signal
	off.Send() // does nothing, and does not block

	ch := make(chan struct{}, 1)
	var s Signal
	s.Set(ch)
	s.Send()
	s.Send() // merges with the first: the test looks again once
	select {
	case <-ch:
	default:
		t.Fatal("no token after Send")
	}
	select {
	case <-ch:
		t.Fatal("two sends before a receive left two tokens")
	default:
	}
}
