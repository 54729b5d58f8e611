package tiered

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/manifest"
	"github.com/kpreload/kpreload/kmodcache/remote"
	"github.com/kpreload/kpreload/kmodcache/remote/remotetest"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

// timeouts keep a registry that does not answer from slowing the tests.
var timeouts = remote.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: time.Second, Total: 10 * time.Second}

// firstLine is the compile error the failure records carry.
const firstLine = "x.c:1:1: error: expected ';' before '}' token"

// testCell is the cell every test asks for.
var testCell = Cell{
	Key:    map[string]string{"schema": "tiered-test/1", "driver": "virtio-test", "kernel": remotetest.Kernel},
	Recipe: "virtio", Kernel: remotetest.Kernel,
	Driver: "virtio-test", Version: "1.0", Flavor: "open",
}

// registry is what the registry holds before a call.
type registry string

const (
	noRegistry registry = ""         // no registry behind the store
	regEmpty   registry = "empty"    // a registry without the cell
	regSet     registry = "set"      // the cell, built
	regFailure registry = "failure"  // a failure record of the cell
	regDamaged registry = "damaged"  // the cell, one module blob altered
	regForeign registry = "unsigned" // the cell, unsigned, and the cache trusts a key
)

// setup is one test's two levels.
type setup struct {
	cache *Cache
	reg   *remotetest.Registry
	// rm reads the registry as the cache does, but trusting anything.
	rm *remote.Remote
}

// newSetup makes a cache whose store holds the cell when local is set, with
// a registry holding what reg says behind it.
func newSetup(t *testing.T, local bool, reg registry, o Options) *setup {
	t.Helper()
	st := newStore(t)
	if local {
		addSet(t, st)
	}
	s := &setup{}
	if reg == noRegistry {
		s.cache = New(st, o)
		return s
	}
	s.reg = remotetest.Start(t)
	s.rm = openRemote(t, s.reg.URL(), remote.Options{})
	ctx := context.Background()
	switch reg {
	case regSet, regDamaged, regForeign:
		src := newStore(t)
		id := addSet(t, src)
		if _, err := s.rm.PushSet(ctx, src, id, testCell.Recipe); err != nil {
			t.Fatal(err)
		}
		if reg == regDamaged {
			m, err := src.Get(id)
			if err != nil {
				t.Fatal(err)
			}
			d := digest.NewDigestFromEncoded(digest.SHA256, m.Modules[0].SHA256)
			b := s.reg.Blob(d)
			b[100] ^= 1
			s.reg.SetBlob(d, b)
		}
	case regFailure:
		if _, err := s.rm.PushFailure(ctx, failure(t)); err != nil {
			t.Fatal(err)
		}
	}
	ro := remote.Options{}
	if reg == regForeign {
		dir := t.TempDir()
		signer, err := cellsign.Generate(filepath.Join(dir, "team.key"), filepath.Join(dir, "team.pub"))
		if err != nil {
			t.Fatal(err)
		}
		ro.Trust = signer.Trust()
	}
	o.Remote = openRemote(t, s.reg.URL(), ro)
	s.cache = New(st, o)
	return s
}

// remoteState returns the state the registry records for the cell, or
// "absent".
func (s *setup) remoteState(t *testing.T) string {
	t.Helper()
	if s.rm == nil {
		return "absent"
	}
	rec, err := s.rm.Lookup(context.Background(), testCell.Key)
	if errors.Is(err, remote.ErrNotFound) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}

