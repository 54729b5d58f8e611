package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/live/report"
)

// refreshCDI brings the CDI spec in line with the active driver and records
// the outcome in the boot report (its "cdi" section: the spec's path and
// SHA-256, or none), so the report says which spec containers get. With
// file "" every kind kpreload keeps is refreshed (cdispec.RefreshActive: the
// active driver's spec, NVIDIA's or the test driver's, written, the others
// removed); otherwise NVIDIA's spec goes to file (cdispec.Refresh). A system
// without a report (not booted by kpreload's /init) only gets the spec.
func refreshCDI(root, file string, opts cdispec.Options) (bool, error) {
	var wrote bool
	var err error
	if file == "" {
		file, err = cdispec.RefreshActive(root, opts)
		wrote = file != ""
	} else {
		wrote, err = cdispec.Refresh(root, file, opts)
	}
	var rec *report.CDI
	if wrote && err == nil {
		b, rerr := inroot.ReadFile(root, file, inroot.MaxLarge)
		if rerr != nil {
			return wrote, rerr
		}
		sum := sha256.Sum256(b)
		rec = &report.CDI{Path: file, SHA256: hex.EncodeToString(sum[:]), Written: time.Now().UTC().Format(time.RFC3339)}
	}
	if rerr := recordCDI(root, report.Path, rec); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return wrote, err
}

// recordCDI sets (or, with nil, drops) the report's "cdi" section of the
// report name of the system at root (recordSection).
func recordCDI(root, name string, rec *report.CDI) error {
	if rec == nil {
		return recordSection(root, name, "cdi", nil)
	}
	return recordSection(root, name, "cdi", rec)
}

// recordSection sets (or, with nil, drops) one top-level section of the
// report name of the system at root, keeping every other field as /init
// wrote it; the report is read inside root (a regular file of at most
// inroot.MaxLarge bytes) and replaced atomically. A system without a report
// (not booted by kpreload's /init) is left alone.
func recordSection(root, name, key string, value any) error {
	path := filepath.Join(root, name)
	b, err := inroot.ReadFile(root, name, inroot.MaxLarge)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("record %s in the report: %w", key, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("record %s in the report %s: %w", key, path, err)
	}
	if value == nil {
		delete(doc, key)
	} else {
		raw, err := json.Marshal(value)
		if err != nil {
			return err
		}
		doc[key] = raw
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("record %s in the report: %w", key, err)
	}
	return os.Rename(tmp, path)
}
