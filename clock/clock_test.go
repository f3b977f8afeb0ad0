package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrderAtDeadline(t *testing.T) {
	c := NewFake()
	start := c.Now()
	var got []time.Duration
	c.AfterFunc(30*time.Millisecond, func() { got = append(got, c.Now().Sub(start)) })
	c.AfterFunc(10*time.Millisecond, func() {
		got = append(got, c.Now().Sub(start))
		// A callback may arm a new timer that falls due in the same Advance.
		c.AfterFunc(5*time.Millisecond, func() { got = append(got, c.Now().Sub(start)) })
	})
	stopped := c.AfterFunc(20*time.Millisecond, func() { t.Error("stopped timer fired") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	c.Advance(9 * time.Millisecond)
	if len(got) != 0 {
		t.Fatalf("fired early: %v", got)
	}
	c.Advance(100 * time.Millisecond)
	want := []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, 30 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}
	if c.Now().Sub(start) != 109*time.Millisecond {
		t.Fatalf("now = %v", c.Now().Sub(start))
	}
	if stopped.Stop() {
		t.Fatal("second Stop returned true")
	}
}
