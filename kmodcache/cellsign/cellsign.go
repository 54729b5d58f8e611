// Package cellsign signs module-cache cells and checks their signatures, so
// that a registry, or anyone who can push to it, cannot decide what /init
// loads: only cells signed by a team's own builders are taken.
//
// Keys are plain Ed25519 key files in PEM, as OpenSSL writes them
// ("openssl genpkey -algorithm ed25519 -out team.key", "openssl pkey -in
// team.key -pubout -out team.pub") or "kpreload cache keygen" does: a
// private key (PKCS #8, "PRIVATE KEY") signs, public keys (PKIX, "PUBLIC
// KEY") are trusted. Go's standard library (crypto/ed25519, crypto/x509)
// reads and uses them: no further dependency, no PKI, no transparency log
// to reach from a build machine without internet.
//
// What is signed binds a cell's name to its content: the cache key's
// digest (the registry tag, manifest.KeyID) and the set id (the SHA-256 of
// the set's canonical manifest, which names every module's digest), or for
// a recorded build failure the digest of its record. A signature is
// carried in the cell's OCI manifest annotations.
package cellsign

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/live/inroot"
)

// Signature is a cell's signature as the registry carries it.
type Signature struct {
	// KeyID names the key that made it (see KeyID).
	KeyID string
	// Value is the Ed25519 signature, base64 (standard encoding).
	Value string
}

// ErrUnsigned, ErrUntrusted and ErrBadSignature are wrapped by Verify's errors.
var (
	ErrUnsigned     = errors.New("the cell is not signed")
	ErrUntrusted    = errors.New("the cell is signed by a key that is not trusted")
	ErrBadSignature = errors.New("the cell's signature does not verify")
)

// maxKeyFile bounds a key file's size.
const maxKeyFile = 64 << 10

// KeyID names a public key: "ed25519:" and the first 16 hex digits of the
// SHA-256 of its PKIX encoding (what "openssl pkey -pubout -outform DER"
// writes).
func KeyID(pub ed25519.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "ed25519:invalid"
	}
	sum := sha256.Sum256(der)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// Payload is the message a signature covers: the cell's cache key digest,
// its state ("ok" or "failed") and its subject (the set id, or the failure
// record's digest).
func Payload(keyID, state, subject string) []byte {
	return []byte("kpreload-cell-signature-v1\ncache-key " + keyID + "\nstate " + state + "\nsubject " + subject + "\n")
}

// Signer signs cells with one private key.
type Signer struct {
	key ed25519.PrivateKey
	// ID is the KeyID of its public key.
	ID string
}

// Sign signs the cell named by the cache key digest keyID.
func (s *Signer) Sign(keyID, state, subject string) Signature {
	sig := ed25519.Sign(s.key, Payload(keyID, state, subject))
	return Signature{KeyID: s.ID, Value: base64.StdEncoding.EncodeToString(sig)}
}

// Public returns the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Trust returns the trust of the signer's own public key alone.
func (s *Signer) Trust() *Trust {
	return &Trust{keys: map[string]ed25519.PublicKey{s.ID: s.Public()}}
}

// Trust is a set of trusted public keys.
type Trust struct {
	keys map[string]ed25519.PublicKey
}

// IDs lists the trusted keys' ids, sorted.
func (t *Trust) IDs() []string {
	var ids []string
	for id := range t.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Verify checks sig over the cell named by keyID (state, subject): it must
// be made by a trusted key and verify. The error names the key.
func (t *Trust) Verify(keyID, state, subject string, sig Signature) error {
	if sig.KeyID == "" && sig.Value == "" {
		return fmt.Errorf("%w (trusted: %s)", ErrUnsigned, strings.Join(t.IDs(), ", "))
	}
	pub, ok := t.keys[sig.KeyID]
	if !ok {
		return fmt.Errorf("%w: %s (trusted: %s)", ErrUntrusted, sig.KeyID, strings.Join(t.IDs(), ", "))
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Value)
	if err != nil || len(raw) != ed25519.SignatureSize || !ed25519.Verify(pub, Payload(keyID, state, subject), raw) {
		return fmt.Errorf("%w with key %s", ErrBadSignature, sig.KeyID)
	}
	return nil
}

// readPEM reads the one PEM block of a key file.
func readPEM(path string) (*pem.Block, error) {
	// A regular file only, opened without blocking and read to a bound: a
	// FIFO or a device named as a key is refused, never waited on.
	buf, err := inroot.ReadPath(path, maxKeyFile)
	if errors.Is(err, inroot.ErrTooLarge) {
		return nil, fmt.Errorf("key file %s: larger than %d bytes", path, maxKeyFile)
	}
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(buf)
	if block == nil {
		return nil, fmt.Errorf("key file %s: no PEM block (want an Ed25519 key as openssl genpkey -algorithm ed25519 writes it)", path)
	}
	return block, nil
}

// LoadSigner reads an Ed25519 private key (PEM, PKCS #8).
func LoadSigner(path string) (*Signer, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: a %q PEM block, want \"PRIVATE KEY\" (PKCS #8 Ed25519)", path, block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: a %T, want an Ed25519 key", path, k)
	}
	s := &Signer{key: priv}
	s.ID = KeyID(s.Public())
	return s, nil
}

// LoadTrust reads trusted keys: Ed25519 public keys (PEM, PKIX), or private
// key files, whose public half is trusted.
func LoadTrust(paths ...string) (*Trust, error) {
	t := &Trust{keys: map[string]ed25519.PublicKey{}}
	for _, path := range paths {
		block, err := readPEM(path)
		if err != nil {
			return nil, fmt.Errorf("trusted key: %w", err)
		}
		var pub ed25519.PublicKey
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("trusted key %s: %w", path, err)
			}
			var ok bool
			if pub, ok = k.(ed25519.PublicKey); !ok {
				return nil, fmt.Errorf("trusted key %s: a %T, want an Ed25519 key", path, k)
			}
		case "PRIVATE KEY":
			s, err := LoadSigner(path)
			if err != nil {
				return nil, fmt.Errorf("trusted key: %w", err)
			}
			pub = s.Public()
		default:
			return nil, fmt.Errorf("trusted key %s: a %q PEM block, want \"PUBLIC KEY\" (Ed25519)", path, block.Type)
		}
		t.keys[KeyID(pub)] = pub
	}
	if len(t.keys) == 0 {
		return nil, errors.New("trusted keys: none given")
	}
	return t, nil
}

// Generate makes a new key pair and writes the private key to priv (mode
// 0600, refused if it exists) and the public key to pub.
func Generate(priv, pub string) (*Signer, error) {
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	skDER, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	pkDER, err := x509.MarshalPKIXPublicKey(pk)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	f, err := os.OpenFile(priv, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: skDER}); err != nil {
		f.Close()
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkDER}), 0o644); err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return &Signer{key: sk, ID: KeyID(pk)}, nil
}
