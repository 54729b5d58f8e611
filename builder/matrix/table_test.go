package matrix

import (
	"strings"
	"testing"
)

// TestTable: rows and columns in the order set (or columns sorted), "-"
// for a state never set, notes under the header, columns aligned.
func TestTable(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  [][3]string
		sort bool
		note *TableNote
		want string
	}{
		{name: "empty", want: "KERNEL  \n"},
		{name: "a missing cell", set: [][3]string{{"6.1.0-1", "edu", "ok"}, {"6.12.0-1", "nvidia-550", "failed"}},
			want: "KERNEL    edu  nvidia-550\n" +
				"6.1.0-1   ok   -\n" +
				"6.12.0-1  -    failed\n"},
		{name: "sorted, with a note", set: [][3]string{{"6.1.0-1", "b", "cached"}, {"6.1.0-1", "a", "ok"}}, sort: true,
			note: &TableNote{Name: "(version)", Values: map[string]string{"a": "1.0", "b": "2.0"}},
			want: "KERNEL     a    b\n" +
				"(version)  1.0  2.0\n" +
				"6.1.0-1    ok   cached\n"},
		{name: "set twice", set: [][3]string{{"k", "c", "failed"}, {"k", "c", "ok"}},
			want: "KERNEL  c\nk       ok\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tab := Table{Corner: "KERNEL"}
			for _, s := range tt.set {
				tab.Set(s[0], s[1], s[2])
			}
			if tt.sort {
				tab.SortColumns()
			}
			if tt.note != nil {
				tab.Notes = append(tab.Notes, *tt.note)
			}
			var b strings.Builder
			if err := tab.Write(&b); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tt.want {
				t.Errorf("Write() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
