package buildroot

import (
	"context"
	"os"
	"strings"
	"testing"
)

// cache is kpreload's download cache, where the build root is kept between runs.
func cache() string {
	if c := os.Getenv("KPRELOAD_CACHE"); c != "" {
		return c
	}
	return "/var/cache/kpreload"
}

func TestKey(t *testing.T) {
	a := Spec{Suite: "trixie", Cache: "/c"}
	b := Spec{Suite: "sid", Cache: "/c"}
	if a.Key() == b.Key() || a.Key() != (Spec{Suite: "trixie", Cache: "/other"}).Key() {
		t.Errorf("keys: trixie %s, sid %s: want them to differ by suite and not by cache", a.Key(), b.Key())
	}
	if _, err := Ensure(context.Background(), Spec{Suite: "bookworm", Cache: t.TempDir()}, nil); err == nil || !strings.Contains(err.Error(), "build on the host") {
		t.Errorf("Ensure(bookworm) error = %v, want a refusal saying bookworm builds on the host", err)
	}
}

// TestTrixieBuildRoot makes (or reuses) the real trixie build root and runs
// its gcc-14 (dkms runs in it through the dkms package's sandbox, tested there).
func TestTrixieBuildRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("mmdebstrap of a trixie build root (minutes, once): skipped with -short")
	}
	ctx := context.Background()
	r, err := Ensure(ctx, Spec{Suite: "trixie", Cache: cache()}, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Output(ctx, "x86_64-linux-gnu-gcc-14", "--version")
	if err != nil || !strings.Contains(string(out), "14.") {
		t.Fatalf("gcc-14 in the build root: %q, %v", out, err)
	}
	for _, prog := range []string{"dkms", "make", "pahole"} {
		if !r.Has(prog) {
			t.Errorf("the build root lacks %s", prog)
		}
	}
}
