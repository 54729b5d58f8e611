package cachecmd

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestOutsideFileFIFO: a file the command line names (a trust key, a
// signing key; the cloud-config in userdatacmd's TestCloudConfigFIFO) that
// is a FIFO is refused at once, the error naming it as not a regular file,
// instead of hanging the command.
func TestOutsideFileFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "team.pub")
	inroottest.FIFO(t, fifo)
	remote := []string{"--cache", t.TempDir(), "--remote", "oci://127.0.0.1:1/x", "--plain-http", "--docker-config", filepath.Join(t.TempDir(), "config.json")}
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"cache pull --trust", func() error { return execute(append([]string{"cache", "pull", "--trust", fifo}, remote...)) }},
		{"cache push --sign", func() error { return execute(append([]string{"cache", "push", "--sign", fifo}, remote...)) }},
	} {
		err := inroottest.Within(5*time.Second, tc.run)
		if errors.Is(err, inroottest.ErrHung) || err == nil || !strings.Contains(err.Error(), fifo+": not a regular file: it is a named pipe") {
			t.Errorf("%s FIFO: %v; want at once an error naming %s as not a regular file", tc.name, err, fifo)
		}
	}
}

// execute runs a command line and returns its stderr as an error when it
// fails.
func execute(args []string) error {
	var out, errb bytes.Buffer
	if code := cli.Execute(args, &out, &errb); code != 0 {
		return errors.New(errb.String())
	}
	return nil
}
