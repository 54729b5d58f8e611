package modkey

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/kmodcache/modsig"
	"github.com/kpreload/kpreload/kmodcache/store"
	"github.com/kpreload/kpreload/testsupport/testenv"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestEnsureMakesOnceAndReuses(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	if _, err := Load(cache); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a cache without a key = %v, want fs.ErrNotExist", err)
	}
	k, created, err := Ensure(cache)
	if err != nil || !created {
		t.Fatalf("Ensure = %v, created %v; want a new key", err, created)
	}
	for _, c := range []struct {
		path string
		want os.FileMode
	}{{k.Dir, 0o700}, {k.Key, 0o600}, {k.Cert, 0o644}, {k.CertPEM, 0o644}} {
		if got := mode(t, c.path); got != c.want {
			t.Errorf("%s mode %04o, want %04o", c.path, got, c.want)
		}
	}
	if k.Dir != filepath.Join(cache, "module-signing") {
		t.Errorf("key directory %s, want it in the cache", k.Dir)
	}
	again, created, err := Ensure(cache)
	if err != nil || created || !again.Certificate.Equal(k.Certificate) {
		t.Errorf("second Ensure = %v, created %v, same cert %v; want the same key reused", err, created, err == nil && again.Certificate.Equal(k.Certificate))
	}
	// PEM and DER hold the same certificate; the key is PKCS #8 and matches it.
	b, _ := os.ReadFile(k.CertPEM)
	if blk, _ := pem.Decode(b); blk == nil || !bytes.Equal(blk.Bytes, k.Certificate.Raw) {
		t.Errorf("%s is not the certificate of %s", k.CertPEM, k.Cert)
	}
	kb, _ := os.ReadFile(k.Key)
	blk, _ := pem.Decode(kb)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("%s is not a PEM PKCS #8 private key", k.Key)
	}
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if signer, ok := priv.(crypto.Signer); !ok || !k.Certificate.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(signer.Public()) {
		t.Error("the private key does not match the certificate")
	}
}

func TestEnsureConcurrent(t *testing.T) {
	cache := t.TempDir()
	var wg sync.WaitGroup
	keys := make([]*Key, 4)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, _, err := Ensure(cache)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if k == nil || keys[0] == nil || !k.Certificate.Equal(keys[0].Certificate) {
			t.Fatal("builds that made the key at once ended with different keys")
		}
	}
	ents, _ := os.ReadDir(cache)
	if len(ents) != 1 {
		t.Errorf("cache holds %d entries after concurrent Ensure, want only module-signing: %v", len(ents), ents)
	}
}

func TestCertificateFields(t *testing.T) {
	k, _, err := Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := k.Certificate
	if got, want := c.Subject.CommonName, CommonName; got != want {
		t.Errorf("CN = %q, want %q", got, want)
	}
	if c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA %v (basic constraints %v), want a non-CA certificate", c.IsCA, c.BasicConstraintsValid)
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("key usage %v, want digitalSignature", c.KeyUsage)
	}
	if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageCodeSigning {
		t.Errorf("extended key usage %v, want codeSigning", c.ExtKeyUsage)
	}
	if len(c.UnknownExtKeyUsage) != 1 || !c.UnknownExtKeyUsage[0].Equal(OIDModuleSigning) {
		t.Errorf("other extended key usages %v, want the module signing OID", c.UnknownExtKeyUsage)
	}
	if len(c.SubjectKeyId) != 20 || !bytes.Equal(c.SubjectKeyId, c.AuthorityKeyId) {
		t.Errorf("subject key id %x, authority key id %x, want the same 20 bytes", c.SubjectKeyId, c.AuthorityKeyId)
	}
	if err := c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if c.NotAfter.Year()-c.NotBefore.Year() < 99 {
		t.Errorf("valid %v to %v, want 100 years as DKMS's key", c.NotBefore, c.NotAfter)
	}
	// OpenSSL reads it the same way (mokutil and sign-file use OpenSSL).
	out, err := exec.Command("openssl", "x509", "-inform", "DER", "-in", k.Cert, "-noout", "-text").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl x509: %v\n%s", err, out)
	}
	for _, want := range []string{"CN = " + CommonName, "Code Signing, 1.3.6.1.4.1.2312.16.1.2", "CA:FALSE", "Digital Signature"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("openssl x509 -text lacks %q:\n%s", want, out)
		}
	}
}

