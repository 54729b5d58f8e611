package bootloader

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/builder/internal/runner/runnertest"
)

// recorder stands in for virt-fw-vars: it records each command line, makes
// the variable store virt-fw-vars would, and fails the command that begins
// or ends with fail; LookPath does not find missing.
func recorder(t *testing.T, fail string, missing ...string) *runnertest.Recorder {
	return &runnertest.Recorder{Fail: fail, Missing: missing, Make: func(c runner.Cmd) ([]byte, error) {
		if c.Name != "virt-fw-vars" {
			return nil, nil
		}
		return nil, os.WriteFile(c.Args[len(c.Args)-1], []byte("fake"), 0o644)
	}}
}

// tools are the real tools, run by r.
func tools(r *runnertest.Recorder) Tools {
	h := Host{Runner: r}
	return Tools{Runner: r, Grub: h, VirtFwVars: h}
}

// TestSecureBootFiles writes the module certificate into the root and beside
// the image, and enrolls it through the faked virt-fw-vars.
func TestSecureBootFiles(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(0x1234), Subject: pkix.Name{CommonName: "unit module key"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	root, tmp := t.TempDir(), t.TempDir()
	f := recorder(t, "")
	k, err := SecureBootFiles(context.Background(), tools(f), root, tmp, "/out", "img", cert)
	if err != nil {
		t.Fatal(err)
	}
	if k.Subject != "unit module key" || k.SigKey != "12:34" || k.OVMFVars != "/out/img.ovmf-vars.fd" {
		t.Errorf("module key = %+v", k)
	}
	for _, p := range []string{filepath.Join(root, k.InImage), filepath.Join(tmp, "img.module-key.der"), filepath.Join(tmp, "img.module-key.pem"), filepath.Join(tmp, "img.ovmf-vars.fd")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%v", err)
		}
	}
	if len(f.Ran("virt-fw-vars --input ")) != 1 {
		t.Errorf("ran %q, want virt-fw-vars", f.Ran(""))
	}
	if _, err := SecureBootFiles(context.Background(), tools(recorder(t, "", "virt-fw-vars")), root, tmp, "/out", "img", cert); err == nil || !strings.Contains(err.Error(), "virt-fw-vars is missing") {
		t.Errorf("SecureBootFiles without virt-fw-vars = %v", err)
	}
	if _, err := SecureBootFiles(context.Background(), tools(recorder(t, "virt-fw-vars")), root, tmp, "/out", "img", cert); err == nil || !strings.Contains(err.Error(), "enroll the module key") {
		t.Errorf("SecureBootFiles with virt-fw-vars failing = %v", err)
	}
	// A kernel that is no signed PE image is refused.
	kernel := filepath.Join(t.TempDir(), "vmlinuz")
	os.WriteFile(kernel, []byte("not a PE file"), 0o644)
	if err := CheckSignedKernel(kernel); err == nil || !strings.Contains(err.Error(), kernel) {
		t.Errorf("CheckSignedKernel(not PE) = %v", err)
	}
}
