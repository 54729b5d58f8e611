package keyscmd

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kpreload/kpreload/builder/modkey"
	"github.com/kpreload/kpreload/internal/inroot/inroottest"
)

// TestKeysHelpExamples runs every example of keys show, export and rotate
// exactly as written, in a directory whose ./cache has a key made as an
// image build makes it.
func TestKeysHelpExamples(t *testing.T) {
	t.Chdir(t.TempDir())
	// Before any key: a clear refusal saying how one is made.
	code, _, errOut := runCLI("keys", "show", "--cache", "cache")
	if code == 0 || !strings.Contains(errOut, "no module signing key in cache/module-signing yet") || !strings.Contains(errOut, "--secure-boot") {
		t.Errorf("keys show without a key = exit %d, %q", code, errOut)
	}
	k, _, err := modkey.Ensure("cache")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range cli.HelpExamples(t, "keys", "show") {
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		if strings.Contains(strings.Join(args, " "), "--json") {
			var got keyJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%q: %v\n%s", args, err, out)
			}
			if got.Key != k.Key || got.Cert != k.Cert || got.SigKey != k.SigKey() || got.Subject != modkey.CommonName || len(got.Enroll) != 2 {
				t.Errorf("%q = %+v, want the cache's key", args, got)
			}
			continue
		}
		for _, want := range []string{k.Key + " (mode 0600", "mokutil --import " + k.Cert, "virt-fw-vars --input VARS.fd --add-mok " + modkey.ShimLockGUID + " " + k.CertPEM, k.SigKey()} {
			if !strings.Contains(out, want) {
				t.Errorf("%q lacks %q:\n%s", args, want, out)
			}
		}
	}
	for _, args := range cli.HelpExamples(t, "keys", "export") {
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		file := args[len(args)-1]
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if blk, _ := pem.Decode(b); blk != nil {
			b = blk.Bytes
		}
		if c, err := x509.ParseCertificate(b); err != nil || !c.Equal(k.Certificate) {
			t.Errorf("%q wrote %s: %v, want the certificate", args, file, err)
		}
		if strings.Contains(string(b), "PRIVATE") || !strings.Contains(out, "mokutil --import "+file) {
			t.Errorf("%q: printed %q", args, out)
		}
	}
	for _, args := range cli.HelpExamples(t, "keys", "rotate") {
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		cur, err := modkey.Load("cache")
		if err != nil || cur.Certificate.Equal(k.Certificate) {
			t.Fatalf("%q: the key did not change (%v)", args, err)
		}
		if !strings.Contains(out, "retired the key with sig_key "+k.SigKey()) || !strings.Contains(out, "0 cell(s) re-signed") || !strings.Contains(out, cur.SigKey()) {
			t.Errorf("%q printed:\n%s", args, out)
		}
	}
	if code, _, errOut := runCLI("keys", "export", "--cache", "cache", "--format", "p12", "-o", "x"); code == 0 || !strings.Contains(errOut, `--format "p12": want der or pem`) {
		t.Errorf("export --format p12 = exit %d, %q", code, errOut)
	}
}

// TestKeysRefuseSpecialFiles: keys show and keys export refuse at once, naming
// the file, a key directory whose private key, certificate or PEM certificate
// is a FIFO, a device, a directory or a file too large for a key: none is
// waited on (a guard fails the test rather than let it hang), and export
// writes nothing.
func TestKeysRefuseSpecialFiles(t *testing.T) {
	for _, name := range []string{modkey.CertName, modkey.CertPEMName, modkey.KeyName} {
		for _, kind := range inroottest.Specials(modkey.MaxFile) {
			t.Run(name+" "+kind.Name, func(t *testing.T) {
				t.Chdir(t.TempDir())
				k, _, err := modkey.Ensure("cache")
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(k.Dir, name)
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				kind.Make(t, p)
				for _, args := range [][]string{
					{"keys", "show", "--cache", "cache"},
					{"keys", "show", "--cache", "cache", "--json"},
					{"keys", "export", "--cache", "cache", "-o", "mok.der"},
					{"keys", "export", "--cache", "cache", "--format", "pem", "-o", "mok.pem"},
				} {
					var code int
					var errOut string
					start := time.Now()
					if err := inroottest.Within(5*time.Second, func() error {
						code, _, errOut = runCLI(args...)
						return nil
					}); err != nil {
						t.Fatalf("kpreload %s with %s a %s: %v", strings.Join(args, " "), name, kind.Name, err)
					}
					t.Logf("kpreload %s: exit %d in %v: %s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(errOut))
					if code == 0 || !strings.Contains(errOut, kind.Want) || !strings.Contains(errOut, p) {
						t.Errorf("kpreload %s with %s a %s: exit %d, %q; want a refusal naming %s: %q", strings.Join(args, " "), name, kind.Name, code, errOut, p, kind.Want)
					}
					if _, err := os.Lstat(args[len(args)-1]); args[1] == "export" && err == nil {
						t.Errorf("kpreload %s wrote %s", strings.Join(args, " "), args[len(args)-1])
					}
				}
			})
		}
	}
}
