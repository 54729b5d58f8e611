// Package userdata applies the driver request in the #cloud-config
// cloud-init assembled from an instance's user-data (its write_files entry
// for /etc/kpreload/instance.yaml, or the deprecated kpreload: key), after boot:
// the request /init could not read (user-data from a metadata service, a MIME
// multipart archive). It takes the decision /init takes (gpu/selection) once
// and, when that picks another set than the active one, switches to it
// (gpu/switcher). Every root it reads and the system calls it makes come
// through Options, so tests run it over fixture trees with a fake System.
package userdata

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/gpu/activate"
	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/gpu/selection"
	"github.com/kpreload/kpreload/gpu/switcher"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/report"
)

// CloudConfigPath is where cloud-init keeps the #cloud-config it assembled
// from the instance's user-data (every part of a MIME multipart archive).
const CloudConfigPath = "/var/lib/cloud/instance/cloud-config.txt"

// requestWins are the request sources /init reads that a request in
// user-data does not override: they were given for this boot explicitly,
// or are the same user-data, read by /init from its seed.
var requestWins = []string{instance.SourceCmdline, instance.SourceFwCfg, instance.SourceSeed}

// System makes the calls a test cannot make.
type System interface {
	// Release returns the running kernel's release (uname -r).
	Release() (string, error)
	// Switch performs a switch (switcher.Switch with the real kernel and
	// ldconfig filled in).
	Switch(o switcher.Options) (*switcher.Result, error)
	// RefreshCDI rewrites the CDI spec for the driver now active.
	RefreshCDI() error
}

// Options are the files and roots one apply reads, every field needed:
// the CLI passes the running system's, tests fixture trees and a fake System.
type Options struct {
	// CloudConfig is the #cloud-config file (CloudConfigPath).
	CloudConfig string
	// CacheDir is the module cache holding the driver sets.
	CacheDir string
	// Root is the root the boot report and DriversDir are under ("/").
	Root string
	// ReportPath is the boot report's path under Root (report.Path); empty
	// when there is none to read (a dry run over another machine's devices).
	ReportPath string
	// SysDir, ProcDir, DevDir and RunDir are sysfs, procfs, /dev and /run.
	SysDir, ProcDir, DevDir, RunDir string
	// DriversDir holds each version's userspace (activate.DriversDir).
	DriversDir string
	// System makes the system calls.
	System System
	// Log receives the switch's steps and warnings.
	Log io.Writer
	// Now returns the time recorded in the report section.
	Now func() time.Time
	// DryRun takes the decision and stops before the switch: the action is
	// would-switch where Apply would switch; nothing is changed or called
	// but System.Release.
	DryRun bool
}

// Apply does the work and returns what it did, for the report's user_data
// section, and the error that makes the command fail (nil when nothing had
// to be done or the switch succeeded).
func Apply(o Options) (*report.UserData, error) {
	rec := &report.UserData{Origin: o.CloudConfig, Action: "none", Time: o.Now().UTC().Format(time.RFC3339)}
	var notes []string // said after the reason: the deprecated form
	done := func(action, reason string, err error) (*report.UserData, error) {
		rec.Action, rec.Reason = action, strings.Join(append([]string{reason}, notes...), "; ")
		return rec, err
	}
	data, err := inroot.ReadPath(o.CloudConfig, instance.MaxUserData)
	if errors.Is(err, fs.ErrNotExist) {
		return done("none", "cloud-init left no cloud-config: no request", nil)
	}
	if err != nil {
		return done("failed", err.Error(), err)
	}
	req, found, err := instance.UserDataRequest(instance.SourceUserData, o.CloudConfig, data)
	for _, n := range req.Notes {
		fmt.Fprintf(o.Log, "warning: %s\n", n)
		notes = append(notes, n)
	}
	if err != nil {
		return done("failed", "the request is not honoured: "+err.Error(), err)
	}
	if !found {
		return done("none", "the user-data has neither a write_files entry for "+instance.WriteFilesPath+" nor a "+instance.UserDataKey+": key", nil)
	}
	var rep report.Report
	if o.ReportPath == "" {
		// No report to read: no request /init took stands.
	} else if b, err := inroot.ReadFile(o.Root, o.ReportPath, inroot.MaxLarge); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			return done("failed", fmt.Sprintf("boot report %s: %v", o.ReportPath, err), fmt.Errorf("boot report %s: %w", o.ReportPath, err))
		}
	}
	if s := rep.Selection; s != nil && slices.Contains(requestWins, s.Source) {
		return done("none", fmt.Sprintf("/init took the request from %s (%s), which the user-data does not override", s.Source, s.Origin), nil)
	}
	kernel, err := o.System.Release()
	if err != nil {
		return done("failed", err.Error(), err)
	}
	m, err := selection.Gather(selection.Where{SysDir: o.SysDir, ProcDir: o.ProcDir, CacheDir: o.CacheDir, Kernel: kernel})
	if err != nil {
		return done("failed", err.Error(), err)
	}
	// The one decision: the switch loads the set it chose.
	c := m.ChoiceOf(m.Decide(req))
	want := c.Driver
	if want == nil {
		return done("none", "the cache holds no driver the request applies to", nil)
	}
	rec.Driver = want.Driver
	if want.Chosen == nil {
		return done("failed", want.Refusal, errors.New(want.Refusal))
	}
	rec.To = want.Chosen.Version
	// A version the image lacks goes on with the default, as at boot: say so.
	fault := ""
	if want.Fallback != "" {
		fault = want.Fallback + "; "
	}
	if ready, err := activate.ReadReady(o.RunDir); err == nil && ready.Driver == want.Driver {
		rec.From = ready.Version
		if ready.Set == want.Chosen.ID {
			return done("unchanged", fmt.Sprintf("%s%s %s, which the user-data asks for, is active", fault, want.Driver, ready.Version), nil)
		}
	}
	if o.DryRun {
		return done("would-switch", fmt.Sprintf("%sthe user-data asks for %s (%s): apply would switch to %s %s %s (dry run: nothing changed)", fault, want.Chosen.Version, want.Rule, want.Driver, want.Chosen.Version, want.Chosen.Flavor), nil)
	}
	res, err := o.System.Switch(switcher.Options{
		Machine: m, Choice: c,
		SysDir: o.SysDir, ProcDir: o.ProcDir, DevDir: o.DevDir, RunDir: o.RunDir, Root: o.Root,
		DriversDir: o.DriversDir, BindTimeout: 10 * time.Second, Log: o.Log,
	})
	if cerr := o.System.RefreshCDI(); cerr != nil {
		fmt.Fprintf(o.Log, "warning: %v\n", cerr)
	}
	if err != nil {
		return done("failed", err.Error(), err)
	}
	if res.Unchanged {
		return done("unchanged", fmt.Sprintf("%s%s %s is active", fault, want.Driver, want.Chosen.Version), nil)
	}
	if res.From != nil {
		rec.From = res.From.Version
	}
	return done("switched", fmt.Sprintf("%sthe user-data asks for %s (%s); /init had taken the request from %s", fault, want.Chosen.Version, want.Rule, sourceOf(rep.Selection)), nil)
}

// sourceOf names a boot decision's request source.
func sourceOf(s *report.Selection) string {
	if s == nil {
		return "nowhere (no driver decision at boot)"
	}
	return s.Source
}
