package image

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
)

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
	f := &fakeRunner{t: t}
	k, err := secureBootFiles(context.Background(), NewTools(f), root, tmp, "/out", "img", cert)
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
	if len(f.ran("virt-fw-vars --input ")) != 1 {
		t.Errorf("ran %q, want virt-fw-vars", f.cmds)
	}
	if _, err := secureBootFiles(context.Background(), NewTools(&fakeRunner{t: t, missing: []string{"virt-fw-vars"}}), root, tmp, "/out", "img", cert); err == nil || !strings.Contains(err.Error(), "virt-fw-vars is missing") {
		t.Errorf("secureBootFiles without virt-fw-vars = %v", err)
	}
	if _, err := secureBootFiles(context.Background(), NewTools(&fakeRunner{t: t, fail: "virt-fw-vars"}), root, tmp, "/out", "img", cert); err == nil || !strings.Contains(err.Error(), "enroll the module key") {
		t.Errorf("secureBootFiles with virt-fw-vars failing = %v", err)
	}
	// A kernel that is no signed PE image is refused.
	kernel := filepath.Join(t.TempDir(), "vmlinuz")
	os.WriteFile(kernel, []byte("not a PE file"), 0o644)
	if err := checkSignedKernel(kernel); err == nil || !strings.Contains(err.Error(), kernel) {
		t.Errorf("checkSignedKernel(not PE) = %v", err)
	}
}
