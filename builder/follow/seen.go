package follow

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/internal/fileutil"
	"github.com/kpreload/kpreload/internal/inroot"
)

// SeenFile is the first-seen record's file name in the state directory: per
// cell ("recipe version kernel") the earliest publication date a cycle has
// read for it. Shard I of N keeps its own, follow-published-I-of-N.json, as
// it has its own lock.
const SeenFile = "follow-published.json"

// maxSeen bounds the record's size: it may come back from a CI cache.
const maxSeen = 16 << 20

// seenName is the first-seen record of shard (SeenFile when shard is zero).
func seenName(index, count int) string {
	if count == 0 {
		return SeenFile
	}
	return fmt.Sprintf("follow-published-%d-of-%d.json", index, count)
}

// seenDates is the first-seen record.
type seenDates struct {
	path    string
	dates   map[string]time.Time
	changed bool
}

// openSeen reads dir's record name, a regular file of at most maxSeen
// bytes (never waited on); a missing one is empty, a damaged one an error
// naming the file.
func openSeen(dir, name string) (*seenDates, error) {
	s := &seenDates{path: filepath.Join(dir, name), dates: map[string]time.Time{}}
	data, err := inroot.ReadPath(s.path, maxSeen)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("follow: first-seen dates: %w (remove it: the next cycle rereads the dates from the archives)", err)
	}
	if err := json.Unmarshal(data, &s.dates); err != nil {
		return nil, fmt.Errorf("follow: %s: %w (remove it: the next cycle rereads the dates from the archives)", s.path, err)
	}
	if s.dates == nil { // the file said null
		s.dates = map[string]time.Time{}
	}
	return s, nil
}

// first returns the earlier of the recorded date for id and t (a zero t
// is unknown), recording it.
func (s *seenDates) first(id string, t time.Time) (time.Time, bool) {
	old, ok := s.dates[id]
	if !t.IsZero() && (!ok || t.Before(old)) {
		s.dates[id], s.changed = t.UTC(), true
		return t.UTC(), true
	}
	return old, ok
}

// save writes the record when it changed.
func (s *seenDates) save() error {
	if !s.changed {
		return nil
	}
	data, err := json.MarshalIndent(s.dates, "", "  ")
	if err != nil {
		return err
	}
	if err := fileutil.WriteAtomic(s.path, data, 0o644, false); err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	return nil
}
