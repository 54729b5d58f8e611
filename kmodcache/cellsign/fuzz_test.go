package cellsign

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// loadTrustFuzz and loadSignerFuzz are the calls the fuzz targets make (local
// wrappers, so that a change of their signatures is one line here).
func loadTrustFuzz(paths ...string) (*Trust, error) { return LoadTrust(paths...) }

func loadSignerFuzz(path string) (*Signer, error) { return LoadSigner(path) }

// trustedKeys returns a Trust's keys by id.
func trustedKeys(t *Trust) map[string]ed25519.PublicKey { return t.keys }

var keyIDPattern = regexp.MustCompile(`^ed25519:[0-9a-f]{16}$`)

// fuzzKey is a fixed Ed25519 key pair, PEM as openssl writes it.
func fuzzKey(seed byte) (priv, pub []byte) {
	sk := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	skDER, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		panic(err)
	}
	pkDER, err := x509.MarshalPKIXPublicKey(sk.Public())
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: skDER}), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkDER})
}

// keyFileSeeds are key files as a team might hand them over, good and bad.
func keyFileSeeds() [][]byte {
	priv1, pub1 := fuzzKey(1)
	priv2, pub2 := fuzzKey(2)
	ecPub := "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEc2dWG5yk4v3ey19nuihi6EyAJW6m\nFyf7LVHaBd4wmSMUOgmXt7DQBuvMqMqGgQ/fSrxbsyqvqpyldWt67affDw==\n-----END PUBLIC KEY-----\n"
	x25519Pub := "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEAXr/FG1KppWiyf0VoW390Vd9+WDOQr7MqHFPLKmVUgFE=\n-----END PUBLIC KEY-----\n"
	x25519Priv := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VuBCIEIHA1kLU8BTvUHvAMjUnSeUq6XZdMIdEO4r7ZtKM4AR1v\n-----END PRIVATE KEY-----\n"
	return [][]byte{
		pub1, priv1, slices.Concat(pub1, pub2), slices.Concat(priv1, pub2), slices.Concat(pub1, priv2), slices.Concat([]byte("# the builders' key\n"), pub2),
		[]byte(ecPub), []byte(x25519Pub), []byte(x25519Priv),
		[]byte(strings.Replace(string(pub1), "PUBLIC KEY", "CERTIFICATE", 2)),
		[]byte(strings.Replace(string(pub1), "PUBLIC KEY", "ENCRYPTED PRIVATE KEY", 2)),
		[]byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"),
		[]byte("-----BEGIN PUBLIC KEY-----\nProc-Type: 4,ENCRYPTED\n\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"),
		pub1[:len(pub1)/2], []byte(""), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE builder@example\n"),
	}
}

// keyFile writes b to a key file of its own.
func keyFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pemKeyIDs returns the ids of the Ed25519 keys (public, or the public half
// of private ones) in the PEM blocks of b: what a key file could ask to trust.
func pemKeyIDs(b []byte) map[string]bool {
	ids := map[string]bool{}
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return ids
		}
		if k, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
			if pub, ok := k.(ed25519.PublicKey); ok {
				ids[KeyID(pub)] = true
			}
		}
		if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			if sk, ok := k.(ed25519.PrivateKey); ok {
				ids[KeyID(sk.Public().(ed25519.PublicKey))] = true
			}
		}
	}
}

