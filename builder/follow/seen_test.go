package follow

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSeenHostile: the first-seen record may come back from a CI cache or a
// shared claim: "null" is an empty record (not a nil map written to), a FIFO,
// a directory or a file over the bound is refused at once, naming the file.
func TestSeenHostile(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"null", "", func(p string) error { return os.WriteFile(p, []byte("null"), 0o644) }},
		{"damaged", "remove it", func(p string) error { return os.WriteFile(p, []byte("{"), 0o644) }},
		{"fifo", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"directory", "not a regular file", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"too large", "too large", func(p string) error {
			return os.WriteFile(p, []byte(`{"a":"`+strings.Repeat("x", maxSeen)+`"}`), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.make(filepath.Join(dir, SeenFile)); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var s *seenDates
			var err error
			go func() { s, err = openSeen(dir, SeenFile); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("openSeen waited on the file")
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				at := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
				if got, ok := s.first("x", at); !ok || !got.Equal(at) {
					t.Fatalf("first = %v %v, want %v", got, ok, at)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("openSeen: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestCycleDamagedSeen: a damaged first-seen record stops the cycle before
// anything is built or pushed.
func TestCycleDamagedSeen(t *testing.T) {
	o, f := setup(t, "127.0.0.1:1", time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC))
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.StateDir, SeenFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Cycle(context.Background(), o)
	if err == nil || rep != nil || f.calls.Load() != 0 {
		t.Fatalf("cycle with a damaged record: %v, %+v, builds %d; want an error, no report, nothing built", err, rep, f.calls.Load())
	}
}

// TestSeenPerShard: each shard keeps its own record, as its own lock.
func TestSeenPerShard(t *testing.T) {
	for _, tc := range []struct {
		index, count int
		want         string
	}{{0, 0, SeenFile}, {1, 4, "follow-published-1-of-4.json"}, {4, 4, "follow-published-4-of-4.json"}} {
		if got := seenName(tc.index, tc.count); got != tc.want {
			t.Errorf("seenName(%d, %d) = %q, want %q", tc.index, tc.count, got, tc.want)
		}
	}
}
