// Package follow runs one unattended cycle of following the archives: it
// resolves every recipe's selectors (kernels and driver branches) against
// the archives, builds and pushes to the registry only the cells it lacks
// (builder/matrix does the building, the remote cache and the shards), and
// reports per cell when the archive published its packages, when the cell
// was pushed, and the lag between the two.
package follow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kpreload/kpreload/builder/archive"
	"github.com/kpreload/kpreload/builder/matrix"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/tiered"
)

// Options configure a cycle.
type Options struct {
	// Build is the matrix to follow, as kpreload build runs it; Build.Remote
	// (the registry the cells go to) is required.
	Build matrix.Options
	// StateDir holds the cycle's lock and its first-seen record of
	// publication dates ("" is Build.DownloadDir, else
	// matrix.DefaultDownloadDir).
	StateDir string
	// Wait makes a cycle that finds another one running wait for it to end;
	// without it the cycle fails at once with ErrRunning.
	Wait bool
	// Now is the clock (nil is time.Now).
	Now func() time.Time
}

// Row is one cell of the freshness table.
type Row struct {
	// Recipe is the recipe's name.
	Recipe string `json:"recipe"`
	// Driver and Version are the driver and the version the cell builds
	// (a selecting recipe's resolved version).
	Driver  string `json:"driver"`
	Version string `json:"version"`
	// Kernel is the kernel release.
	Kernel string `json:"kernel"`
	// State is the cell's build state (matrix.StateOK, StateCached, ...).
	State string `json:"state"`
	// Remote is what happened on the registry (tiered's Remote constants).
	Remote string `json:"remote,omitempty"`
	// New is true when this cycle pushed the cell.
	New bool `json:"new"`
	// Published is when the archive published the cell's packages: see
	// Publication. Nil when the archive metadata has no date.
	Published *time.Time `json:"published,omitempty"`
	// Pushed is when the cell's signed record was pushed to the registry
	// (its created time); nil when the registry holds no built cell.
	Pushed *time.Time `json:"pushed,omitempty"`
	// LagSeconds is Pushed minus Published, when both are known.
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
	// Error is why the cell failed or its push failed.
	Error string `json:"error,omitempty"`
}

// Report is what a cycle did.
type Report struct {
	// Cells is the freshness table, in the matrix's order.
	Cells []Row `json:"cells"`
	// New counts the cells this cycle pushed.
	New int `json:"new"`
	// Failed counts the cells that failed to build or to be pushed in
	// this cycle.
	Failed int `json:"failed"`
	// KnownFailures counts the cells the registry already records as
	// failed with the same key: not rebuilt (their inputs have not
	// changed; --retry-failed rebuilds them), shown in the table, and no
	// failure of this cycle.
	KnownFailures int `json:"known_failures"`
	// Seconds is how long the cycle took.
	Seconds float64 `json:"seconds"`
}

// ErrNoRemote is Cycle's error without a registry.
var ErrNoRemote = errors.New("follow: a cycle pushes to a registry: give it one (--remote)")

