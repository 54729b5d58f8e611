package rootdisk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/internal/runner"
)

// fakeRunner records the programs Build runs instead of running them; the
// command whose line begins with fail fails with a line of output, and with
// block set every command waits for its context to end.
type fakeRunner struct {
	t       *testing.T
	missing []string
	fail    string
	block   bool
	cmds    []string
	env     [][]string
	stdin   []string
	// staged is whether /sbin/init was in the stage when mkfs ran.
	staged bool
}

func (f *fakeRunner) LookPath(name string) (string, error) {
	if slices.Contains(f.missing, name) {
		return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
	}
	return "/fake/bin/" + name, nil
}

func (f *fakeRunner) Run(ctx context.Context, c runner.Cmd) ([]byte, error) {
	line := c.String()
	f.cmds, f.env = append(f.cmds, line), append(f.env, c.Env)
	in := ""
	if c.Stdin != nil {
		b, err := io.ReadAll(c.Stdin)
		if err != nil {
			f.t.Fatal(err)
		}
		in = string(b)
	}
	f.stdin = append(f.stdin, in)
	if i := slices.Index(c.Args, "-d"); i >= 0 && strings.HasPrefix(c.Name, "mkfs") {
		_, err := os.Stat(filepath.Join(c.Args[i+1], "sbin/init"))
		f.staged = err == nil
	}
	if f.block {
		<-ctx.Done()
		return nil, fmt.Errorf("%s: %w", c.Name, ctx.Err())
	}
	if f.fail != "" && strings.HasPrefix(line, f.fail) {
		return nil, &runner.Error{Cmd: c, Err: errors.New("exit status 1"), Tail: []string{c.Name + ": the disk is on fire"}}
	}
	return nil, nil
}

// stageRE matches the temporary stage directory in a command line.
var stageRE = regexp.MustCompile(`/[^ ]*/kpreload-rootdisk-[0-9]+`)

// stageArg replaces the temporary stage directory in a command line.
func stageArg(line string) string { return stageRE.ReplaceAllString(line, "STAGE") }

// TestBuildThroughRunner checks the command lines of each filesystem's
// tools, run through a fake, and that a failing or cancelled tool's error
// says which and quotes its output.
func TestBuildThroughRunner(t *testing.T) {
	const uuid = "0b9e3b1c-4f7a-4c55-9d2f-6a7c1e0d2b11"
	init := filepath.Join(t.TempDir(), "init")
	if err := os.WriteFile(init, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "root.img")
	tests := []struct {
		name    string
		fs      string
		fail    string
		missing []string
		block   bool
		want    []string // command lines, the stage as STAGE
		wantErr string
	}{
		{name: "ext4", fs: FSExt4, want: []string{
			"mkfs.ext4 -q -F -L kpreload-root -U " + uuid + " -d STAGE -E root_owner=0:0,hash_seed=" + uuid + " " + out + " 400M",
			"debugfs -w -f - " + out,
		}},
		{name: "xfs", fs: FSXFS, want: []string{
			"mkfs.xfs -q -f -L " + DefaultLabelXFS + " -m uuid=" + uuid + " -p STAGE.proto " + out,
			"xfs_db -x -c path /tmp -c write core.mode 041777 " + out,
		}},
		{name: "btrfs", fs: FSBtrfs, want: []string{
			"mkfs.btrfs -q -f -L kpreload-root -U " + uuid + " --rootdir STAGE " + out,
		}},
		{name: "mkfs fails", fs: FSExt4, fail: "mkfs.ext4",
			wantErr: "rootdisk: mkfs.ext4 -q -F -L kpreload-root -U " + uuid + " -d "},
		{name: "debugfs fails", fs: FSExt4, fail: "debugfs",
			wantErr: "rootdisk: pin inode times: debugfs -w -f - " + out + ": exit status 1: debugfs: the disk is on fire"},
		{name: "xfs_db fails", fs: FSXFS, fail: "xfs_db",
			wantErr: "rootdisk: sticky bits: xfs_db -x -c path /tmp"},
		{name: "btrfs fails", fs: FSBtrfs, fail: "mkfs.btrfs", wantErr: "mkfs.btrfs: the disk is on fire"},
		{name: "no mkfs.xfs", fs: FSXFS, missing: []string{"mkfs.xfs"}, wantErr: "mkfs.xfs not found (install xfsprogs"},
		{name: "no debugfs", fs: FSExt4, missing: []string{"debugfs"}, wantErr: "debugfs not found (install e2fsprogs"},
		{name: "cancelled", fs: FSExt4, block: true, wantErr: "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRunner{t: t, fail: tt.fail, missing: tt.missing, block: tt.block}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.block {
				cancel()
			}
			o := Options{Out: out, FSType: tt.fs, SizeMB: 400, UUID: uuid, Init: init, Runner: f}
			err := Build(ctx, o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Build = %v, want an error containing %q", err, tt.wantErr)
				}
				if tt.block && !errors.Is(err, context.Canceled) {
					t.Errorf("Build = %v, want context.Canceled", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			var got []string
			for _, c := range f.cmds {
				got = append(got, stageArg(c))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("commands:\ngot  %q\nwant %q", got, tt.want)
			}
			if tt.fs != FSExt4 {
				return
			}
			if !f.staged {
				t.Error("/sbin/init was not in the stage when mkfs.ext4 ran")
			}
			for i, env := range f.env {
				if !slices.Equal(env, []string{"E2FSPROGS_FAKE_TIME=1577836800"}) {
					t.Errorf("%s environment = %q, want E2FSPROGS_FAKE_TIME=1577836800", got[i], env)
				}
			}
			if !strings.Contains(f.stdin[1], "sif \"/sbin/init\" ctime @1577836800\n") {
				t.Errorf("debugfs script = %q, want /sbin/init's ctime pinned", f.stdin[1])
			}
		})
	}
}

// TestBuildRootInitThroughRunner checks the go build command line, and that
// a failed build's error quotes the compiler.
func TestBuildRootInitThroughRunner(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module "+ModulePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "init")
	f := &fakeRunner{t: t}
	if err := buildRootInit(context.Background(), f, src, out); err != nil {
		t.Fatal(err)
	}
	want := "/fake/bin/go build -trimpath -ldflags=-s -w -o " + out + " " + RootInitPackage
	if len(f.cmds) != 1 || f.cmds[0] != want || !slices.Equal(f.env[0], []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}) {
		t.Errorf("ran %q with %q, want %q with CGO_ENABLED=0 GOOS=linux GOARCH=amd64", f.cmds, f.env, want)
	}
	f = &fakeRunner{t: t, fail: "/fake/bin/go"}
	err := buildRootInit(context.Background(), f, src, out)
	if err == nil || !strings.Contains(err.Error(), "rootdisk: build "+RootInitPackage+" in "+src+": /fake/bin/go build") || !strings.Contains(err.Error(), "go: the disk is on fire") {
		t.Errorf("buildRootInit with a failing go: %v, want the command and its output", err)
	}
}
