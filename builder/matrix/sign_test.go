package matrix

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kpreload/kpreload/testsupport/testenv"

	"github.com/kpreload/kpreload/builder/dkms"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/kmodcache/modinfo"
	"github.com/kpreload/kpreload/kmodcache/modsig"
	"github.com/kpreload/kpreload/kmodcache/store"
)

// signingPair makes a self-signed RSA key and certificate with openssl in
// dir and returns their paths.
func signingPair(t *testing.T, dir, cn string) (key, cert string) {
	t.Helper()
	key, cert = filepath.Join(dir, "signing_key.pem"), filepath.Join(dir, "signing_cert.pem")
	out, err := exec.Command("openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
		"-subj", "/CN="+cn, "-keyout", key, "-out", cert).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl req (install openssl: scripts/deps.sh): %v\n%s", err, out)
	}
	return key, cert
}

// signedRecipe writes a copy of the test driver recipe and source into dir,
// with a signing section naming key and cert, for kernel only.
func signedRecipe(t *testing.T, dir, key, cert, kernel string) *recipe.Recipe {
	t.Helper()
	copyTree(t, filepath.Join(testenv.RepoRoot(t), "recipes", "testdriver"), filepath.Join(dir, "testdriver"))
	yml := "name: testdriver-signed\n" +
		"driver: {name: kpreload-edu, version: 1.0.0}\n" +
		"flavor: open\n" +
		"source: {dir: testdriver}\n" +
		"modules: [kpreload_edu]\n" +
		"signing: {key: " + key + ", cert: " + cert + "}\n" +
		"kernels: {releases: [" + kernel + "]}\n"
	file := filepath.Join(dir, "testdriver-signed.yaml")
	if err := os.WriteFile(file, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRealSigning builds the test driver with the real dkms for one kernel
// with a signing section: the module in the cache carries a PKCS#7
// signature naming the test certificate, as both our reader and kmod's
// modinfo see it, and the cache key names the certificate.
func TestRealSigning(t *testing.T) {
	if testing.Short() {
		t.Skip("real dkms build: skipped with -short")
	}
	requireTools(t)
	requireKernels(t)
	kver := testKernels[0]
	dir := t.TempDir()
	const cn = "kpreload test signing key"
	_, cert := signingPair(t, dir, cn)
	r := signedRecipe(t, dir, "signing_key.pem", "signing_cert.pem", kver)

	opts := Options{
		Recipes:     []*recipe.Recipe{r},
		CacheDir:    filepath.Join(dir, "cache"),
		DownloadDir: downloadDir(),
		LogDir:      filepath.Join(dir, "logs"),
		TempDir:     t.TempDir(),
	}
	results, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run(signed testdriver): %v (%+v)", err, results)
	}
	res := results[0]
	if res.State != StateOK {
		t.Fatalf("signed testdriver/%s = %s, want ok", kver, res.State)
	}
	certID, err := dkms.CertID(cert)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Key["signing_key"], certID+" sha256"; got != want {
		t.Errorf("key signing_key = %q, want %q", got, want)
	}
	st, err := store.Open(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Get(res.SetID)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Modules) != 1 || !m.Modules[0].Signed {
		t.Fatalf("manifest modules = %+v, want one signed module", m.Modules)
	}
	obj := st.ObjectPath(m.Modules[0].SHA256)
	info, err := modinfo.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Signed || info.Name != "kpreload_edu" {
		t.Errorf("modinfo of the cached module: name %q signed %v, want kpreload_edu signed", info.Name, info.Signed)
	}
	// The cell stores the signed module compressed (ModuleCompression):
	// the signature is on the plain module inside.
	elf, _, err := modinfo.Open(obj)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := modsig.Parse(elf)
	if err != nil {
		t.Fatal(err)
	}
	serial, _, err := dkms.CertSigKey(cert)
	if err != nil {
		t.Fatal(err)
	}
	if sig.Signer != cn || sig.SigKey != serial || sig.HashAlgo != "sha256" {
		t.Errorf("signature = %+v, want signer %q sig_key %s sha256", sig, cn, serial)
	}
	// kmod's modinfo (built with libcrypto) is the oracle for the same
	// fields; it takes a path only when it ends in .ko.
	ko := filepath.Join(dir, "kpreload_edu.ko")
	if err := os.WriteFile(ko, elf, 0o644); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{"signer": cn, "sig_key": serial, "sig_hashalgo": "sha256"} {
		out, err := exec.Command("modinfo", "-F", field, ko).Output()
		if err != nil {
			t.Fatalf("modinfo -F %s: %v", field, err)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("kmod modinfo -F %s = %q, want %q", field, got, want)
		}
	}
}

// TestSigningMissingKey: a recipe whose signing key does not exist fails
// its cells with an error naming the key, before anything is built.
func TestSigningMissingKey(t *testing.T) {
	requireKernels(t)
	dir := t.TempDir()
	_, cert := signingPair(t, dir, "kpreload test")
	r := signedRecipe(t, dir, "no-such-key.pem", filepath.Base(cert), testKernels[0])
	f := &fakeDriver{}
	results, err := Run(context.Background(), Options{
		Recipes:     []*recipe.Recipe{r},
		CacheDir:    filepath.Join(dir, "cache"),
		DownloadDir: downloadDir(),
		LogDir:      filepath.Join(dir, "logs"),
		TempDir:     t.TempDir(),
		Driver:      f,
	})
	if err == nil || len(results) != 1 {
		t.Fatalf("Run = %v, %d results; want a failed cell", err, len(results))
	}
	want := filepath.Join(dir, "no-such-key.pem")
	if got := results[0]; got.State != StateFailed || !strings.Contains(got.FirstError, want) || !strings.Contains(got.FirstError, "signing.key") {
		t.Errorf("cell = %s %q, want failed naming signing.key %s", got.State, got.FirstError, want)
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("dkms ran %d times, want 0", n)
	}
}
