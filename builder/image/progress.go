package image

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/builder/image/formats"
	"github.com/kpreload/kpreload/builder/image/rootfs"
	"github.com/kpreload/kpreload/internal/progress"
)

// Expected seconds of each phase on an idle two-core host, from the image
// builds of the end-to-end tests: the cost model the progress line's
// estimate of the time left is computed from. Only their ratios matter:
// the estimate scales them by how long the finished phases really took.
const (
	costPrepare      = 1
	costDrivers      = 2   // cells from the cache; dkms builds print their own lines
	costRootfsCached = 7   // unpacking today's tarball
	costMmdebstrap   = 180 // mmdebstrap from the archive, then unpacking
	costPerKernel    = 2   // each kernel's initramfs
	costConfigure    = 2
	costBootloader   = 4
	costDisk         = 18 // mkfs.ext4 -d, the ESP, the raw disk's sha256
	costPerFormat    = 6  // each format beside raw (qcow2, vhd, ...)
)

// PhaseCosts returns the expected cost of each of the job's phases, by
// phase name: the root filesystem is cheap when today's tarball for the
// same inputs is in the rootfs cache (what the rootfs phase will reuse),
// and costs an mmdebstrap run otherwise.
func (j *Job) PhaseCosts() map[string]float64 {
	o := j.o
	rootfsCost := float64(costMmdebstrap)
	if o.Rootfs.CacheDir != "off" {
		key := rootfs.Key(rootfsSpec(o, time.Now().UTC().Format("2006-01-02")))
		if _, err := os.Stat(filepath.Join(o.Rootfs.CacheDir, key+".tar")); err == nil {
			rootfsCost = costRootfsCached
		}
	}
	converted := 0
	for _, f := range o.Formats {
		if f != formats.Raw {
			converted++
		}
	}
	return map[string]float64{
		PhasePrepare:    costPrepare,
		PhaseDrivers:    costDrivers,
		PhaseRootfs:     rootfsCost,
		PhaseInitramfs:  float64(costPerKernel * max(1, len(o.Kernels))),
		PhaseConfigure:  costConfigure,
		PhaseBootloader: costBootloader,
		PhaseDisk:       costDisk,
		PhaseFormats:    float64(1 + costPerFormat*converted),
	}
}

// ShowPhases returns phases with each Run shown on l: counted as a unit of
// its cost in costs (1 where costs names no cost), in progress while it runs
// ("rootfs: root filesystem: ..."), finished when it returns. Once a phase
// has finished, the line estimates the time left from the costs of the
// phases still to run at the rate the finished ones took.
func ShowPhases(phases []Phase, costs map[string]float64, l *progress.Line, now func() time.Time) []Phase {
	out := make([]Phase, len(phases))
	for i, p := range phases {
		name := p.Name + ": " + p.Title
		cost, ok := costs[p.Name]
		if !ok || cost <= 0 {
			cost = 1
		}
		l.Add(name, cost)
		run := p.Run
		p.Run = func(ctx context.Context) error {
			start := now()
			l.Begin(name, "")
			err := run(ctx)
			l.End(name, "", err == nil, now().Sub(start))
			return err
		}
		out[i] = p
	}
	return out
}