// localHas reports whether the cache's store holds the cell.
func (s *setup) localHas(t *testing.T) bool {
	t.Helper()
	_, ok, err := s.cache.Local().Lookup(testCell.Key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestGet(t *testing.T) {
	tests := []struct {
		name     string
		local    bool
		reg      registry
		opts     Options
		hit      bool
		pulled   bool
		remote   string
		err      string // a substring of the error, "" for none
		regAfter string // the registry's record afterwards
	}{
		{name: "local hit, no registry", local: true, hit: true, regAfter: "absent"},
		{name: "miss, no registry", regAfter: "absent"},
		{name: "local hit pushed to the registry", local: true, reg: regEmpty, hit: true, remote: RemotePushed, regAfter: remote.StateOK},
		{name: "local hit the registry holds", local: true, reg: regSet, hit: true, remote: RemotePresent, regAfter: remote.StateOK},
		{name: "local hit, pull-only pushes nothing", local: true, reg: regEmpty, opts: Options{PullOnly: true}, hit: true, regAfter: "absent"},
		{name: "pulled", reg: regSet, hit: true, pulled: true, remote: RemotePulled, regAfter: remote.StateOK},
		{name: "pulled, pull-only", reg: regSet, opts: Options{PullOnly: true}, hit: true, pulled: true, remote: RemotePulled, regAfter: remote.StateOK},
		{name: "miss on both", reg: regEmpty, remote: RemoteAbsent, regAfter: "absent"},
		{name: "miss on both, pull-only", reg: regEmpty, opts: Options{PullOnly: true}, remote: RemoteAbsent, err: "neither the local cache nor oci://", regAfter: "absent"},
		{name: "known failure", reg: regFailure, remote: RemoteKnownFailure, err: "the registry records this cell as failed", regAfter: remote.StateFailed},
		{name: "known failure retried", reg: regFailure, opts: Options{RetryFailed: true}, remote: RemoteRetrying, regAfter: remote.StateFailed},
		{name: "known failure, pull-only does not retry", reg: regFailure, opts: Options{RetryFailed: true, PullOnly: true}, remote: RemoteKnownFailure, err: "--retry-failed rebuilds it", regAfter: remote.StateFailed},
		{name: "local hit before a recorded failure", local: true, reg: regFailure, hit: true, remote: RemotePushed, regAfter: remote.StateOK},
		{name: "damaged copy refused", reg: regDamaged, err: "does not match its digest", regAfter: remote.StateOK},
		{name: "untrusted copy built instead", reg: regForeign, remote: RemoteUntrusted, regAfter: remote.StateOK},
		{name: "untrusted copy, pull-only", reg: regForeign, opts: Options{PullOnly: true}, err: "untrusted cell", regAfter: remote.StateOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSetup(t, tt.local, tt.reg, tt.opts)
			got, err := s.cache.Get(context.Background(), testCell)
			if gotHit := got.SetID != ""; gotHit != tt.hit || got.Pulled != tt.pulled || got.Remote != tt.remote {
				t.Errorf("Get = hit %v, pulled %v, remote %q; want hit %v, pulled %v, remote %q", gotHit, got.Pulled, got.Remote, tt.hit, tt.pulled, tt.remote)
			}
			if got.PushErr != nil {
				t.Errorf("Get push error: %v", got.PushErr)
			}
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Get error = %v, want %q", err, tt.err)
			}
			if got, want := s.localHas(t), tt.hit; got != want {
				t.Errorf("after Get the store holds the cell: %v, want %v", got, want)
			}
			if got, want := s.remoteState(t), tt.regAfter; got != want {
				t.Errorf("after Get the registry records %q, want %q", got, want)
			}
		})
	}
}

// TestGetKnownFailure checks what a recorded failure's error carries.
func TestGetKnownFailure(t *testing.T) {
	s := newSetup(t, false, regFailure, Options{})
	_, err := s.cache.Get(context.Background(), testCell)
	var fe *FailedError
	if !errors.As(err, &fe) || !errors.Is(err, remote.ErrFailedCell) {
		t.Fatalf("Get error = %v, want a *FailedError wrapping remote.ErrFailedCell", err)
	}
	if got, want := fe.FirstError, firstLine; got != want {
		t.Errorf("FirstError = %q, want %q", got, want)
	}
	if got, want := err.Error(), "virtio for "+remotetest.Kernel+": the registry records this cell as failed (recorded "; !strings.HasPrefix(got, want) {
		t.Errorf("error = %q, want it to begin %q", got, want)
	}
}

