// Package modkey keeps the module signing key kpreload makes on first use,
// as Debian's and Ubuntu's DKMS make their Machine Owner Key
// (/var/lib/dkms/mok.key): a Secure Boot image whose recipes name no
// signing key has its modules signed with this one. The key lives with the
// module cache (<cache>/module-signing/), the private key readable by its
// owner only, and is reused by every later build until it is rotated.
package modkey

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modsig"
)

// DirName is the key's directory inside the module cache directory.
const DirName = "module-signing"

// File names inside the key's directory.
const (
	KeyName     = "signing_key.pem"  // the private key, PKCS #8 PEM, mode 0600
	CertName    = "signing_key.x509" // the certificate, DER: what mokutil --import takes
	CertPEMName = "signing_key.crt"  // the same certificate, PEM
)

// CommonName is the subject common name of the certificates kpreload makes;
// modinfo prints it as the modules' signer.
const CommonName = "kpreload module signing key"

// OIDModuleSigning is the extended key usage the kernel's own x509.genkey
// gives module signing keys (1.3.6.1.4.1.2312.16.1.2).
var OIDModuleSigning = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 2312, 16, 1, 2}

// Key is the module signing key of a module cache.
type Key struct {
	// Dir is its directory; Key, Cert and CertPEM its files.
	Dir, Key, Cert, CertPEM string
	// Certificate is the parsed certificate.
	Certificate *x509.Certificate
}

// SigKey is the certificate's serial number as modinfo prints sig_key.
func (k *Key) SigKey() string { return modsig.ColonHex(k.Certificate.SerialNumber.Bytes()) }

// Dir returns the key's directory for the module cache cacheDir.
func Dir(cacheDir string) string { return filepath.Join(cacheDir, DirName) }

// Load reads the key of cacheDir; an error wrapping fs.ErrNotExist when
// there is none yet.
func Load(cacheDir string) (*Key, error) {
	return load(Dir(cacheDir))
}

// MaxFile bounds each file of the key's directory as Load reads it: a
// certificate or an RSA private key in PEM is a few KiB.
const MaxFile = 64 << 10

// load reads the key in dir. Every file is read, or checked, as a regular
// file of at most MaxFile bytes (inroot.ReadPath): a FIFO, a device or a
// directory in its place is refused at once, never waited on; the PEM
// certificate must hold the DER one.
func load(dir string) (*Key, error) {
	k := &Key{Dir: dir, Key: filepath.Join(dir, KeyName), Cert: filepath.Join(dir, CertName), CertPEM: filepath.Join(dir, CertPEMName)}
	// sign-file reads the private key: it must be a regular file too.
	if _, err := inroot.ReadPath(k.Key, MaxFile); err != nil {
		return nil, fmt.Errorf("module signing key: %w", err)
	}
	st, err := os.Stat(k.Key)
	if err != nil {
		return nil, fmt.Errorf("module signing key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("module signing key %s has mode %04o: others may read it (want 0600; chmod 600 it, or rotate the key)", k.Key, st.Mode().Perm())
	}
	der, err := inroot.ReadPath(k.Cert, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("module signing certificate: %w", err)
	}
	if k.Certificate, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("module signing certificate %s: %w", k.Cert, err)
	}
	p, err := inroot.ReadPath(k.CertPEM, MaxFile)
	if err != nil {
		return nil, fmt.Errorf("module signing certificate: %w", err)
	}
	if b, _ := pem.Decode(p); b == nil || b.Type != "CERTIFICATE" || !bytes.Equal(b.Bytes, der) {
		return nil, fmt.Errorf("module signing certificate %s is not the PEM form of %s (rotate the key)", k.CertPEM, k.Cert)
	}
	return k, nil
}

// PEM is the certificate in PEM, as CertPEMName holds it.
func (k *Key) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.Certificate.Raw})
}

// Ensure returns the key of cacheDir, making it first when there is none
// (created says so). Two builds that make one at once end with the same key:
// each writes a complete directory aside and renames it into place, and the
// loser reads the winner's.
func Ensure(cacheDir string) (k *Key, created bool, err error) {
	k, err = Load(cacheDir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, false, fmt.Errorf("module signing key: %w", err)
	}
	tmp, err := generate(cacheDir)
	if err != nil {
		return nil, false, err
	}
	if err := os.Rename(tmp, Dir(cacheDir)); err != nil {
		os.RemoveAll(tmp)
		if k, lerr := Load(cacheDir); lerr == nil {
			return k, false, nil // made by another build meanwhile
		}
		return nil, false, fmt.Errorf("module signing key: %w", err)
	}
	k, err = Load(cacheDir)
	return k, err == nil, err
}

