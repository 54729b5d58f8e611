package userdatacmd

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/cmd/kpreload/internal/clitest"
	"github.com/kpreload/kpreload/gpu/userdata"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
	"github.com/kpreload/kpreload/report"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestUserDataHelpExamples runs the examples of user-data apply exactly as
// written in a checkout: the documented user-data (version "550") over the
// committed H200 and H100 captures and the plan bundle, each a dry run that
// would switch to nvidia 550.163.01. docs/driver-selection.md shows the
// first.
func TestUserDataHelpExamples(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/driver-selection.md")
	if err != nil {
		t.Fatal(err)
	}
	clitest.InCheckout(t, testenv.RepoRoot(t))
	lines := cli.ExamplesOf(t, "kpreload user-data apply")
	if !strings.Contains(string(doc), "\n"+lines[0]+"\n") {
		t.Errorf("docs/driver-selection.md does not show %q", lines[0])
	}
	for _, l := range lines {
		out := cli.RunLine(t, l)
		if strings.HasSuffix(l, " --json") {
			var rec report.UserData
			if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Action != "would-switch" || rec.Driver+" "+rec.To != "nvidia 550.163.01" {
				t.Errorf("%s printed %s (%v); want would-switch to nvidia 550.163.01", l, out, err)
			}
			continue
		}
		if want := "kpreload user-data: would-switch: the user-data asks for 550.163.01 (branch 550): apply would switch to nvidia 550.163.01 open (dry run: nothing changed)\n"; out != want {
			t.Errorf("%s printed %q, want %q", l, out, want)
		}
	}
	if len(lines) != 2 {
		t.Errorf("user-data apply examples %q; the test knows 2", lines)
	}
}

// TestCloudConfigFIFO: a --cloud-config that is a FIFO is refused at once,
// the error naming it as not a regular file, instead of hanging user-data
// apply (cachecmd's TestOutsideFileFIFO holds the keys to the same).
func TestCloudConfigFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "user-data")
	inroottest.FIFO(t, fifo)
	err := inroottest.Within(5*time.Second, func() error {
		if _, err := userdata.Apply(userDataOptions(io.Discard, fifo, t.TempDir())); err != nil {
			return err
		}
		return errors.New("no error")
	})
	if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), fifo+": not a regular file: it is a named pipe") {
		t.Errorf("user-data apply --cloud-config FIFO: %v; want at once an error naming %s as not a regular file", err, fifo)
	}
}
