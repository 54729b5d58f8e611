package bootindex

import (
	"reflect"
	"testing"
)

func TestSetOrders(t *testing.T) {
	tests := []struct {
		name       string
		mods       []Module
		load, uniq []string
	}{
		{name: "nvidia", mods: []Module{
			{Name: "nvidia-uvm", Depends: []string{"nvidia"}},
			{Name: "nvidia-drm", Depends: []string{"nvidia-modeset", "drm_kms_helper"}},
			{Name: "nvidia"},
			{Name: "nvidia-modeset", Depends: []string{"nvidia"}},
		}, load: []string{"nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm"}},
		{name: "cycle keeps every module", mods: []Module{
			{Name: "b", Depends: []string{"a"}}, {Name: "a", Depends: []string{"b"}}, {Name: "c"},
		}, load: []string{"b", "a", "c"}},
		{name: "one module", mods: []Module{{Name: "kpreload_edu"}}, load: []string{"kpreload_edu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Set{Modules: tt.mods}
			if got := s.LoadOrder(); !reflect.DeepEqual(got, tt.load) {
				t.Errorf("LoadOrder = %q, want %q", got, tt.load)
			}
			got, want := s.UnloadOrder(), make([]string, 0, len(tt.load))
			for i := len(tt.load) - 1; i >= 0; i-- {
				want = append(want, tt.load[i])
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("UnloadOrder = %q, want %q", got, want)
			}
		})
	}
}
