// Package modsig reads the signer of a kernel module's appended signature
// (struct module_signature and the PKCS#7 SignedData scripts/sign-file
// writes) in the form kmod's modinfo prints it: signer, sig_key,
// sig_hashalgo. The build side records it in a set's manifest, so that a
// boot can tell which certificate a driver set needs the kernel to trust;
// /init itself never parses ASN.1.
package modsig

import (
	"bytes"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
)

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

// Magic ends a signed module.
const Magic = "~Module signature appended~\n"

// ReadFile reads the appended signature of the plain module file at
// path. It fails when the module is not signed or the signature is not
// PKCS#7.
func ReadFile(path string) (*Signature, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("module signature: %w", err)
	}
	sig, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("module signature of %s: %w", path, err)
	}
	return sig, nil
}

// Parse reads the appended signature of a plain module image. It fails when
// the module is not signed or the signature is not PKCS#7.
func Parse(data []byte) (*Signature, error) {
	if !bytes.HasSuffix(data, []byte(Magic)) {
		return nil, errors.New("the module is not signed")
	}
	rest := data[:len(data)-len(Magic)]
	const infoSize = 12 // struct module_signature
	if len(rest) < infoSize {
		return nil, errors.New("truncated")
	}
	info := rest[len(rest)-infoSize:]
	if idType := info[2]; idType != 2 { // PKEY_ID_PKCS7
		return nil, fmt.Errorf("id type %d, want PKCS#7 (2)", idType)
	}
	sigLen := int(binary.BigEndian.Uint32(info[8:]))
	rest = rest[:len(rest)-infoSize]
	if sigLen <= 0 || sigLen > len(rest) {
		return nil, fmt.Errorf("signature length %d does not fit the file", sigLen)
	}
	return ParsePKCS7(rest[len(rest)-sigLen:])
}

// ASN.1 of the parts of a PKCS#7 SignedData (RFC 2315) Parse needs.
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

// ParsePKCS7 returns the first signer of a DER PKCS#7 SignedData, the
// blob before a module's struct module_signature.
func ParsePKCS7(der []byte) (*Signature, error) {
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
		s.SigKey = ColonHex(ias.Serial.Bytes())
	case si.SID.Class == asn1.ClassContextSpecific && si.SID.Tag == 0:
		s.SigKey = ColonHex(si.SID.Bytes)
	default:
		return nil, fmt.Errorf("PKCS#7 signer identifier has class %d tag %d", si.SID.Class, si.SID.Tag)
	}
	return s, nil
}

// colonHex formats bytes as kmod does: upper-case hex pairs joined by ':'.
func ColonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02X", c)
	}
	return strings.Join(parts, ":")
}
