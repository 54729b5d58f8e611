package cellsign

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	st := Statement{Key: "k1", State: "ok", Subject: "set1", Driver: "d", Version: "1", Kernel: "6.1", Recipe: "r", Created: "2026-01-02T03:04:05Z", Generation: 7}
	good, goodSig, err := team.Sign(st)
	if err != nil {
		t.Fatal(err)
	}
	foreign, foreignSig, _ := other.Sign(st)
	// Each field a client chooses by, changed after signing.
	edits := map[string]func(*Statement){
		"key":        func(s *Statement) { s.Key = "k2" },
		"state":      func(s *Statement) { s.State = "failed" },
		"set":        func(s *Statement) { s.Subject = "set2" },
		"driver":     func(s *Statement) { s.Driver = "e" },
		"version":    func(s *Statement) { s.Version = "2" },
		"flavor":     func(s *Statement) { s.Flavor = "open" },
		"kernel":     func(s *Statement) { s.Kernel = "6.12" },
		"recipe":     func(s *Statement) { s.Recipe = "forged" },
		"created":    func(s *Statement) { s.Created = "2030-01-01T00:00:00Z" },
		"generation": func(s *Statement) { s.Generation = 8 },
	}
	tests := []struct {
		name      string
		statement []byte
		sig       Signature
		want      error
	}{
		{"signed by the team", good, goodSig, nil},
		{"unsigned", good, Signature{}, ErrUnsigned},
		{"a foreign key", foreign, foreignSig, ErrUntrusted},
		{"a foreign signature under the team's id", foreign, Signature{KeyID: team.ID, Value: foreignSig.Value}, ErrBadSignature},
		{"garbage", good, Signature{KeyID: team.ID, Value: "!!"}, ErrBadSignature},
		{"the old format: a signature without a statement", nil, goodSig, ErrOldFormat},
	}
	for field, edit := range edits {
		var forged Statement
		if err := json.Unmarshal(good, &forged); err != nil {
			t.Fatal(err)
		}
		edit(&forged)
		b, _ := json.Marshal(forged)
		tests = append(tests, struct {
			name      string
			statement []byte
			sig       Signature
			want      error
		}{"the " + field + " changed after signing", b, goodSig, ErrBadSignature})
	}
	for _, tt := range tests {
		got, err := trust.Verify(tt.statement, tt.sig)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Verify = %v, want %v", tt.name, err, tt.want)
		}
		if errors.Is(err, ErrUntrusted) && !strings.Contains(err.Error(), other.ID) {
			t.Errorf("%s: %v does not name the foreign key %s", tt.name, err, other.ID)
		}
		if err == nil {
			st.Format = StatementFormat
			if *got != st {
				t.Errorf("%s: Verify = %+v, want %+v", tt.name, *got, st)
			}
		}
	}
}

// TestVerifyRefusesOtherFormats signs statements of another format or with
// fields this kpreload does not know: refused, naming the format.
func TestVerifyRefusesOtherFormats(t *testing.T) {
	dir := t.TempDir()
	s, err := Generate(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}
	trust := s.Trust()
	for name, statement := range map[string]string{
		"format 3":      `{"format":"kpreload-cell-statement/3","key":"k"}`,
		"unknown field": `{"format":"kpreload-cell-statement/2","key":"k","expires":"x"}`,
		"not JSON":      `kpreload-cell-signature-v1`,
	} {
		sig := ed25519.Sign(s.key, append([]byte(signaturePrefix), statement...))
		_, err := trust.Verify([]byte(statement), Signature{KeyID: s.ID, Value: base64.StdEncoding.EncodeToString(sig)})
		if !errors.Is(err, ErrBadStatement) {
			t.Errorf("%s: Verify = %v, want ErrBadStatement", name, err)
		}
	}
}

// TestLoadTrustBundle trusts every key of a file holding several, and
// refuses a key given twice, naming both places.
func TestLoadTrustBundle(t *testing.T) {
	dir := t.TempDir()
	_, aPub := openssl(t, dir, "a")
	bKey, bPub := openssl(t, dir, "b")
	a, _ := os.ReadFile(aPub)
	b, _ := os.ReadFile(bPub)
	bundle := filepath.Join(dir, "bundle.pub")
	if err := os.WriteFile(bundle, append(append(a, '\n'), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	trust, err := LoadTrust(bundle)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := LoadSigner(bKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := trust.IDs(); len(got) != 2 || !slices.Contains(got, signer.ID) {
		t.Errorf("LoadTrust(two keys in one file) trusts %v, want both keys (%s among them)", got, signer.ID)
	}
	statement, sig, _ := signer.Sign(Statement{Key: "k"})
	if _, err := trust.Verify(statement, sig); err != nil {
		t.Errorf("the second key of a bundle: Verify = %v", err)
	}
	if _, err := LoadTrust(bundle, bPub); err == nil || !strings.Contains(err.Error(), signer.ID) || !strings.Contains(err.Error(), bPub) || !strings.Contains(err.Error(), "key 2 of 2") {
		t.Errorf("LoadTrust(a key twice) = %v, want an error naming the key and both places", err)
	}
	if _, err := LoadSigner(bundle); err == nil || !strings.Contains(err.Error(), "2 PEM blocks") {
		t.Errorf("LoadSigner(two blocks) = %v, want a refusal", err)
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
	statement, sig, _ := s.Sign(Statement{Key: "k", State: "ok", Subject: "s"})
	if _, err := trust.Verify(statement, sig); err != nil {
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
