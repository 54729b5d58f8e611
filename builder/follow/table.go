package follow

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kpreload/kpreload/internal/termtext"
)

// WriteTable prints the freshness table: per kernel × driver version the
// cell's state, when the archive published it, when it was pushed, the lag,
// then the failures and a summary line.
func (r *Report) WriteTable(w io.Writer) error {
	// Names come from recipes, archives and the registry: shown escaped.
	w = termtext.NewWriter(w)
	name := termtext.Name
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KERNEL\tRECIPE\tVERSION\tSTATE\tPUBLISHED\tPUSHED\tLAG")
	for _, c := range r.Cells {
		state := name(c.State)
		if c.New {
			state += ", new"
		}
		lag := "-"
		if c.LagSeconds != nil {
			lag = (time.Duration(*c.LagSeconds) * time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name(c.Kernel), name(c.Recipe), name(c.Version), state, stamp(c.Published), stamp(c.Pushed), lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Cells {
		if c.Error != "" {
			// Every line of the error indented under its cell: none
			// can pass for a line of the table's own.
			msg := strings.ReplaceAll(termtext.Text(c.Error), "\n", "\n  ")
			fmt.Fprintf(w, "\nFAILED %s for %s:\n  %s\n", name(c.Recipe), name(c.Kernel), msg)
		}
	}
	known := ""
	if r.KnownFailures > 0 {
		known = fmt.Sprintf(", %d known failures (recorded before; --retry-failed rebuilds them)", r.KnownFailures)
	}
	_, err := fmt.Fprintf(w, "\n%d cells: %d new, %d failed%s (%.1f s)\n", len(r.Cells), r.New, r.Failed, known, r.Seconds)
	return err
}

func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04Z")
}