func TestPut(t *testing.T) {
	tests := []struct {
		name     string
		reg      registry
		opts     Options
		remote   string
		pushErr  bool
		regAfter string
	}{
		{name: "no registry", regAfter: "absent"},
		{name: "pushed", reg: regEmpty, remote: RemotePushed, regAfter: remote.StateOK},
		{name: "the registry holds it", reg: regSet, remote: RemotePresent, regAfter: remote.StateOK},
		{name: "a built cell replaces a failure record", reg: regFailure, remote: RemotePushed, regAfter: remote.StateOK},
		{name: "pull-only pushes nothing", reg: regEmpty, opts: Options{PullOnly: true}, regAfter: "absent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSetup(t, false, tt.reg, tt.opts)
			got, err := s.cache.Put(context.Background(), testCell, store.AddRequest{Files: moduleFiles(t)})
			if err != nil {
				t.Fatal(err)
			}
			if got.Remote != tt.remote || (got.PushErr != nil) != tt.pushErr {
				t.Errorf("Put = remote %q, push error %v; want %q, error %v", got.Remote, got.PushErr, tt.remote, tt.pushErr)
			}
			m, err := s.cache.Local().Get(got.SetID)
			if err != nil {
				t.Fatalf("Put's set %q: %v", got.SetID, err)
			}
			if got, want := []string{m.Driver, m.Version, m.Flavor}, []string{testCell.Driver, testCell.Version, testCell.Flavor}; !slices.Equal(got, want) {
				t.Errorf("stored set is %v, want the cell's %v", got, want)
			}
			if !s.localHas(t) {
				t.Errorf("after Put the store lacks the cell's key")
			}
			if got, want := s.remoteState(t), tt.regAfter; got != want {
				t.Errorf("after Put the registry records %q, want %q", got, want)
			}
		})
	}
}

// TestPushFails checks that a registry that cannot be reached fails the
// push, never the local cache.
func TestPushFails(t *testing.T) {
	st := newStore(t)
	c := New(st, Options{Remote: openRemote(t, "oci://"+remotetest.Silent(t)+"/cells", remote.Options{Timeouts: remote.Timeouts{Connect: 200 * time.Millisecond, FirstByte: 200 * time.Millisecond, Idle: 200 * time.Millisecond, Total: 2 * time.Second}})})
	got, err := c.Put(context.Background(), testCell, store.AddRequest{Files: moduleFiles(t)})
	if err != nil || got.SetID == "" {
		t.Fatalf("Put = %+v, %v; want the set stored", got, err)
	}
	if got.Remote != RemotePushFailed || got.PushErr == nil || !strings.HasPrefix(got.PushErr.Error(), "virtio for ") {
		t.Errorf("Put = remote %q, push error %v; want %q naming the cell", got.Remote, got.PushErr, RemotePushFailed)
	}
	if f := c.Fail(context.Background(), testCell, firstLine, ""); f.PushErr == nil || f.Remote != "" {
		t.Errorf("Fail = remote %q, push error %v; want a push error", f.Remote, f.PushErr)
	}
}

func TestFail(t *testing.T) {
	tests := []struct {
		name     string
		reg      registry
		opts     Options
		remote   string
		regAfter string
	}{
		{name: "no registry", regAfter: "absent"},
		{name: "recorded", reg: regEmpty, remote: RemoteRecordedFailure, regAfter: remote.StateFailed},
		{name: "pull-only records nothing", reg: regEmpty, opts: Options{PullOnly: true}, regAfter: "absent"},
		{name: "a failure never replaces a built cell", reg: regSet, remote: RemoteRecordedFailure, regAfter: remote.StateOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSetup(t, false, tt.reg, tt.opts)
			got := s.cache.Fail(context.Background(), testCell, firstLine, writeLog(t))
			if got.Remote != tt.remote || got.PushErr != nil || got.SetID != "" {
				t.Errorf("Fail = %+v; want remote %q and no error", got, tt.remote)
			}
			if got, want := s.remoteState(t), tt.regAfter; got != want {
				t.Errorf("after Fail the registry records %q, want %q", got, want)
			}
			if tt.regAfter == remote.StateFailed {
				rec, err := s.rm.Lookup(context.Background(), testCell.Key)
				if err != nil || rec.FirstError != firstLine {
					t.Errorf("the record's first error = %q (%v), want %q", rec.FirstError, err, firstLine)
				}
			}
		})
	}
}