// Cycle runs one cycle under the state directory's lock. The report is
// returned also when cells failed (then with an error); an error before any
// cell ran (a registry that cannot be reached or refuses the credentials,
// checked first with remote.Check before anything is downloaded; an archive
// whose signature or Release file does not check; another cycle running)
// returns no report and has built and pushed nothing.
func Cycle(ctx context.Context, o Options) (*Report, error) {
	if o.Build.Remote == nil {
		return nil, ErrNoRemote
	}
	// The registry first, within seconds: an unreachable one, credentials
	// that cannot read or push, or no signing key stop the cycle before it
	// takes its lock or downloads anything.
	if err := o.Build.Remote.Check(ctx, true); err != nil {
		return nil, fmt.Errorf("follow: %w", err)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	// The matrix's defaults, once: the cycle reads the same downloads
	// directory and archives as the build it runs.
	o.Build = o.Build.Resolve()
	state := o.StateDir
	if state == "" {
		state = o.Build.DownloadDir
	}
	unlock, err := lock(ctx, state, lockName(o.Build.Shard.Index, o.Build.Shard.Count), o.Wait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// The first-seen record is read before anything is built, so a damaged
	// one stops the cycle before hours of work.
	seen, err := openSeen(state, seenName(o.Build.Shard.Index, o.Build.Shard.Count))
	if err != nil {
		return nil, err
	}

	// Every cycle reads the archives as they are now.
	if err := archive.Refresh(ctx, o.Build.DownloadDir); err != nil {
		return nil, fmt.Errorf("follow: %w", err)
	}
	arcs := o.Build.Archives
	// The driver picks, for their dates (the matrix resolves the same
	// selectors again through the same archives, from their lists).
	picks := map[string]recipe.DriverPick{}
	for _, r := range o.Build.Recipes {
		pinned, pick, err := r.ResolveDriver(ctx, arcs)
		if err != nil {
			return nil, fmt.Errorf("follow: driver version: %w", err)
		}
		picks[pinned.Name+" "+pinned.Driver.Version] = pick
	}

	results, runErr := matrix.Run(ctx, o.Build)
	if results == nil {
		return nil, fmt.Errorf("follow: %w", runErr)
	}
	rep := &Report{Cells: make([]Row, 0, len(results))}
	var kernels []string
	for _, res := range results {
		if !slices.Contains(kernels, res.Kernel) {
			kernels = append(kernels, res.Kernel)
		}
	}
	var kdates map[string]time.Time
	if len(results) > 0 {
		kdates = kernelDates(ctx, arcs, results[0].Recipe, kernels)
	}
	for _, res := range results {
		row := Row{
			Recipe: res.Recipe.Name, Driver: res.Recipe.Driver.Name, Version: res.Recipe.Driver.Version,
			Kernel: res.Kernel, State: res.State, Remote: res.Remote,
		}
		switch {
		case res.Err != nil:
			row.Error = res.Err.Error()
		case res.PushErr != nil:
			row.Error = res.PushErr.Error()
		}
		switch {
		case row.Error != "" && res.Remote == tiered.RemoteKnownFailure && res.PushErr == nil:
			rep.KnownFailures++
		case row.Error != "":
			rep.Failed++
		}
		if res.Remote == tiered.RemotePushed {
			row.New = true
			rep.New++
		}
		pick := picks[res.Recipe.Name+" "+res.Recipe.Driver.Version]
		pub := Publication(ctx, arcs, res.Recipe, res.Kernel, pick, kdates)
		if t, ok := seen.first(res.Recipe.Name+" "+res.Recipe.Driver.Version+" "+res.Kernel, pub); ok {
			row.Published = &t
		}
		if res.Key != nil && row.Error == "" && res.State != matrix.StateFailed {
			if rec, err := o.Build.Remote.Lookup(ctx, res.Key); err == nil && !rec.Created.IsZero() {
				t := rec.Created.UTC()
				row.Pushed = &t
			} else if row.New {
				t := now().UTC().Truncate(time.Second)
				row.Pushed = &t
			}
		}
		if row.Published != nil && row.Pushed != nil && !row.Pushed.Before(*row.Published) {
			// (A cell pushed before this machine first saw its packages
			// has no lag to tell: its PUBLISHED is an upper bound.)
			lag := row.Pushed.Sub(*row.Published).Seconds()
			row.LagSeconds = &lag
		}
		rep.Cells = append(rep.Cells, row)
	}
	if rep.Failed == 0 && rep.KnownFailures > 0 && errors.Is(runErr, matrix.ErrCellsFailed) && !errors.Is(runErr, matrix.ErrPushFailed) {
		// Every failed cell is one the registry recorded before: nothing
		// failed in this cycle.
		runErr = nil
	}
	if err := seen.save(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	rep.Seconds = now().Sub(start).Seconds()
	if runErr != nil {
		return rep, fmt.Errorf("follow: %w", runErr)
	}
	return rep, nil
}

// Publication is when the archive published the packages of recipe r's
// cell for kernel: the later of the kernel's and the driver's dates, each
// the Date of the Release file of the suite that lists the package, as this
// machine's package lists last fetched it (archive.Carried): the package
// was published at or before it. Debian's package indexes carry no date per
// package, so this is an upper bound; the cycle keeps the earliest it has
// seen for each cell (see Cycle). Zero when neither date is known. kernels
// holds the kernels' dates (kernelDates).
func Publication(ctx context.Context, arcs recipe.PackageArchives, r *recipe.Recipe, kernel string, pick recipe.DriverPick, kernels map[string]time.Time) time.Time {
	driver := pick.Published
	if driver.IsZero() {
		if name, version, ok := strings.Cut(r.Source.Package, "="); ok {
			driver = carriedDate(ctx, arcs, r, r.Suite, name, version)
		}
	}
	if k := kernels[kernel]; k.After(driver) {
		return k
	}
	return driver
}

// carriedAll is the archive that lists several packages at once
// (archive.Archive).
type carriedAll interface {
	CarriedAll(ctx context.Context, names ...string) (map[string][]archive.Carried, error)
}

// kernelDates returns the date of each kernel's linux-image package (see
// Publication), asking each suite once; unknown dates are left out.
func kernelDates(ctx context.Context, arcs recipe.PackageArchives, r *recipe.Recipe, kernels []string) map[string]time.Time {
	bySuite := map[string][]string{}
	for _, k := range kernels {
		s := archive.KernelSuite(k)
		bySuite[s] = append(bySuite[s], k)
	}
	out := map[string]time.Time{}
	for suite, ks := range bySuite {
		c, _, err := arcs.Open(r, suite)
		if err != nil {
			continue
		}
		all, ok := c.(carriedAll)
		if !ok {
			for _, k := range ks {
				if t := carriedDate(ctx, arcs, r, suite, "linux-image-"+k, ""); !t.IsZero() {
					out[k] = t
				}
			}
			continue
		}
		var names []string
		for _, k := range ks {
			names = append(names, "linux-image-"+k)
		}
		got, err := all.CarriedAll(ctx, names...)
		if err != nil {
			continue
		}
		for _, k := range ks {
			for _, v := range got["linux-image-"+k] {
				if !v.Published.IsZero() {
					out[k] = v.Published
					break
				}
			}
		}
	}
	return out
}

// carriedDate is the date of the suite listing version (any, when "") of
// package name, zero when unknown.
func carriedDate(ctx context.Context, arcs recipe.PackageArchives, r *recipe.Recipe, suite, name, version string) time.Time {
	if suite == "" {
		suite = archive.DefaultSuite
	}
	c, _, err := arcs.Open(r, suite)
	if err != nil {
		return time.Time{}
	}
	carried, err := c.Carried(ctx, name)
	if err != nil {
		return time.Time{}
	}
	for _, v := range carried {
		if (version == "" || v.Version == version) && !v.Published.IsZero() {
			return v.Published
		}
	}
	return time.Time{}
}