func TestLoadRefusesReadableKey(t *testing.T) {
	cache := t.TempDir()
	k, _, err := Ensure(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(k.Key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Ensure(cache); err == nil || !strings.Contains(err.Error(), "mode 0644") || !strings.Contains(err.Error(), k.Key) {
		t.Errorf("Ensure with a world-readable key = %v, want a refusal naming it and its mode", err)
	}
}

// TestRotateResigns signs a cell with the first key the real sign-file of a
// Debian kernel, rotates the key and re-signs the cell: the new cell is
// signed by the new certificate, found under the cache key a build with the
// new key computes, and the old cell is gone; the old key is kept retired.
func TestRotateResigns(t *testing.T) {
	const kver = "6.1.0-56-cloud-amd64"
	tree := testenv.KernelTreeOrSkipShort(t, kver)
	signFile, err := dkms.SignFile(filepath.Join(tree, "usr", "src", "linux-headers-"+kver))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	old, _, err := Ensure(cache)
	if err != nil {
		t.Fatal(err)
	}
	ko := testenv.SyntheticModule(t, "kpreload_syn", kver)
	ctx := context.Background()
	if err := dkms.Sign(ctx, dkms.SignRequest{SignFile: signFile, Hash: "sha256", Key: old.Key, Cert: old.Cert, Module: ko}); err != nil {
		t.Fatal(err)
	}
	oldID, _ := dkms.CertID(old.Cert)
	st, err := store.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"schema": "test", "kernel": kver, SigningKeyEntry: oldID + " sha256"}
	_, from, err := st.AddFiles(ctx, store.AddRequest{Driver: "syn", Version: "1.0", Flavor: "open", Files: []string{ko}, CacheKey: key})
	if err != nil {
		t.Fatal(err)
	}
	// An unsigned cell beside it is left alone.
	plain := testenv.SyntheticModule(t, "kpreload_plain", kver)
	_, other, err := st.AddFiles(ctx, store.AddRequest{Driver: "plain", Version: "1.0", Flavor: "open", Files: []string{plain}, CacheKey: map[string]string{"schema": "test", SigningKeyEntry: ""}})
	if err != nil {
		t.Fatal(err)
	}

	retired, cur, err := Rotate(cache)
	if err != nil {
		t.Fatal(err)
	}
	if !retired.Certificate.Equal(old.Certificate) || cur.Certificate.Equal(old.Certificate) {
		t.Fatal("Rotate did not retire the old key and make a new one")
	}
	if got := mode(t, retired.Key); got != 0o600 {
		t.Errorf("retired key mode %04o, want 0600", got)
	}
	if l, err := Load(cache); err != nil || !l.Certificate.Equal(cur.Certificate) {
		t.Fatalf("Load after Rotate = %v, want the new key", err)
	}
	done, err := Resign(ctx, st, retired, cur, func(string) (string, error) { return signFile, nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].From != from || done[0].Driver != "syn" {
		t.Fatalf("Resign = %+v, want the one signed cell %s", done, from)
	}
	curID, _ := dkms.CertID(cur.Cert)
	key[SigningKeyEntry] = curID + " sha256"
	id, ok, err := st.Lookup(key)
	if err != nil || !ok || id != done[0].To {
		t.Fatalf("Lookup(new key) = %s, %v, %v; want %s", id, ok, err, done[0].To)
	}
	m, err := st.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := modsig.ReadFile(st.ObjectPath(m.Modules[0].SHA256))
	if err != nil {
		t.Fatal(err)
	}
	if sig.Signer != CommonName || sig.SigKey != cur.SigKey() {
		t.Errorf("re-signed module signer %q key %s, want %q %s", sig.Signer, sig.SigKey, CommonName, cur.SigKey())
	}
	if _, err := st.Get(from); err == nil {
		t.Errorf("the cell signed by the old key %s is still there", from)
	}
	if _, err := st.Get(other); err != nil {
		t.Errorf("the unsigned cell went: %v", err)
	}
}

func TestStripSignature(t *testing.T) {
	body := []byte("\x7fELF module body")
	sig := []byte("PKCS7")
	info := []byte{0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(sig))}
	signed := append(append(append(append([]byte{}, body...), sig...), info...), modsig.Magic...)
	for _, c := range []struct {
		name string
		in   []byte
		want []byte
		err  string
	}{
		{"signed", signed, body, ""},
		{"unsigned", body, nil, "not signed"},
		{"too long", append(append(append([]byte{}, body...), 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0), modsig.Magic...), nil, "does not fit"},
	} {
		got, err := stripSignature(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
