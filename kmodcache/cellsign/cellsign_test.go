package cellsign

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// openssl makes a key pair with the real OpenSSL, as a team would.
func openssl(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	for _, args := range [][]string{
		{"genpkey", "-algorithm", "ed25519", "-out", priv},
		{"pkey", "-in", priv, "-pubout", "-out", pub},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v: %s (openssl is installed by scripts/deps.sh)", strings.Join(args, " "), err, out)
		}
	}
	return priv, pub
}

func TestSignVerify(t *testing.T) {
	dir := t.TempDir()
	teamKey, teamPub := openssl(t, dir, "team")
	otherKey, _ := openssl(t, dir, "other")
	team, err := LoadSigner(teamKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadSigner(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	trust, err := LoadTrust(teamPub)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := trust.IDs(), []string{team.ID}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("trusted ids = %v, want %v", got, want)
	}
	good := team.Sign("k1", "ok", "set1")
	tests := []struct {
		name                string
		key, state, subject string
		sig                 Signature
		want                error
	}{
		{"signed by the team", "k1", "ok", "set1", good, nil},
		{"another set under the key", "k1", "ok", "set2", good, ErrBadSignature},
		{"another key's cell", "k2", "ok", "set1", good, ErrBadSignature},
		{"a failure record", "k1", "failed", "set1", good, ErrBadSignature},
		{"unsigned", "k1", "ok", "set1", Signature{}, ErrUnsigned},
		{"a foreign key", "k1", "ok", "set1", other.Sign("k1", "ok", "set1"), ErrUntrusted},
		{"a foreign signature under the team's id", "k1", "ok", "set1", Signature{KeyID: team.ID, Value: other.Sign("k1", "ok", "set1").Value}, ErrBadSignature},
		{"garbage", "k1", "ok", "set1", Signature{KeyID: team.ID, Value: "!!"}, ErrBadSignature},
	}
	for _, tt := range tests {
		err := trust.Verify(tt.key, tt.state, tt.subject, tt.sig)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Verify = %v, want %v", tt.name, err, tt.want)
		}
		if errors.Is(err, ErrUntrusted) && !strings.Contains(err.Error(), other.ID) {
			t.Errorf("%s: %v does not name the foreign key %s", tt.name, err, other.ID)
		}
	}
}

func TestGenerateAndOpenSSLAgree(t *testing.T) {
	dir := t.TempDir()
	s, err := Generate(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "k.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode = %v, %v; want 0600", fi.Mode(), err)
	}
	if _, err := Generate(filepath.Join(dir, "k.key"), filepath.Join(dir, "k2.pub")); err == nil {
		t.Error("Generate over an existing private key: no error")
	}
	// OpenSSL reads what Generate wrote and derives the same public key.
	out, err := exec.Command("openssl", "pkey", "-in", filepath.Join(dir, "k.key"), "-pubout").Output()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "k.pub"))
	if string(out) != string(pub) {
		t.Errorf("openssl's public key %q, Generate's %q", out, pub)
	}
	trust, err := LoadTrust(filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.Verify("k", "ok", "s", s.Sign("k", "ok", "s")); err != nil {
		t.Errorf("Verify(Generate's signature) = %v", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rsa := filepath.Join(dir, "rsa.key")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:1024", "-out", rsa).CombinedOutput(); err != nil {
		t.Fatalf("openssl: %v: %s", err, out)
	}
	tests := []struct{ name, path, want string }{
		{"not PEM", write("x", "hello"), "no PEM block"},
		{"too large", write("big", strings.Repeat("A", maxKeyFile+10)), "larger than"},
		{"a certificate request", write("csr", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), "want"},
		{"an RSA key", rsa, "want an Ed25519 key"},
		{"missing", filepath.Join(dir, "absent"), "no such file"},
	}
	for _, tt := range tests {
		if _, err := LoadTrust(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("LoadTrust(%s) = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := LoadSigner(rsa); err == nil || !strings.Contains(err.Error(), "Ed25519") {
		t.Errorf("LoadSigner(RSA key) = %v, want a refusal naming Ed25519", err)
	}
}
