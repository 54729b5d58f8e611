package modorder

import (
	"reflect"
	"strings"
	"testing"
)

func TestWalk(t *testing.T) {
	tests := []struct {
		name   string
		names  []string
		deps   map[string][]string
		want   []string
		cycles []string // "from>to: path"
	}{
		{name: "nvidia set", names: []string{"nvidia", "nvidia_drm", "nvidia_modeset", "nvidia_uvm"},
			deps: map[string][]string{"nvidia_drm": {"nvidia_modeset", "nvidia"}, "nvidia_modeset": {"nvidia"}, "nvidia_uvm": {"nvidia"}},
			want: []string{"nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm"}},
		{name: "dependencies outside names are walked", names: []string{"virtio_blk"},
			deps: map[string][]string{"virtio_blk": {"virtio_ring", "virtio"}, "virtio_ring": {"virtio"}},
			want: []string{"virtio", "virtio_ring", "virtio_blk"}},
		{name: "each once", names: []string{"a", "a", "b"}, deps: map[string][]string{"b": {"a"}},
			want: []string{"a", "b"}},
		{name: "two-cycle", names: []string{"a"}, deps: map[string][]string{"a": {"b"}, "b": {"a"}},
			want: []string{"b", "a"}, cycles: []string{"b>a: a -> b -> a"}},
		{name: "self", names: []string{"self"}, deps: map[string][]string{"self": {"self"}},
			want: []string{"self"}, cycles: []string{"self>self: self -> self"}},
		{name: "three-cycle below a root", names: []string{"r"}, deps: map[string][]string{"r": {"x"}, "x": {"y"}, "y": {"z"}, "z": {"x"}},
			want: []string{"z", "y", "x", "r"}, cycles: []string{"z>x: x -> y -> z -> x"}},
		{name: "none", names: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := map[string]int{}
			var cycles []string
			got := Walk(tt.names, func(n string) []string {
				calls[n]++
				return tt.deps[n]
			}, func(from, to string, path []string) {
				cycles = append(cycles, from+">"+to+": "+strings.Join(path, " -> "))
			})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Walk = %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(cycles, tt.cycles) {
				t.Errorf("cycles = %q, want %q", cycles, tt.cycles)
			}
			for n, c := range calls {
				if c != 1 {
					t.Errorf("deps(%s) called %d times, want once", n, c)
				}
			}
		})
	}
}

func TestReverse(t *testing.T) {
	if got, want := Reverse([]string{"a", "b", "c"}), []string{"c", "b", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Reverse = %q, want %q", got, want)
	}
}
