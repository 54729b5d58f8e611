package matrix

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Table is a grid of cell states, kernels one way and cells (recipes,
// drivers) the other, as kpreload build and the registry's report print
// it: rows and columns in the order first set, a state never set printed
// as "-", columns aligned two spaces apart.
type Table struct {
	// Corner heads the first column (the rows' names): "KERNEL", "CELL".
	Corner string
	// Notes are rows printed under the header, each its name then a value
	// per column, in the columns' order (such as each recipe's version).
	Notes []TableNote

	rows, cols []string
	state      map[[2]string]string
}

// TableNote is a row under a Table's header: its name and a value per
// column.
type TableNote struct {
	Name   string
	Values map[string]string
}

// Set records the state of the cell at row and col.
func (t *Table) Set(row, col, state string) {
	if t.state == nil {
		t.state = map[[2]string]string{}
	}
	if !slices.Contains(t.rows, row) {
		t.rows = append(t.rows, row)
	}
	if !slices.Contains(t.cols, col) {
		t.cols = append(t.cols, col)
	}
	t.state[[2]string{row, col}] = state
}

// SortColumns puts the columns in sort order instead of the order set.
func (t *Table) SortColumns() { slices.Sort(t.cols) }

// Write prints the table to w.
func (t *Table) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\t%s\n", t.Corner, strings.Join(t.cols, "\t"))
	for _, n := range t.Notes {
		row := []string{n.Name}
		for _, c := range t.cols {
			row = append(row, n.Values[c])
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	for _, r := range t.rows {
		row := []string{r}
		for _, c := range t.cols {
			s, ok := t.state[[2]string{r, c}]
			if !ok {
				s = "-"
			}
			row = append(row, s)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}