// FuzzLoadTrust checks the reader of trusted key files (--trust, an image's
// remote_trust, remote.yaml's trust list, a root's staged keys): no panic;
// an error comes with no trust and names the file; accepted trust holds at
// least one key, every id well-formed and the KeyID of its key, and only
// keys the file holds (nothing is trusted that the file does not name); and
// it round-trips: each trusted key written to a file of its own as a PEM
// public key is trusted again under the same id.
func FuzzLoadTrust(f *testing.F) {
	for _, s := range keyFileSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := keyFile(t, data)
		tr, err := loadTrustFuzz(p)
		if err != nil {
			if tr != nil {
				t.Fatalf("LoadTrust(%q) = %v with error %v, want no trust", data, tr.IDs(), err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("LoadTrust(%q) = %v: the error does not name %s", data, err, p)
			}
			return
		}
		keys := trustedKeys(tr)
		in := pemKeyIDs(data)
		if len(keys) == 0 {
			t.Fatalf("LoadTrust(%q) trusts no key", data)
		}
		var files []string
		for id, pub := range keys {
			if !keyIDPattern.MatchString(id) || id != KeyID(pub) {
				t.Fatalf("LoadTrust(%q) trusts %x as %q, want %q", data, pub, id, KeyID(pub))
			}
			if !in[id] {
				t.Fatalf("LoadTrust(%q) trusts %s, which the file does not hold", data, id)
			}
			der, err := x509.MarshalPKIXPublicKey(pub)
			if err != nil {
				t.Fatalf("LoadTrust(%q) trusts %s, which does not marshal: %v", data, id, err)
			}
			files = append(files, keyFile(t, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
		}
		for id := range in {
			if _, ok := keys[id]; !ok {
				t.Fatalf("LoadTrust(%q) does not trust %s, which the file holds", data, id)
			}
		}
		again, err := loadTrustFuzz(files...)
		if err != nil || !slices.Equal(again.IDs(), tr.IDs()) {
			t.Fatalf("LoadTrust of the trusted keys of %q written back = %v, %v; want %v", data, again, err, tr.IDs())
		}
	})
}

// FuzzLoadSigner checks the reader of a signing key file (--sign, an image's
// remote_sign): no panic; an error comes with no signer and names the file;
// an accepted signer's id is well-formed and the KeyID of its public key;
// what it signs verifies against its own trust, and against LoadTrust of the
// same file (a private key file trusts its public half), and not for another
// subject; and it round-trips: its key written back as PKCS #8 PEM loads to
// the same id.
func FuzzLoadSigner(f *testing.F) {
	for _, s := range keyFileSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := keyFile(t, data)
		s, err := loadSignerFuzz(p)
		if err != nil {
			if s != nil {
				t.Fatalf("LoadSigner(%q) = %v with error %v, want no signer", data, s.ID, err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("LoadSigner(%q) = %v: the error does not name %s", data, err, p)
			}
			return
		}
		if !keyIDPattern.MatchString(s.ID) || s.ID != KeyID(s.Public()) {
			t.Fatalf("LoadSigner(%q) has id %q, want %q", data, s.ID, KeyID(s.Public()))
		}
		want := Statement{Key: "sha256:4f1c0d6e", State: "ok", Subject: "sha256:9a0b7c", Driver: "kpreload-edu", Version: "1.0.0", Kernel: "6.1.0-56-cloud-amd64", Generation: 1}
		stmt, sig, err := s.Sign(want)
		if err != nil {
			t.Fatalf("LoadSigner(%q): Sign = %v", data, err)
		}
		if got, err := s.Trust().Verify(stmt, sig); err != nil || got.Subject != want.Subject {
			t.Fatalf("LoadSigner(%q): its own signature does not verify: %v, %v", data, got, err)
		}
		other := want
		other.Subject += "0"
		otherStmt, _, err := s.Sign(other)
		if err != nil {
			t.Fatalf("LoadSigner(%q): Sign = %v", data, err)
		}
		if _, err := s.Trust().Verify(otherStmt, sig); err == nil {
			t.Fatalf("LoadSigner(%q): its signature verifies for another subject", data)
		}
		tr, err := loadTrustFuzz(p)
		if err != nil {
			t.Fatalf("LoadTrust of the signing key %q = %v", data, err)
		}
		if _, err := tr.Verify(stmt, sig); err != nil {
			t.Fatalf("LoadTrust of the signing key %q does not verify its signature: %v", data, err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(s.key)
		if err != nil {
			t.Fatalf("LoadSigner(%q): the key does not marshal: %v", data, err)
		}
		again, err := loadSignerFuzz(keyFile(t, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})))
		if err != nil || again.ID != s.ID {
			t.Fatalf("LoadSigner of the key of %q written back = %v, %v; want %s", data, again, err, s.ID)
		}
	})
}
