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
// What is signed is a Statement: every field a client uses to choose a
// cell (its cache key digest, the registry tag; its state; its subject, the
// set id, i.e. the SHA-256 of the set's canonical manifest, which names
// every module's digest and aliases, or for a recorded build failure the
// digest of its record; driver, version, flavour, kernel, recipe, when it
// was made and its generation), as JSON. The statement's bytes and the
// signature over them travel in the cell's OCI manifest annotations; a
// client reads those fields from the verified statement only.
package cellsign

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/names"
)

// Signature is a cell's signature as the registry carries it.
type Signature struct {
	// KeyID names the key that made it (see KeyID).
	KeyID string
	// Value is the Ed25519 signature, base64 (standard encoding).
	Value string
}

// ErrUnsigned, ErrUntrusted, ErrBadSignature, ErrOldFormat and
// ErrBadStatement are wrapped by Verify's errors.
var (
	ErrUnsigned     = errors.New("the cell is not signed")
	ErrUntrusted    = errors.New("the cell is signed by a key that is not trusted")
	ErrBadSignature = errors.New("the cell's signature does not verify")
	// ErrOldFormat: the cell carries a signature of the first format,
	// which covered only its key, state and set; what it did not cover
	// (recipe, creation time, generation) decides which cell a pull takes,
	// so such a cell is refused: push it again with --sign.
	ErrOldFormat    = errors.New("the cell's signature is of the old format (it covers only the key, state and set, not the recipe, creation time or generation); push the cell again with a current kpreload and --sign")
	ErrBadStatement = errors.New("the cell's signed statement is not one this kpreload reads")
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

// StatementFormat names the statement format this package signs and reads.
const StatementFormat = "kpreload-cell-statement/2"

// signaturePrefix separates a signature over a statement from any other use
// of the key.
const signaturePrefix = "kpreload-cell-signature-v2\n"

// Statement is what a cell's signature covers: every field a client uses
// to choose a cell. Aliases are covered through Subject: the set's
// manifest lists every module's aliases and digest, and the store derives
// them again from the module files.
type Statement struct {
	// Format is StatementFormat.
	Format string `json:"format"`
	// Key is the cell's cache key digest, its registry tag.
	Key string `json:"key"`
	// State is "ok" or "failed".
	State string `json:"state"`
	// Subject is the set id (state ok) or the failure record's digest.
	Subject string `json:"subject"`
	// Driver, Version, Flavor and Kernel name what the cell is for.
	Driver  string `json:"driver"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	Kernel  string `json:"kernel"`
	// Recipe is the recipe the cell was built from ("" if unknown).
	Recipe string `json:"recipe,omitempty"`
	// Created is when the cell was signed (RFC 3339, UTC).
	Created string `json:"created"`
	// Generation orders the cells of one driver, version, flavour and
	// kernel: a later cell has a higher one.
	Generation uint64 `json:"generation"`
}

// maxStatement bounds a statement's size.
const maxStatement = 16 << 10

// Signer signs cells with one private key.
type Signer struct {
	key ed25519.PrivateKey
	// ID is the KeyID of its public key.
	ID string
}

// Sign signs st (its Format set to StatementFormat) and returns the
// statement's bytes, which the signature covers, and the signature.
func (s *Signer) Sign(st Statement) ([]byte, Signature, error) {
	st.Format = StatementFormat
	b, err := json.Marshal(st)
	if err != nil {
		return nil, Signature{}, fmt.Errorf("sign: %w", err)
	}
	sig := ed25519.Sign(s.key, append([]byte(signaturePrefix), b...))
	return b, Signature{KeyID: s.ID, Value: base64.StdEncoding.EncodeToString(sig)}, nil
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

// Verify checks sig over statement (the bytes the cell carries): it must
// be made by a trusted key, verify, and be a statement of StatementFormat,
// which it returns. A signature without a statement is of the old format
// (ErrOldFormat). The error names the key.
func (t *Trust) Verify(statement []byte, sig Signature) (*Statement, error) {
	if sig.KeyID == "" && sig.Value == "" {
		return nil, fmt.Errorf("%w (trusted: %s)", ErrUnsigned, strings.Join(t.IDs(), ", "))
	}
	pub, ok := t.keys[sig.KeyID]
	if !ok {
		return nil, fmt.Errorf("%w: %s (trusted: %s)", ErrUntrusted, sig.KeyID, strings.Join(t.IDs(), ", "))
	}
	if len(statement) == 0 {
		return nil, fmt.Errorf("%w (key %s)", ErrOldFormat, sig.KeyID)
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Value)
	if err != nil || len(raw) != ed25519.SignatureSize || len(statement) > maxStatement ||
		!ed25519.Verify(pub, append([]byte(signaturePrefix), statement...), raw) {
		return nil, fmt.Errorf("%w with key %s", ErrBadSignature, sig.KeyID)
	}
	var st Statement
	dec := json.NewDecoder(bytes.NewReader(statement))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil || dec.More() {
		return nil, fmt.Errorf("%w: signed by %s but does not parse: %v", ErrBadStatement, sig.KeyID, err)
	}
	if st.Format != StatementFormat {
		return nil, fmt.Errorf("%w: format %.40q, this kpreload reads %q", ErrBadStatement, st.Format, StatementFormat)
	}
	if err := st.checkNames(); err != nil {
		return nil, fmt.Errorf("%w: signed by %s: %w", ErrBadStatement, sig.KeyID, err)
	}
	return &st, nil
}

// checkNames refuses a statement whose driver, version, flavour or kernel is
// given and is not a name (kmodcache/names): a client makes paths of them,
// so a signature does not make them safe.
func (st *Statement) checkNames() error {
	return errors.Join(names.CheckOptional("driver", st.Driver), names.CheckOptional("version", st.Version),
		names.CheckOptional("flavor", st.Flavor), names.CheckOptional("kernel", st.Kernel))
}

// readPEM reads the PEM blocks of a key file: at least one, nothing but
// blanks between and around them.
func readPEM(path string) ([]*pem.Block, error) {
	// A regular file only, opened without blocking and read to a bound: a
	// FIFO or a device named as a key is refused, never waited on.
	buf, err := inroot.ReadPath(path, maxKeyFile)
	if errors.Is(err, inroot.ErrTooLarge) {
		return nil, fmt.Errorf("key file %s: larger than %d bytes", path, maxKeyFile)
	}
	if err != nil {
		return nil, err
	}
	var blocks []*pem.Block
	for rest := buf; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		blocks = append(blocks, block)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("key file %s: no PEM block (want an Ed25519 key as openssl genpkey -algorithm ed25519 writes it)", path)
	}
	return blocks, nil
}

// LoadSigner reads an Ed25519 private key (PEM, PKCS #8): one block.
func LoadSigner(path string) (*Signer, error) {
	blocks, err := readPEM(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if len(blocks) != 1 {
		return nil, fmt.Errorf("signing key %s: %d PEM blocks, want one private key", path, len(blocks))
	}
	return parseSigner(path, blocks[0])
}

// parseSigner reads a private key block of the file path.
func parseSigner(path string, block *pem.Block) (*Signer, error) {
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

// LoadTrust reads trusted keys: every PEM block of every file, each an
// Ed25519 public key (PKIX) or a private key (PKCS #8), whose public half
// is trusted. A file may hold several keys (a bundle), and all are trusted.
// A key given twice (in two files, or twice in one) is an error naming
// both places: a list of trusted keys that repeats one is a mistake worth
// fixing (a key meant to be there in its place may be missing).
func LoadTrust(paths ...string) (*Trust, error) {
	t := &Trust{keys: map[string]ed25519.PublicKey{}}
	where := map[string]string{}
	for _, path := range paths {
		blocks, err := readPEM(path)
		if err != nil {
			return nil, fmt.Errorf("trusted key: %w", err)
		}
		for i, block := range blocks {
			name := path
			if len(blocks) > 1 {
				name = fmt.Sprintf("%s (key %d of %d)", path, i+1, len(blocks))
			}
			pub, err := parsePublic(name, block)
			if err != nil {
				return nil, err
			}
			id := KeyID(pub)
			if prev, dup := where[id]; dup {
				return nil, fmt.Errorf("trusted key %s: %s is given twice, also as %s", name, id, prev)
			}
			where[id] = name
			t.keys[id] = pub
		}
	}
	if len(t.keys) == 0 {
		return nil, errors.New("trusted keys: none given")
	}
	return t, nil
}

// parsePublic reads a trusted key's block; name names it in errors.
func parsePublic(name string, block *pem.Block) (ed25519.PublicKey, error) {
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("trusted key %s: %w", name, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("trusted key %s: a %T, want an Ed25519 key", name, k)
		}
		return pub, nil
	case "PRIVATE KEY":
		s, err := parseSigner(name, block)
		if err != nil {
			return nil, fmt.Errorf("trusted key: %w", err)
		}
		return s.Public(), nil
	}
	return nil, fmt.Errorf("trusted key %s: a %q PEM block, want \"PUBLIC KEY\" (Ed25519)", name, block.Type)
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
