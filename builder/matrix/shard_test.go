package matrix

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/recipe"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		err  string
	}{
		{"1/4", Shard{1, 4}, ""},
		{"4/4", Shard{4, 4}, ""},
		{"0/4", Shard{}, "want 1 <= I <= N"},
		{"5/4", Shard{}, "want 1 <= I <= N"},
		{"1", Shard{}, "want I/N"},
		{"a/b", Shard{}, "whole numbers"},
	} {
		got, err := ParseShard(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseShard(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestShardFromIndex(t *testing.T) {
	if got, err := ShardFromIndex("0", true, 3); err != nil || got != (Shard{1, 3}) {
		t.Errorf("JOB_COMPLETION_INDEX=0: %v, %v; want 1/3", got, err)
	}
	if _, err := ShardFromIndex("3", true, 3); err == nil {
		t.Error("JOB_COMPLETION_INDEX=3 of 3 shards: no error")
	}
	if _, err := ShardFromIndex("", false, 3); err == nil || !strings.Contains(err.Error(), "JOB_COMPLETION_INDEX is not set") {
		t.Errorf("JOB_COMPLETION_INDEX unset: %v, want an error saying it is not set", err)
	}
}

// TestAssign checks that shards cover every cell once, balance cost (an
// NVIDIA cell against many test-driver cells) and do not depend on the order
// the cells came in.
func TestAssign(t *testing.T) {
	nvidia := func(name string) *recipe.Recipe {
		return &recipe.Recipe{Name: name, Source: recipe.Source{Package: name + "-dkms=1"}}
	}
	local := func(name string) *recipe.Recipe { return &recipe.Recipe{Name: name, Source: recipe.Source{Dir: "src"}} }
	kernels := []string{"6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64", "6.12.118+deb13-cloud-amd64"}
	var cells []Cell
	for _, r := range []*recipe.Recipe{local("testdriver"), nvidia("nvidia-535"), nvidia("nvidia-550-open"), local("testdriver-2")} {
		for _, k := range kernels {
			cells = append(cells, Cell{Recipe: r, Kernel: k})
		}
	}
	names := func(cs []Cell) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Recipe.Name+"/"+c.Kernel)
		}
		slices.Sort(out)
		return out
	}
	for _, n := range []int{1, 2, 3, 4, 5, 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			shards := Assign(cells, n)
			reversed := slices.Clone(cells)
			slices.Reverse(reversed)
			again := Assign(reversed, n)
			var all []string
			var costs []int
			for i, s := range shards {
				all = append(all, names(s)...)
				if got, want := names(s), names(again[i]); !slices.Equal(got, want) {
					t.Errorf("shard %d depends on input order: %v vs %v", i+1, got, want)
				}
				cost := 0
				for _, c := range s {
					cost += CellCost(c)
				}
				costs = append(costs, cost)
			}
			slices.Sort(all)
			if want := names(cells); !slices.Equal(all, want) {
				t.Errorf("shards cover %v, want every cell once: %v", all, want)
			}
			// 6 NVIDIA cells (100) + 6 test-driver cells (1): the heaviest shard
			// carries at most one NVIDIA cell more than the lightest.
			if slices.Max(costs)-slices.Min(costs) > costPackaged && n <= 6 {
				t.Errorf("%d shards: costs %v are not balanced", n, costs)
			}
		})
	}
}
