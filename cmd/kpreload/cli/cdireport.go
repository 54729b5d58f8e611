package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/report"
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
// report name of the system at root (report.SetSection: read inside root,
// replaced atomically and synced; a system without a report is left alone).
func recordSection(root, name, key string, value any) error {
	return report.SetSection(root, name, key, value)
}
