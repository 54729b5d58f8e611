package image

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFormatsPlaceRestores checks how outputs are placed: an earlier build's
// file under a final name is moved aside, restored when the build fails,
// and left to go with the temporary directory when it succeeds.
func TestFormatsPlaceRestores(t *testing.T) {
	for _, failed := range []bool{true, false} {
		dir := t.TempDir()
		outTmp := filepath.Join(dir, ".tmp-ci-1")
		if err := os.Mkdir(outTmp, 0o755); err != nil {
			t.Fatal(err)
		}
		final := filepath.Join(dir, "ci.qcow2")
		for p, text := range map[string]string{final: "earlier\n", filepath.Join(outTmp, "ci.qcow2"): "new\n"} {
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		j := &Job{outTmp: outTmp}
		if err := j.place(filepath.Join(outTmp, "ci.qcow2"), final); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(final); string(got) != "new\n" {
			t.Fatalf("after place, %s holds %q, want the new output", final, got)
		}
		j.cleanupFormats(failed)
		got, _ := os.ReadFile(final)
		want := "new\n"
		if failed {
			want = "earlier\n"
		}
		if string(got) != want {
			t.Errorf("failed=%v: %s holds %q, want %q", failed, final, got, want)
		}
	}
}
