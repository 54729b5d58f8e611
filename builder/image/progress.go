package image

import (
	"context"
	"time"

	"github.com/kpreload/kpreload/internal/progress"
)

// ShowPhases returns phases with each Run shown on l: counted as a unit,
// in progress while it runs ("rootfs: root filesystem: ..."), finished when
// it returns. Phases give no estimate (their costs are not known ahead);
// the drivers phase's cells print their own lines through Options.Progress.
func ShowPhases(phases []Phase, l *progress.Line, now func() time.Time) []Phase {
	out := make([]Phase, len(phases))
	for i, p := range phases {
		name := p.Name + ": " + p.Title
		l.Add(name, 1)
		run := p.Run
		p.Run = func(ctx context.Context) error {
			start := now()
			l.Begin(name, "")
			err := run(ctx)
			l.End(name, "", false, now().Sub(start))
			return err
		}
		out[i] = p
	}
	return out
}
