package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RegistryBinary is Debian's docker-registry (distribution 2.8), installed by
// scripts/deps.sh.
const RegistryBinary = "/usr/bin/docker-registry"

// Registry is a real OCI registry (distribution) a test started on loopback.
type Registry struct {
	// Addr is HOST:PORT.
	Addr string
	// Storage is the registry's filesystem storage root.
	Storage string
}

// BlobPath returns where the registry stores the blob with the given
// SHA-256 (hex): distribution's filesystem layout.
func (r *Registry) BlobPath(sha string) string {
	return filepath.Join(r.Storage, "docker", "registry", "v2", "blobs", "sha256", sha[:2], sha, "data")
}

// StartRegistry runs Debian's docker-registry on a free loopback port with
// its storage in a temporary directory, until the test ends. The test fails
// (it does not skip) when the binary is missing.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	if _, err := os.Stat(RegistryBinary); err != nil {
		t.Fatalf("the OCI registry %s is missing (%v): scripts/deps.sh installs Debian's docker-registry (make test runs it)", RegistryBinary, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	config := filepath.Join(dir, "config.yml")
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, storage, addr)
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(RegistryBinary, "serve", config)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", RegistryBinary, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("%s exited: %v\n%s", RegistryBinary, err, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("registry on %s did not answer within 20s (last error %v)\n%s", addr, err, strings.TrimSpace(string(b)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Registry{Addr: addr, Storage: storage}
}
