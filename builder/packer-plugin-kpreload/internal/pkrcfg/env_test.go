package pkrcfg

import (
	"path/filepath"
	"testing"

	"github.com/kpreload/kpreload/builder/image"
)

// TestSharedEnvDefaults: the plugin's environment (Env, filled in by its
// command) gives cache_dir and download_dir their defaults; named
// directories win, and without an environment the packages' defaults hold.
func TestSharedEnvDefaults(t *testing.T) {
	recipes, _ := filepath.Abs("../../../../recipes")
	tests := []struct {
		name                  string
		env                   Env
		cacheDir, downloadDir string // as configured
		wantCache, wantDL     string
	}{
		{"environment", Env{CacheDir: "/env/cache", DownloadDir: "/env/dl"}, "", "", "/env/cache", "/env/dl"},
		{"configured", Env{CacheDir: "/env/cache", DownloadDir: "/env/dl"}, "/cfg/cache", "/cfg/dl", "/cfg/cache", "/cfg/dl"},
		{"none", Env{}, "", "", image.DefaultCacheDir(), image.DefaultDownloadDir()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Shared{RecipesDir: recipes, CacheDir: tt.cacheDir, DownloadDir: tt.downloadDir}
			s.SetEnv(tt.env)
			s.Prepare() // errors about the missing kernels and recipes do not matter here
			if got, want := [2]string{s.CacheDir, s.DownloadDir}, [2]string{tt.wantCache, tt.wantDL}; got != want {
				t.Errorf("cache_dir, download_dir = %q, want %q", got, want)
			}
		})
	}
}
