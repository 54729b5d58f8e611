package dkms

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/builder/internal/runner"
	"github.com/kpreload/kpreload/internal/inroot"
	"github.com/kpreload/kpreload/kmodcache/modsig"
)

// Module signing. The kernel verifies an appended PKCS#7 signature made by
// its own scripts/sign-file (a small C program linked against libcrypto).
// Debian ships sign-file in the linux-kbuild-<version> package, not in
// linux-headers-<release>: the headers' scripts directory is a relative
// symbolic link, ../../lib/linux-kbuild-<version>/scripts, which resolves
// inside the unpacked tree when scripts/kernels.sh has unpacked linux-kbuild
// next to the headers (it does). SignFile finds it through that link.

// SignFile returns the kernel's sign-file program for the headers tree
// headersDir (<root>/usr/src/linux-headers-<release>): headersDir/scripts/sign-file.
func SignFile(headersDir string) (string, error) {
	p := filepath.Join(headersDir, "scripts", "sign-file")
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("kernel headers %s have no scripts/sign-file (Debian ships it in the linux-kbuild-<version> package, which scripts/kernels.sh unpacks beside the headers): %w", headersDir, err)
	}
	if st.Mode()&0o111 == 0 || !st.Mode().IsRegular() {
		return "", fmt.Errorf("kernel headers %s: %s is not an executable file", headersDir, p)
	}
	return p, nil
}

// SignRequest is one module file to sign in place.
type SignRequest struct {
	// SignFile is the kernel's sign-file program (see SignFile).
	SignFile string
	// Hash is the digest algorithm, such as "sha256".
	Hash string
	// Key is the private key: a PEM file or a pkcs11: URI.
	Key string
	// Cert is the X.509 certificate (PEM or DER) matching Key.
	Cert string
	// Module is the plain (uncompressed) .ko file to sign; it is replaced
	// by the signed file.
	Module string
	// Runner runs sign-file (nil: runner.Default).
	Runner runner.Runner
}

// Sign appends a module signature to req.Module with the kernel's sign-file.
// Compressed modules must be signed before compression and are refused.
func Sign(ctx context.Context, req SignRequest) error {
	if !strings.HasSuffix(req.Module, ".ko") {
		return fmt.Errorf("sign %s: only plain .ko files can be signed (sign before compressing)", req.Module)
	}
	// sign-file reads both: each must be a regular file (a FIFO would
	// hold it, and the build, forever).
	if !strings.HasPrefix(req.Key, "pkcs11:") {
		if err := regular(req.Key); err != nil {
			return fmt.Errorf("sign %s: signing key: %w", filepath.Base(req.Module), err)
		}
	}
	if err := regular(req.Cert); err != nil {
		return fmt.Errorf("sign %s: signing certificate: %w", filepath.Base(req.Module), err)
	}
	c := runner.Cmd{Name: req.SignFile, Args: []string{req.Hash, req.Key, req.Cert, req.Module}, Env: []string{"LC_ALL=C"}}
	if _, err := runner.Or(req.Runner).Run(ctx, c); err != nil {
		return fmt.Errorf("sign %s: %w", filepath.Base(req.Module), err)
	}
	return nil
}

// regular checks that path is a regular file (inroot.OpenPath: a FIFO, a
// device or a directory is refused, never waited on).
func regular(path string) error {
	f, err := inroot.OpenPath(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// CertID returns the identity of a signing certificate (PEM or DER) for a
// build's cache key: "sha256:" and the hex SHA-256 of its DER encoding.
func CertID(path string) (string, error) {
	cert, err := readCert(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// readCert reads and parses an X.509 certificate in PEM or DER form.
func readCert(path string) (*x509.Certificate, error) {
	data, err := inroot.ReadPath(path, inroot.MaxText)
	if err != nil {
		return nil, fmt.Errorf("signing certificate: %w", err)
	}
	der := data
	if b, _ := pem.Decode(data); b != nil {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("signing certificate %s: PEM block is %q, want CERTIFICATE", path, b.Type)
		}
		der = b.Bytes
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %s: %w", path, err)
	}
	return cert, nil
}

// CertSigKey returns the serial number of the certificate at path formatted
// as modsig.Signature.SigKey, and its subject's common name.
func CertSigKey(path string) (sigKey, commonName string, err error) {
	cert, err := readCert(path)
	if err != nil {
		return "", "", err
	}
	return modsig.ColonHex(cert.SerialNumber.Bytes()), cert.Subject.CommonName, nil
}