// Rotate makes a new key for cacheDir and keeps the old one, if any, under
// Dir(cacheDir)/retired-<serial>/, returning both (old is nil when there was
// none).
func Rotate(cacheDir string) (old, cur *Key, err error) {
	old, err = Load(cacheDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	if old == nil {
		cur, _, err = Ensure(cacheDir)
		return nil, cur, err
	}
	tmp, err := generate(cacheDir)
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	// The old files move into the retired directory, then the new ones in.
	retired := filepath.Join(Dir(cacheDir), "retired-"+old.Certificate.SerialNumber.Text(16))
	if err := os.Mkdir(retired, 0o700); err != nil {
		return nil, nil, fmt.Errorf("rotate the module signing key: %w", err)
	}
	for _, n := range []string{KeyName, CertName, CertPEMName} {
		if err := os.Rename(filepath.Join(old.Dir, n), filepath.Join(retired, n)); err != nil {
			return nil, nil, fmt.Errorf("rotate the module signing key: %w", err)
		}
	}
	for _, n := range []string{CertName, CertPEMName, KeyName} {
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(old.Dir, n)); err != nil {
			return nil, nil, fmt.Errorf("rotate the module signing key: %w", err)
		}
	}
	if old, err = load(retired); err != nil {
		return nil, nil, err
	}
	cur, err = Load(cacheDir)
	return old, cur, err
}

// generate writes a new key and certificate into a fresh directory in
// cacheDir (mode 0700) and returns it. The certificate carries what the
// kernel's x509.genkey and DKMS's mok give a module signing key: a
// self-signed RSA 2048 certificate, not a CA, digitalSignature, the
// codeSigning and module-signing extended key usages, subject and authority
// key ids, valid for 100 years.
func generate(cacheDir string) (string, error) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", fmt.Errorf("module signing key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", fmt.Errorf("module signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return "", fmt.Errorf("module signing key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		Key       asn1.BitString
	}
	if _, err := asn1.Unmarshal(pub, &spki); err != nil {
		return "", fmt.Errorf("module signing key: %w", err)
	}
	skid := sha1.Sum(spki.Key.Bytes) // RFC 5280's method 1, as OpenSSL does
	now := time.Now().UTC().Truncate(time.Second)
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial.Add(serial, big.NewInt(1)),
		Subject:               pkix.Name{CommonName: CommonName, Organization: []string{"kpreload"}, OrganizationalUnit: []string{host}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(100, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		UnknownExtKeyUsage:    []asn1.ObjectIdentifier{OIDModuleSigning},
		BasicConstraintsValid: true,
		IsCA:                  false,
		SubjectKeyId:          skid[:],
		AuthorityKeyId:        skid[:],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return "", fmt.Errorf("module signing certificate: %w", err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("module signing key: %w", err)
	}
	dir, err := os.MkdirTemp(cacheDir, DirName+".new-")
	if err != nil {
		return "", fmt.Errorf("module signing key: %w", err)
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{KeyName, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600},
		{CertName, der, 0o644},
		{CertPEMName, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644},
	}
	for _, f := range files {
		if err := writeSynced(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("module signing key: %w", err)
		}
	}
	return dir, nil
}

// writeSynced creates path with exactly mode (whatever the umask) and data, synced.
func writeSynced(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ShimLockGUID is the UEFI vendor GUID of shim's variables (MokList):
// virt-fw-vars --add-mok takes it.
const ShimLockGUID = "605dab50-e046-4300-abb6-3dd810dd8b23"

// Enroll returns the commands that make a machine trust k: mokutil on a
// running machine with shim, and virt-fw-vars for an OVMF variable store.
func (k *Key) Enroll() []string {
	return []string{
		"mokutil --import " + k.Cert + "   # on the machine; reboot and confirm at the console (MokManager)",
		"virt-fw-vars --input VARS.fd --add-mok " + ShimLockGUID + " " + k.CertPEM + " --output VARS-mok.fd   # an OVMF variable store",
	}
}
