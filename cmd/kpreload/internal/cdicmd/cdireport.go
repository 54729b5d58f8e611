package cdicmd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/kpreload/kpreload/gpu/cdispec"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/report"
)

// Refresh brings kpreload's CDI specs in line with the active driver and
// records the outcome in the boot report (its "cdi" section: the spec's path
// and SHA-256, or none), so the report says which spec containers get. With
// file "" every kind kpreload keeps is refreshed (cdispec.RefreshActive: the
// active driver's spec, NVIDIA's or the test driver's, written, the others
// removed); otherwise NVIDIA's spec goes to file (cdispec.Refresh). Only
// specs kpreload wrote are written over or removed; the report's record of
// the last spec written lets one an older kpreload wrote without the marker
// go. A system without a report (not booted by kpreload's /init) only gets
// the spec.
func Refresh(root, file string, opts cdispec.Options) (*cdispec.Result, error) {
	if opts.Recorded == nil {
		opts.Recorded = recordedCDI(root)
	}
	var res *cdispec.Result
	var err error
	if file == "" {
		res, err = cdispec.RefreshActive(root, opts)
	} else {
		res, err = cdispec.Refresh(root, file, opts)
	}
	var rec *report.CDI
	if res != nil && res.Written != "" {
		b, rerr := inroot.ReadFile(root, res.Written, inroot.MaxLarge)
		if rerr != nil {
			return res, errors.Join(err, rerr)
		}
		sum := sha256.Sum256(b)
		rec = &report.CDI{Path: res.Written, SHA256: hex.EncodeToString(sum[:]), Written: time.Now().UTC().Format(time.RFC3339)}
	}
	if rerr := recordCDI(root, report.Path, rec); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return res, err
}

// recordedCDI returns the spec the boot report of the system at root says
// kpreload wrote (nil when there is no report or no such record).
func recordedCDI(root string) *cdispec.Record {
	b, err := inroot.ReadFile(root, report.Path, inroot.MaxLarge)
	if err != nil {
		return nil
	}
	var r report.Report
	if json.Unmarshal(b, &r) != nil || r.CDI == nil {
		return nil
	}
	return &cdispec.Record{Path: r.CDI.Path, SHA256: r.CDI.SHA256}
}

// recordCDI sets (or, with nil, drops) the report's "cdi" section of the
// report name of the system at root (RecordSection).
func recordCDI(root, name string, rec *report.CDI) error {
	if rec == nil {
		return RecordSection(root, name, "cdi", nil)
	}
	return RecordSection(root, name, "cdi", rec)
}

// RecordSection sets (or, with nil, drops) one top-level section of the
// report name of the system at root (report.SetSection: read inside root,
// replaced atomically and synced; a system without a report is left alone).
func RecordSection(root, name, key string, value any) error {
	return report.SetSection(root, name, key, value)
}

// cdiSummary says in one line what a refresh did: the spec written or why
// none, kpreload's specs removed, and the specs left because kpreload did
// not write them.
func cdiSummary(res *cdispec.Result) string {
	var parts []string
	switch {
	case res.Written != "":
		parts = append(parts, fmt.Sprintf("wrote %s (%s, the active %s driver)", res.Written, res.Kind, res.Driver))
	case res.Off != "" && res.Driver == "nvidia":
		parts = append(parts, "kpreload's "+cdispec.Kind+" spec is off ("+res.Off+")")
	case res.Driver == "":
		parts = append(parts, "no active driver kpreload describes")
	}
	for _, r := range res.Removed {
		parts = append(parts, "removed "+r+" (written by kpreload)")
	}
	if res.Written == "" && len(res.Removed) == 0 {
		parts = append(parts, "no kpreload spec to remove")
	}
	for _, l := range res.Left {
		why := "not written by kpreload"
		if l.Why != "no kpreload marker on its first line" {
			why += ": " + l.Why
		}
		parts = append(parts, "left "+l.Path+" ("+why+")")
	}
	return strings.Join(parts, "; ")
}

// writeOwnSpec writes YAML spec data to out (a host path), marked as
// kpreload's, unless a file kpreload did not write is there
// (cdispec.WriteOwn).
func writeOwnSpec(out string, data []byte) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("cdi: %w", err)
	}
	return cdispec.WriteOwn("/", abs, data)
}
