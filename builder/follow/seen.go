package follow

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/internal/fileutil"
)

// SeenFile is the first-seen record's file name in the state directory: per
// cell ("recipe version kernel") the earliest publication date a cycle has
// read for it.
const SeenFile = "follow-published.json"

// seenDates is the first-seen record.
type seenDates struct {
	path    string
	dates   map[string]time.Time
	changed bool
}

// openSeen reads dir's record; a missing one is empty, a damaged one an
// error naming the file.
func openSeen(dir string) (*seenDates, error) {
	s := &seenDates{path: filepath.Join(dir, SeenFile), dates: map[string]time.Time{}}
	data, err := os.ReadFile(s.path)
	switch {
	case os.IsNotExist(err):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("follow: %w", err)
	}
	if err := json.Unmarshal(data, &s.dates); err != nil {
		return nil, fmt.Errorf("follow: %s: %w (remove it: the next cycle rereads the dates from the archives)", s.path, err)
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
