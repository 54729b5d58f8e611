package matrix

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// TestRunRemote runs the matrix against a real registry: built cells are
// pushed and failures recorded; a builder with an empty cache pulls the
// cells and does not rebuild the known failure; shards split the work.
func TestRunRemote(t *testing.T) {
	reg := testenv.StartRegistry(t)
	open := func() *remote.Remote {
		r, err := remote.Open("oci://"+reg.Addr+"/matrix", remote.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	alpha, beta := fakeRecipe(t, "alpha"), fakeRecipe(t, "beta")
	failing := func(req dkms.BuildRequest) bool {
		return req.SourceDir == beta.Source.Dir && req.Kernel == testKernels[1]
	}
	ctx := context.Background()

	// Two shard processes of one matrix, each with its own empty cache.
	var built int32
	seen := map[string]int{}
	for i := 1; i <= 2; i++ {
		f := &fakeDriver{fail: failing}
		opts := fakeOptions(t, f, alpha, beta)
		opts.Remote, opts.Shard = open(), Shard{Index: i, Count: 2}
		results, err := Run(ctx, opts)
		if len(results) != 2 {
			t.Fatalf("shard %d/2 ran %d cells, want 2 of 4", i, len(results))
		}
		for _, res := range results {
			seen[res.Recipe.Name+"/"+res.Kernel]++
			wantRemote := "pushed"
			if res.State == StateFailed {
				wantRemote = "recorded failure"
				if !errors.Is(err, ErrCellsFailed) {
					t.Errorf("shard %d error = %v, want ErrCellsFailed", i, err)
				}
			}
			if res.Remote != wantRemote || res.PushErr != nil {
				t.Errorf("shard %d cell %s/%s: remote %q (%v), want %q", i, res.Recipe.Name, res.Kernel, res.Remote, res.PushErr, wantRemote)
			}
		}
		built += f.calls.Load()
	}
	if len(seen) != 4 || built != 4 {
		t.Errorf("shards built %v (%d dkms calls), want each of the 4 cells once", seen, built)
	}

	// A new builder, empty cache: everything comes from the registry.
	f := &fakeDriver{fail: failing}
	opts := fakeOptions(t, f, alpha, beta)
	opts.Remote = open()
	results, err := Run(ctx, opts)
	if !errors.Is(err, ErrCellsFailed) {
		t.Errorf("Run error = %v, want ErrCellsFailed (the recorded failure)", err)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("a builder with the registry compiled %d cells, want 0", n)
	}
	for _, res := range results {
		want, wantRemote := StatePulled, "pulled"
		if res.Recipe == beta && res.Kernel == testKernels[1] {
			want, wantRemote = StateFailed, "known failure"
			if !strings.Contains(res.FirstError, "expected ';'") {
				t.Errorf("known failure FirstError = %q, want the recorded compiler error", res.FirstError)
			}
		}
		if res.State != want || res.Remote != wantRemote {
			t.Errorf("cell %s/%s = %s, remote %q (%v); want %s, %q", res.Recipe.Name, res.Kernel, res.State, res.Remote, res.Err, want, wantRemote)
		}
	}

	// --retry-failed compiles the recorded failure again (and nothing else).
	f = &fakeDriver{}
	opts = fakeOptions(t, f, alpha, beta)
	opts.Remote, opts.RetryFailed = open(), true
	if _, err := Run(ctx, opts); err != nil {
		t.Errorf("retry run: %v", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("retry run compiled %d cells, want 1", n)
	}

	// Pull-only with a cell the registry lacks names it.
	gamma := fakeRecipe(t, "gamma")
	opts = fakeOptions(t, &fakeDriver{}, gamma)
	opts.Remote, opts.PullOnly = open(), true
	results, err = Run(ctx, opts)
	if !errors.Is(err, ErrCellsFailed) || len(results) != 2 || !strings.Contains(results[0].Err.Error(), "neither the local cache nor") {
		t.Errorf("pull-only of an absent cell: %v, %+v", err, results)
	}
}
