package coldplug

import (
	"testing"
	"time"
)

// TestEventsWaitTimesOut opens the kernel's device events and waits on them:
// Wait returns by its deadline (a device event on the host may end it
// sooner), and again after Close's error-free end. That a plugged-in disk
// wakes it is what the slow-root boots show (scripts/bench-boot.sh
// --slow-root: /init finds the root within a coldplug round of its
// virtio_blk line).
func TestEventsWaitTimesOut(t *testing.T) {
	ev, err := OpenEvents()
	if err != nil {
		t.Fatalf("OpenEvents: %v", err)
	}
	start := time.Now()
	ev.Wait(100 * time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Wait(100ms) took %s", took)
	}
	if err := ev.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