// newStore opens an empty store in a temporary directory.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// addSet adds the test cell's set to st and returns its id.
func addSet(t *testing.T, st *store.Store) string {
	t.Helper()
	return remotetest.AddSet(t, st, remotetest.Set{KernelTree: testenv.KernelTree(t, remotetest.Kernel), Driver: testCell.Driver, Version: testCell.Version, Flavor: testCell.Flavor, Key: testCell.Key})
}

// moduleFiles returns the real modules remotetest.AddSet stores.
func moduleFiles(t *testing.T) []string {
	t.Helper()
	tree := filepath.Join(testenv.KernelTree(t, remotetest.Kernel), "lib", "modules", remotetest.Kernel)
	var files []string
	for _, m := range []string{"kernel/drivers/net/virtio_net", "kernel/drivers/net/net_failover", "kernel/net/core/failover"} {
		files = append(files, filepath.Join(tree, m+".ko"))
	}
	return files
}

// failure is the test cell's failure record.
func failure(t *testing.T) remote.Failure {
	t.Helper()
	c := testCell
	return remote.Failure{Key: c.Key, Recipe: c.Recipe, Kernel: c.Kernel, Driver: c.Driver, Version: c.Version, Flavor: c.Flavor, FirstError: firstLine, LogPath: writeLog(t)}
}

// writeLog writes a build log ending in firstLine and returns its path.
func writeLog(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "make.log")
	if err := os.WriteFile(path, []byte("CC x.o\n"+firstLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// openRemote opens url over plain HTTP with no credentials.
func openRemote(t *testing.T, url string, o remote.Options) *remote.Remote {
	t.Helper()
	o.PlainHTTP = true
	o.DockerConfig = filepath.Join(t.TempDir(), "config.json")
	if o.Timeouts == (remote.Timeouts{}) {
		o.Timeouts = timeouts
	}
	r, err := remote.Open(url, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestGetSaysUnsigned: a cell pulled without trusted keys says so
// (Entry.Trust), so that build can report it.
func TestGetSaysUnsigned(t *testing.T) {
	s := newSetup(t, false, regSet, Options{})
	e, err := s.cache.Get(context.Background(), testCell)
	if err != nil || !e.Pulled || e.Trust != remote.TrustUnsigned {
		t.Errorf("Get(unsigned cell, no trust) = %+v, %v; want pulled, Trust %q", e, err, remote.TrustUnsigned)
	}
}

// TestGetRefusesServedOldFailure: the registry recorded the cell as failed
// (signed), then a builder pushed it built over that record (signed, a
// higher generation). A cache that pulled the built cell refuses the
// failure record when the registry serves it again under the key, instead
// of taking it as a known failure.
func TestGetRefusesServedOldFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	signer, err := cellsign.Generate(filepath.Join(dir, "team.key"), filepath.Join(dir, "team.pub"))
	if err != nil {
		t.Fatal(err)
	}
	reg := remotetest.Start(t)
	pusher := openRemote(t, reg.URL(), remote.Options{Signer: signer})
	if _, err := pusher.PushFailure(ctx, failure(t)); err != nil {
		t.Fatal(err)
	}
	tag := manifest.KeyID(testCell.Key)
	failed, _, _ := reg.Manifest(tag)
	src := newStore(t)
	if _, err := pusher.PushSet(ctx, src, addSet(t, src), testCell.Recipe); err != nil {
		t.Fatal(err)
	}
	c := New(newStore(t), Options{Remote: openRemote(t, reg.URL(), remote.Options{Trust: signer.Trust()}), PullOnly: true})
	e, err := c.Get(ctx, testCell)
	if err != nil || !e.Pulled || e.Trust != remote.TrustVerified {
		t.Fatalf("Get(the built cell) = %+v, %v; want pulled and verified", e, err)
	}
	if err := c.Local().Remove(ctx, e.SetID); err != nil {
		t.Fatal(err)
	}
	reg.PutManifest(tag, ocispec.MediaTypeImageManifest, failed)
	_, err = c.Get(ctx, testCell)
	if !errors.Is(err, remote.ErrRollback) || errors.Is(err, remote.ErrFailedCell) {
		t.Errorf("Get(an older failure record served again) = %v, want a rollback refusal, not a known failure", err)
	}
}
