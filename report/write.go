package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/kpreload/kpreload/internal/inroot"
)

// Write stores r as the report name of the system at root (Path on a live
// system: root "/"), making its directory when missing. Like every report
// write it goes through store: atomic and synced.
func Write(root, name string, r *Report) error {
	if err := inroot.MkdirAll(root, path.Dir(path.Clean("/"+name)), 0o755); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if err := store(root, name, r); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// SetSection sets (or, with a nil value, drops) one top-level section key of
// the report name of the system at root, keeping every other field as it
// was; the report is read inside root (a regular file of at most
// inroot.MaxLarge bytes) and replaced as Write replaces it. A system without
// a report (not booted by kpreload's /init) is left alone. A report that is
// not a JSON object is an error naming it, and is left as it was.
func SetSection(root, name, key string, value any) error {
	b, err := inroot.ReadFile(root, name, inroot.MaxLarge)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record %s in the report: %w", key, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("record %s in the report %s: %w", key, inroot.Host(root, name), err)
	}
	if doc == nil {
		return fmt.Errorf("record %s in the report %s: it holds null, not a report", key, inroot.Host(root, name))
	}
	if value == nil {
		delete(doc, key)
	} else {
		raw, err := json.Marshal(value)
		if err != nil {
			return fmt.Errorf("record %s in the report: %w", key, err)
		}
		doc[key] = raw
	}
	if err := store(root, name, doc); err != nil {
		return fmt.Errorf("record %s in the report: %w", key, err)
	}
	return nil
}

// store is the one writer of report files: v as indented JSON and a newline,
// written to name in the tree at root (resolved inside root, never following
// a link out of it) through a synced temporary file renamed over name, the
// directory synced after (inroot.WriteFile), so a reader or a crash sees the
// old report or the new one, never half of one.
func store(root, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return inroot.WriteFile(root, name, append(b, '\n'), 0o644)
}
