package e2e

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/gpu/instance"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// documentedCloudConfigs returns the #cloud-config examples of
// docs/driver-selection.md, in order, with their indentation removed.
func documentedCloudConfigs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/driver-selection.md")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, m := range regexp.MustCompile("(?s)\n( *)```yaml\n(.*?)\n *```").FindAllStringSubmatch(string(b), -1) {
		indent, body := m[1], m[2]
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			lines = append(lines, strings.TrimPrefix(l, indent))
		}
		if doc := strings.Join(lines, "\n") + "\n"; strings.HasPrefix(doc, "#cloud-config\n") {
			docs = append(docs, doc)
		}
	}
	return docs
}

// TestDocumentedCloudConfigs: the documented user-data examples are the two
// forms, each read as kpreload documents it (offline; the schema check below
// asks cloud-init itself).
func TestDocumentedCloudConfigs(t *testing.T) {
	docs := documentedCloudConfigs(t)
	if len(docs) != 2 {
		t.Fatalf("docs/driver-selection.md has %d #cloud-config examples, want 2 (the write_files entry, then the deprecated key)", len(docs))
	}
	for i, tt := range []struct {
		form       string
		deprecated bool
	}{{"write_files", false}, {"kpreload: key", true}} {
		req, found, err := instance.UserDataRequest(instance.SourceSeed, "user-data", []byte(docs[i]))
		if err != nil || !found || req.Instance.Resources.Driver.Version != "550" {
			t.Errorf("example %d (%s): found %v, version %q, err %v; want 550", i+1, tt.form, found, req.Instance.Resources.Driver.Version, err)
		}
		if got := len(req.Notes) > 0; got != tt.deprecated {
			t.Errorf("example %d (%s): notes %q, want a deprecation note: %v", i+1, tt.form, req.Notes, tt.deprecated)
		}
	}
}

// TestDocumentedUserDataSchema runs the documented examples through
// `cloud-init schema -c` of Debian 12's cloud-init (22.4) and Debian 13's
// (25.1), each in a root of its suite, and checks the documented table: the
// write_files entry is valid for both, the deprecated kpreload: key only for
// bookworm's (trixie's says it was unexpected).
func TestDocumentedUserDataSchema(t *testing.T) {
	docs := documentedCloudConfigs(t)
	if len(docs) != 2 {
		t.Fatalf("docs/driver-selection.md has %d #cloud-config examples, want 2", len(docs))
	}
	for _, tt := range []struct {
		suite, version string // the suite and the cloud-init release the docs name
		legacyValid    bool
	}{
		{"bookworm", "22.4", true},
		{"trixie", "25.1", false},
	} {
		t.Run(tt.suite, func(t *testing.T) {
			root := cloudInitRoot(t, tt.suite)
			if !strings.HasPrefix(root.Version, tt.version+".") {
				t.Errorf("%s's cloud-init is %s; docs/driver-selection.md says %s: update the docs' table", tt.suite, root.Version, tt.version)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
			defer cancel()
			out, valid, err := root.Schema(ctx, []byte(docs[0]))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("cloud-init %s, write_files example: %s", root.Version, strings.TrimSpace(out))
			if !valid {
				t.Errorf("cloud-init %s: the documented write_files example is not valid:\n%s", root.Version, out)
			}
			out, valid, err = root.Schema(ctx, []byte(docs[1]))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("cloud-init %s, kpreload: key example: %s", root.Version, strings.TrimSpace(out))
			if valid != tt.legacyValid {
				t.Errorf("cloud-init %s: the deprecated kpreload: key example valid = %v, want %v as documented:\n%s", root.Version, valid, tt.legacyValid, out)
			}
			if !tt.legacyValid && !strings.Contains(out, "'kpreload' was unexpected") {
				t.Errorf("cloud-init %s refused the kpreload: key example without the documented reason:\n%s", root.Version, out)
			}
		})
	}
}
