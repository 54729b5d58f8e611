package dkms

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
}

// Sign appends a module signature to req.Module with the kernel's sign-file.
// Compressed modules must be signed before compression and are refused.
func Sign(ctx context.Context, req SignRequest) error {
	if !strings.HasSuffix(req.Module, ".ko") {
		return fmt.Errorf("sign %s: only plain .ko files can be signed (sign before compressing)", req.Module)
	}
	if !strings.HasPrefix(req.Key, "pkcs11:") {
		if _, err := os.Stat(req.Key); err != nil {
			return fmt.Errorf("sign %s: signing key %s: %w", filepath.Base(req.Module), req.Key, err)
		}
	}
	if _, err := os.Stat(req.Cert); err != nil {
		return fmt.Errorf("sign %s: signing certificate %s: %w", filepath.Base(req.Module), req.Cert, err)
	}
	cmd := exec.CommandContext(ctx, req.SignFile, req.Hash, req.Key, req.Cert, req.Module)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sign %s: %s %s %s %s: %w: %s", filepath.Base(req.Module), req.SignFile, req.Hash, req.Key, req.Cert, err, strings.TrimSpace(string(out)))
	}
	return nil
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
	data, err := os.ReadFile(path)
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

// Signature is what a module's appended PKCS#7 signature says about its
// signer, in the form kmod's modinfo prints it.
type Signature struct {
	// Signer is the common name of the signing certificate's issuer
	// (modinfo "signer"; sign-file's certificates are self-signed, so it is
	// also the subject).
	Signer string
	// SigKey is the certificate's serial number as colon-separated upper-case
	// hex bytes (modinfo "sig_key"), or its subject key identifier when the
	// signature names the key that way.
	SigKey string
	// HashAlgo is the digest algorithm, such as "sha256" (modinfo "sig_hashalgo").
	HashAlgo string
}

// moduleSigMagic ends a signed module.
const moduleSigMagic = "~Module signature appended~\n"

// ReadSignature reads the appended signature of the plain module file at
// path. It fails when the module is not signed or the signature is not
// PKCS#7.
func ReadSignature(path string) (*Signature, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("module signature: %w", err)
	}
	if !bytes.HasSuffix(data, []byte(moduleSigMagic)) {
		return nil, fmt.Errorf("module signature of %s: the module is not signed", path)
	}
	rest := data[:len(data)-len(moduleSigMagic)]
	const infoSize = 12 // struct module_signature
	if len(rest) < infoSize {
		return nil, fmt.Errorf("module signature of %s: truncated", path)
	}
	info := rest[len(rest)-infoSize:]
	if idType := info[2]; idType != 2 { // PKEY_ID_PKCS7
		return nil, fmt.Errorf("module signature of %s: id type %d, want PKCS#7 (2)", path, idType)
	}
	sigLen := int(binary.BigEndian.Uint32(info[8:]))
	rest = rest[:len(rest)-infoSize]
	if sigLen <= 0 || sigLen > len(rest) {
		return nil, fmt.Errorf("module signature of %s: signature length %d does not fit the file", path, sigLen)
	}
	sig, err := parsePKCS7Signer(rest[len(rest)-sigLen:])
	if err != nil {
		return nil, fmt.Errorf("module signature of %s: %w", path, err)
	}
	return sig, nil
}

// ASN.1 of the parts of a PKCS#7 SignedData (RFC 2315) ReadSignature needs.
type pkcs7ContentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"explicit,tag:0"`
}

type pkcs7SignedData struct {
	Version          int
	DigestAlgorithms asn1.RawValue
	ContentInfo      asn1.RawValue
	Certificates     asn1.RawValue     `asn1:"optional,tag:0"`
	CRLs             asn1.RawValue     `asn1:"optional,tag:1"`
	SignerInfos      []pkcs7SignerInfo `asn1:"set"`
}

type pkcs7SignerInfo struct {
	Version         int
	SID             asn1.RawValue
	DigestAlgorithm pkix.AlgorithmIdentifier
	AuthAttributes  asn1.RawValue `asn1:"optional,tag:0"`
	DigestEncAlg    pkix.AlgorithmIdentifier
	EncryptedDigest []byte
	UnauthAttrs     asn1.RawValue `asn1:"optional,tag:1"`
}

type pkcs7IssuerAndSerial struct {
	Issuer asn1.RawValue
	Serial *big.Int
}

// hashOIDs names the digest algorithms sign-file may use.
var hashOIDs = map[string]string{
	"1.3.14.3.2.26":          "sha1",
	"2.16.840.1.101.3.4.2.4": "sha224",
	"2.16.840.1.101.3.4.2.1": "sha256",
	"2.16.840.1.101.3.4.2.2": "sha384",
	"2.16.840.1.101.3.4.2.3": "sha512",
}

// parsePKCS7Signer returns the first signer of a DER PKCS#7 SignedData.
func parsePKCS7Signer(der []byte) (*Signature, error) {
	var ci pkcs7ContentInfo
	if _, err := asn1.Unmarshal(der, &ci); err != nil {
		return nil, fmt.Errorf("PKCS#7: %w", err)
	}
	if !ci.ContentType.Equal(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}) {
		return nil, fmt.Errorf("PKCS#7 content type %s, want signedData", ci.ContentType)
	}
	var sd pkcs7SignedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil {
		return nil, fmt.Errorf("PKCS#7 signedData: %w", err)
	}
	if len(sd.SignerInfos) == 0 {
		return nil, errors.New("PKCS#7 signedData has no signer")
	}
	si := sd.SignerInfos[0]
	s := &Signature{HashAlgo: hashOIDs[si.DigestAlgorithm.Algorithm.String()]}
	if s.HashAlgo == "" {
		s.HashAlgo = si.DigestAlgorithm.Algorithm.String()
	}
	switch {
	case si.SID.Class == asn1.ClassUniversal && si.SID.Tag == asn1.TagSequence:
		var ias pkcs7IssuerAndSerial
		if _, err := asn1.Unmarshal(si.SID.FullBytes, &ias); err != nil {
			return nil, fmt.Errorf("PKCS#7 signer: %w", err)
		}
		var rdn pkix.RDNSequence
		if _, err := asn1.Unmarshal(ias.Issuer.FullBytes, &rdn); err != nil {
			return nil, fmt.Errorf("PKCS#7 signer issuer: %w", err)
		}
		var name pkix.Name
		name.FillFromRDNSequence(&rdn)
		s.Signer = name.CommonName
		s.SigKey = colonHex(ias.Serial.Bytes())
	case si.SID.Class == asn1.ClassContextSpecific && si.SID.Tag == 0:
		s.SigKey = colonHex(si.SID.Bytes)
	default:
		return nil, fmt.Errorf("PKCS#7 signer identifier has class %d tag %d", si.SID.Class, si.SID.Tag)
	}
	return s, nil
}

// colonHex formats bytes as kmod does: upper-case hex pairs joined by ':'.
func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02X", c)
	}
	return strings.Join(parts, ":")
}

// CertSigKey returns the serial number of the certificate at path formatted
// as Signature.SigKey, and its subject's common name.
func CertSigKey(path string) (sigKey, commonName string, err error) {
	cert, err := readCert(path)
	if err != nil {
		return "", "", err
	}
	return colonHex(cert.SerialNumber.Bytes()), cert.Subject.CommonName, nil
}
